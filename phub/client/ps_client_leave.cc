// PsClient's leave: BYE on every data connection, each connection finished behind it (nothing
// this worker sent is lost to the close), then the Goodbye on the control connection; or, for a
// worker that abandons the job or lost phubd, the connections closed without a word. Every
// wait is bounded: a stopped phubd costs Close its liveness bound (10 s by default) and at most
// 5 s for the Goodbye.
#include <boost/asio/ip/tcp.hpp>

#include "absl/strings/str_cat.h"
#include "phub/client/ps_client_impl.h"
#include "spdlog/spdlog.h"

namespace phub::client {

namespace asio = boost::asio;

namespace {
// How long Close waits for phubd to take this worker's last messages (the BYE out and phubd's
// end of each data connection) where phubd's liveness bound is off. Otherwise that bound
// (--liveness-timeout-ms, from the Welcome) applies: the time after which this worker takes a
// silent phubd for stopped; a big model's last pushes on a slow link may need more than any
// fixed figure, and a deployment tunes this bound to its links already.
constexpr std::chrono::milliseconds kLeaveLimitWithoutLiveness{10000};
// How long Close waits for the Goodbye to go out behind a Heartbeat being written.
constexpr std::chrono::milliseconds kGoodbyeLimit{5000};

// What Close waits on, shared with the callbacks, which may run after Close returned.
struct Leaving {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t remaining = 0;  // data connections not yet finished
  bool gave_up = false;       // Close stopped waiting for them: it said so, once
  bool goodbye_out = false;
};
}  // namespace

Status PsClient::Impl::Close(bool goodbye) {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  bool broken;
  {
    std::lock_guard lock(mu_);
    broken = !error_.status().ok();
  }
  closing_ = true;
  // Weights still in flight can no longer arrive (the connections close and their loss is not
  // an error now): a Wait blocked on them, on another thread or later, and every later Push,
  // Wait or Init return this instead of waiting for good.
  error_.Record(absl::FailedPreconditionError(
      "the client is closed: Close() was called, so no more weights arrive"));
  std::uint64_t iterations = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : tensors_) iterations = std::max(iterations, t.iteration);
  }
  // A failed Handshake has nothing to say goodbye on; a client that lost phubd (or was
  // dropped) must not say it: a Goodbye means "done", and this worker may be about to rejoin.
  // Nor does one abandoning the job, for the same reason.
  if (!started_ || broken || !goodbye) {
    RunOnEachLoop([&](std::size_t k) {
      for (std::uint32_t core = 0; core < connections_.size(); ++core) {
        if (loop_of_core(core) != k) continue;
        connections_[core]->Close(absl::CancelledError(broken    ? "the client failed"
                                                       : goodbye ? "the handshake failed"
                                                                 : "the worker abandoned the job"));
      }
    });
    loop_.Run([&] {
      if (heartbeat_timer_) heartbeat_timer_->cancel();
      boost::system::error_code ignored;
      control_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      control_.close(ignored);
    });
    return absl::OkStatus();
  }
  // BYE on every data connection, then Finish it: phubd reads everything this worker sent, the
  // BYE last, before the connection ends. (Closing it once the BYE was out reset it when
  // phubd's weights were still arriving, and the reset threw away what this side's kernel had
  // not delivered yet: the last pushes and the BYE; phubd took the worker for lost.) Bounded: a
  // phubd that is stopped or hung takes no BYE; its connections close after `limit`.
  const std::chrono::milliseconds limit = liveness_timeout_ms_ > 0
                                              ? std::chrono::milliseconds(liveness_timeout_ms_)
                                              : kLeaveLimitWithoutLiveness;
  auto leaving = std::make_shared<Leaving>();
  leaving->remaining = connections_.size();
  const std::uint32_t rank = membership_.rank;
  RunOnEachLoop([&](std::size_t k) {
    for (std::uint32_t core = 0; core < senders_.size(); ++core) {
      if (loop_of_core(core) != k) continue;
      const std::shared_ptr<transport::SendScheduler>& sender = senders_[core];
      const std::shared_ptr<Connection>& c = sender->connection();
      const WireHeader bye_header{Op::kBye, rank, 0, 0, 0};
      sender->Send(bye_header, {}, [leaving, c, rank, limit](const Status& bye) {
        c->Finish(limit, [leaving, rank, peer = c->peer(), bye](const Status& how) {
          std::lock_guard lock(leaving->mu);
          if ((!bye.ok() || !how.ok()) && !leaving->gave_up) {
            spdlog::warn("rank {}: leaving through {}: {}; phubd may take this worker for lost",
                         rank, peer, (bye.ok() ? how : bye).message());
          }
          --leaving->remaining;
          leaving->cv.notify_all();
        });
      });
    }
  });
  bool left;
  {
    std::unique_lock lock(leaving->mu);
    left = leaving->cv.wait_for(lock, limit, [&] { return leaving->remaining == 0; });
    leaving->gave_up = !left;
  }
  if (!left) {
    spdlog::warn("rank {}: phubd took this worker's BYE on none or only some of its {} data "
                 "connections within {} ms (is it stopped, hung or overloaded?): closing them; "
                 "phubd may take this worker for lost", rank, connections_.size(), limit.count());
    RunOnEachLoop([&](std::size_t k) {
      for (std::uint32_t core = 0; core < connections_.size(); ++core) {
        if (loop_of_core(core) != k) continue;
        connections_[core]->Close(absl::DeadlineExceededError(absl::StrCat(
            "phubd did not take this worker's BYE within ", limit.count(),
            " ms: is it stopped (SIGSTOP), hung or overloaded?")));
      }
    });
  }
  // The Goodbye goes behind any Heartbeat still being written (one write at a time).
  loop_.Run([&] {
    if (heartbeat_timer_) heartbeat_timer_->cancel();
    if (!control_.is_open()) {
      leaving->goodbye_out = true;
      return;
    }
    proto::ControlMessage goodbye;
    goodbye.mutable_goodbye()->set_iterations(iterations);
    SendControl(goodbye, [leaving] {
      std::lock_guard lock(leaving->mu);
      leaving->goodbye_out = true;
      leaving->cv.notify_all();
    });
  });
  {
    // Bounded: a phubd that does not read gets no more than this.
    std::unique_lock lock(leaving->mu);
    leaving->cv.wait_for(lock, kGoodbyeLimit, [&] { return leaving->goodbye_out; });
  }
  loop_.Run([&] {
    boost::system::error_code ignored;
    control_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    control_.close(ignored);
  });
  return absl::OkStatus();
}

}  // namespace phub::client
