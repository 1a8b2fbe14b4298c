// RingAllreduce's implementation (ring_allreduce.cc), with its links set up by ring_links.cc.
// Not part of the public API (ring_allreduce.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/common/first_error.h"
#include "phub/ring/ring_allreduce.h"
#include "phub/ring/ring_links.h"
#include "phub/transport/connection.h"
#include "phub/transport/event_loop.h"

namespace phub::ring {

// Runs every connection on one event-loop thread; a call's state lives on that thread, the
// caller only waits on `cv_`.
class RingAllreduce::Impl final : public transport::ConnectionHandler {
 public:
  using Connection = transport::Connection;
  using Op = transport::Op;
  using WireHeader = transport::WireHeader;

  Impl(RingOptions options, Membership membership)
      : options_(std::move(options)),
        loop_(absl::StrCat("ring ", membership.rank), /*pin_core=*/-1),
        world_(membership.world_size),
        rank_(membership.rank),
        error_(mu_, cv_) {}
  ~Impl() override;  // leaves cleanly: BYE to both neighbours


  Status Setup();
  Status Allreduce(std::span<float> data, ReduceOp op);

  StatusOr<std::span<std::byte>> ResolveSlot(Connection& connection,
                                             const WireHeader& header) override;
  Status OnReceived(Connection& connection, const WireHeader& header) override;
  void OnClosed(Connection& connection, const Status& why) override;

 private:
  // A message of the next call that arrived before this rank started it.
  struct Early {
    WireHeader header;
    std::vector<std::byte> payload;
  };

  std::uint32_t Segment(std::int64_t x) const {
    const std::int64_t n = world_;
    return static_cast<std::uint32_t>(((x % n) + n) % n);
  }
  std::uint64_t SegmentBegin(std::uint32_t s) const { return s * data_.size() / world_; }
  std::uint64_t SegmentSize(std::uint32_t s) const { return SegmentBegin(s + 1) - SegmentBegin(s); }
  std::uint64_t Pieces(std::uint32_t s) const {
    return (SegmentSize(s) + piece_elems_ - 1) / piece_elems_;
  }
  std::span<float> Piece(std::uint32_t s, std::uint64_t j) const {
    std::uint64_t offset = j * piece_elems_;
    return data_.subspan(SegmentBegin(s) + offset, std::min(piece_elems_, SegmentSize(s) - offset));
  }
  // Bytes a piece of `elements` takes on the wire.
  std::uint64_t WireBytes(std::size_t elements) const { return elements * element_bytes_; }
  bool compact() const { return options_.wire != kernels::WireFormat::kFp32; }
  // With a compact wire: `piece`'s place in the compact mirror of data_.
  std::byte* MirrorOf(std::span<const float> piece) {
    return mirror_.data() + (piece.data() - data_.data()) * element_bytes_;
  }

  void Start();
  void SendPiece(Op op, std::uint32_t step, std::uint32_t segment, std::uint64_t piece);
  StatusOr<std::span<float>> Locate(const WireHeader& header) const;
  // `staged`: the payload as received (wire format), or null where it landed in place.
  Status Consume(const WireHeader& header, const std::byte* staged);
  void CheckDone();
  void Fail(const Status& status);

  RingOptions options_;
  transport::EventLoop loop_;
  const std::uint32_t world_;
  const std::uint32_t rank_;
  const std::uint64_t piece_elems_ = std::max<std::uint64_t>(1, options_.piece_bytes / 4);
  const std::size_t element_bytes_ = kernels::WireBytes(options_.wire);
  RingLinks links_;  // the transport, the acceptor and the link to rank+1; on loop_
  std::vector<std::shared_ptr<Connection>> pending_accepts_;  // until they ATTACH
  std::shared_ptr<Connection> prev_;
  std::atomic<bool> closing_{false};
  std::vector<const Connection*> said_bye_;  // neighbours that left cleanly
  std::string gone_;                         // non-empty once a neighbour has left

  // The call in progress, owned by the loop thread.
  std::span<float> data_;
  ReduceOp op_ = ReduceOp::kSum;
  std::uint64_t calls_started_ = 0;
  bool active_ = false;
  std::vector<std::byte> scratch_;  // one piece as received, reduce-scatter
  std::vector<std::byte> mirror_;   // compact wire: data_ in it, what is sent and gathered
  std::deque<Early> early_;
  // The last entry of early_ is still being received (its payload has not fully landed).
  bool receiving_early_ = false;
  // A call is done when every piece this rank must receive has arrived (reduce-scatter: all
  // segments but its own; allgather: all but the one it completed) and every send has left.
  std::uint64_t reduce_expected_ = 0, reduced_ = 0;
  std::uint64_t gather_expected_ = 0, gathered_ = 0, pending_sends_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool prev_attached_ = false;  // guarded by mu_
  bool call_done_ = false;      // guarded by mu_
  FirstError error_;            // status() guarded by mu_
};

}  // namespace phub::ring
