#include "phub/transport/finishing.h"

#include "absl/strings/str_cat.h"

namespace phub::transport {

void Finishing::Chain(Connection::FinishDone done) {
  done_ = [first = std::move(done_), done = std::move(done)](const Status& how) {
    if (first) first(how);
    if (done) done(how);
  };
}

void Finishing::Arm(std::chrono::milliseconds limit, const std::string& peer,
                    std::function<void(const Status&)> end) {
  limit_.expires_after(limit);
  limit_.async_wait([end = std::move(end), limit, peer](const boost::system::error_code& ec) {
    if (ec) return;
    end(absl::DeadlineExceededError(absl::StrCat(
        peer, " did not close its side within ", limit.count(),
        " ms of this side's end: closed anyway; what it had not received yet may be lost")));
  });
}

void Finishing::Closed(const Status& why) {
  limit_.cancel();
  if (Connection::FinishDone done = std::move(done_)) {
    // Closed by anything but the Finish's own end (an error, a local Close): not a clean one.
    done(how_ ? *how_
              : why.ok() ? absl::CancelledError("closed locally before the peer's end") : why);
  }
}

Status QueuedSendError(const Status& why) {
  return why.ok() ? absl::CancelledError("connection closed locally") : why;
}

}  // namespace phub::transport
