#include "phub/transport/send_scheduler.h"

#include <limits>
#include <utility>

namespace phub::transport {

std::shared_ptr<SendScheduler> SendScheduler::Create(std::shared_ptr<Connection> connection,
                                                     std::size_t window_bytes) {
  return std::shared_ptr<SendScheduler>(new SendScheduler(std::move(connection), window_bytes));
}

SendScheduler::Key SendScheduler::KeyOf(const WireHeader& header) {
  const std::uint64_t sequence = sequence_++;
  if (header.op == Op::kPush || header.op == Op::kInit || header.op == Op::kWeights) {
    return {epoch_, header.iteration, header.chunk, sequence};
  }
  // A barrier: after everything of its epoch, and it opens the next one.
  const Key key{epoch_, std::numeric_limits<std::uint64_t>::max(),
                std::numeric_limits<std::uint32_t>::max(), sequence};
  ++epoch_;
  return key;
}

void SendScheduler::Send(const WireHeader& header, std::span<const std::byte> payload,
                         Connection::SendDone done) {
  if (window_bytes_ == 0) {
    connection_->Send(header, payload, std::move(done));
    return;
  }
  held_.emplace(KeyOf(header), Held{header, payload, std::move(done)});
  Pump();
}

void SendScheduler::Pump() {
  // A send into a closed connection completes inside Send(), whose callback pumps again: the
  // outer loop carries on instead, so the held messages drain (and fail) one after the other
  // without recursion.
  if (pumping_) return;
  pumping_ = true;
  while (!held_.empty() && (in_flight_ == 0 || in_flight_bytes_ < window_bytes_)) {
    auto node = held_.extract(held_.begin());
    Held& message = node.mapped();
    Release(message.header, message.payload, std::move(message.done));
  }
  pumping_ = false;
}

void SendScheduler::Release(const WireHeader& header, std::span<const std::byte> payload,
                            Connection::SendDone done) {
  const std::size_t bytes = payload.size();
  in_flight_bytes_ += bytes;
  ++in_flight_;
  connection_->Send(header, payload,
                    [self = weak_from_this(), bytes, done = std::move(done)](const Status& s) {
                      if (auto scheduler = self.lock()) {
                        scheduler->in_flight_bytes_ -= bytes;
                        --scheduler->in_flight_;
                      }
                      if (done) done(s);
                      if (auto scheduler = self.lock()) scheduler->Pump();
                    });
}

}  // namespace phub::transport
