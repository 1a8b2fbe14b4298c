#include "phub/ring/ring_allreduce.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "phub/common/membership.h"
#include "phub/ring/ring_allreduce_impl.h"
#include "spdlog/spdlog.h"

namespace phub::ring {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

namespace {
// Steps of one call are numbered within its sequence number: iteration = seq * kStepSpan + step.
constexpr std::uint64_t kStepSpan = 1 << 16;
// Messages of the next call a neighbour may send before this rank starts it: each is at most
// one piece, so a peer cannot make this rank stage more than kMaxEarlyMessages pieces.
constexpr std::size_t kMaxEarlyMessages = 1 << 14;
// How long leaving waits for each neighbour to take this rank's BYE and close its side.
constexpr std::chrono::seconds kByeLimit{5};
}  // namespace

RingAllreduce::Impl::~Impl() {
  // Leave cleanly: BYE to both neighbours, so that a neighbour still finishing its own last
  // call tells "left after its calls" from "died".
  std::mutex bye_mu;
  std::condition_variable bye_cv;
  int byes = 0;
  closing_ = true;  // a connection's end is no loss now: a Finish ends in one
  loop_.Run([&] {
    if (links_.acceptor) links_.acceptor->Stop();
    for (auto& c : {links_.next, prev_}) {
      if (!c || c->closed()) continue;
      ++byes;
      // Finished, not closed, once the BYE is out: a neighbour still sending its last pieces
      // would otherwise get a reset that can throw the BYE away before it arrives.
      c->Send(WireHeader{Op::kBye, rank_, 0, 0, 0}, {}, [&, c](const Status&) {
        c->Finish(kByeLimit, [&](const Status&) {
          std::lock_guard lock(bye_mu);
          --byes;
          bye_cv.notify_all();
        });
      });
    }
  });
  {
    std::unique_lock lock(bye_mu);
    bye_cv.wait_for(lock, kByeLimit, [&] { return byes == 0; });
  }
  loop_.Run([this] {
    if (links_.next) links_.next->Close(absl::OkStatus());
    if (prev_) prev_->Close(absl::OkStatus());
    for (auto& c : pending_accepts_) c->Close(absl::OkStatus());
    prev_.reset();
    pending_accepts_.clear();
    links_.next.reset();
    links_.acceptor.reset();  // fails the set-ups still in progress
    links_.transport.reset();
  });
}

Status RingAllreduce::Impl::Setup() {
  if (options_.piece_bytes < 4 || options_.piece_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("piece_bytes must be a positive multiple of 4, got ",
                                                   options_.piece_bytes));
  }
  PHUB_RETURN_IF_ERROR(CheckMembership(rank_, world_));
  if (world_ == 1) return absl::OkStatus();
  PHUB_RETURN_IF_ERROR(OpenRingLinks(options_, {rank_, world_}, loop_, this,
                                     [this](std::shared_ptr<Connection> c) {
                                       pending_accepts_.push_back(c);
                                       c->Start();
                                     },
                                     links_));

  std::unique_lock lock(mu_);
  bool attached = cv_.wait_for(lock, std::chrono::milliseconds(options_.connect_timeout_ms),
                               [&] { return prev_attached_ || !error_.status().ok(); });
  if (!error_.status().ok()) return error_.status();
  if (!attached) {
    return absl::DeadlineExceededError(absl::StrCat("ring rank ", rank_, ": rank ",
                                                    (rank_ + world_ - 1) % world_,
                                                    " did not connect within ",
                                                    options_.connect_timeout_ms, " ms"));
  }
  return absl::OkStatus();
}

Status RingAllreduce::Impl::Allreduce(std::span<float> data, ReduceOp op) {
  if (world_ == 1) return absl::OkStatus();  // sum and mean of one copy are the copy
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
    call_done_ = false;
  }
  loop_.Post([this, data, op] {
    data_ = data;
    op_ = op;
    Start();
  });
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return call_done_ || !error_.status().ok(); });
  return error_.status();
}

void RingAllreduce::Impl::Start() {
  ++calls_started_;
  active_ = true;
  scratch_.resize(WireBytes(piece_elems_));
  if (compact()) mirror_.resize(WireBytes(data_.size()));
  gathered_ = reduced_ = 0;
  gather_expected_ = reduce_expected_ = 0;
  for (std::uint32_t s = 0; s < world_; ++s) {
    if (s != Segment(rank_ + 1)) gather_expected_ += Pieces(s);
    if (s != rank_) reduce_expected_ += Pieces(s);
  }
  if (!gone_.empty() && !data_.empty()) {
    return Fail(absl::FailedPreconditionError(absl::StrCat("ring rank ", rank_, ": ", gone_,
                                                           "; every rank must make the same calls")));
  }
  // Reduce-scatter step 0: this rank's own segment, straight from the caller's buffer.
  for (std::uint64_t j = 0; j < Pieces(rank_); ++j) SendPiece(Op::kPush, 0, rank_, j);
  // Messages of this call that came before it started (all but one still in flight).
  std::deque<Early> early;
  early.swap(early_);
  if (receiving_early_) {
    early_.push_back(std::move(early.back()));
    early.pop_back();
  }
  for (Early& e : early) {
    auto slot = Locate(e.header);
    Status s = slot.ok() && WireBytes(slot->size()) != e.header.payload_bytes
                   ? absl::InvalidArgumentError("early ring message of the wrong size")
                   : slot.status();
    if (s.ok()) s = Consume(e.header, e.payload.data());
    if (!s.ok()) return Fail(s);
  }
  CheckDone();
}

void RingAllreduce::Impl::SendPiece(Op op, std::uint32_t step, std::uint32_t segment,
                                    std::uint64_t piece) {
  std::span<const float> values = Piece(segment, piece);
  auto bytes = std::as_bytes(values);
  if (compact()) {
    // Rounded into the mirror, sent from there. Its place there is not rewritten while this is
    // in flight: the next send of the same place (this segment's allgather) waits for values
    // that come back around the ring after the next rank received this one.
    std::byte* wire = MirrorOf(values);
    kernels::ConvertToWire(options_.wire, values, wire);
    bytes = {wire, WireBytes(values.size())};
  }
  WireHeader header{op, rank_, static_cast<std::uint32_t>(piece),
                    (calls_started_ - 1) * kStepSpan + step, static_cast<std::uint32_t>(bytes.size())};
  ++pending_sends_;
  links_.next->Send(header, bytes, [this](const Status& s) {
    --pending_sends_;
    if (!s.ok()) return Fail(s);
    CheckDone();
  });
}

// Where a message of the current call belongs in the caller's buffer.
StatusOr<std::span<float>> RingAllreduce::Impl::Locate(const WireHeader& header) const {
  const std::uint64_t step = header.iteration % kStepSpan;
  if (step + 1 >= world_) {
    return absl::InvalidArgumentError(absl::StrCat("ring step ", step, " in a ring of ", world_));
  }
  std::uint32_t segment;
  if (header.op == Op::kPush) {
    segment = Segment(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step) - 1);
  } else if (header.op == Op::kWeights) {
    segment = Segment(static_cast<std::int64_t>(rank_) - static_cast<std::int64_t>(step));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unexpected ", OpName(header.op), " in the ring"));
  }
  if (header.chunk >= Pieces(segment)) {
    return absl::InvalidArgumentError(absl::StrCat("piece ", header.chunk, " of segment ", segment,
                                                   " which has ", Pieces(segment),
                                                   ": ranks called Allreduce with different lengths?"));
  }
  return Piece(segment, header.chunk);
}

StatusOr<std::span<std::byte>> RingAllreduce::Impl::ResolveSlot(Connection& connection,
                                                                 const WireHeader& header) {
  // The one validation point of every message a neighbour sends; OnReceived trusts it.
  if (header.op == Op::kAttach || header.op == Op::kBye) {
    if (header.payload_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat("ring ", OpName(header.op), " carries ",
                                                     header.payload_bytes, " bytes"));
    }
    const std::uint32_t expected_prev = (rank_ + world_ - 1) % world_;
    if (header.op == Op::kAttach &&
        (prev_ || header.worker != expected_prev || header.chunk != rank_)) {
      return absl::InvalidArgumentError(absl::StrCat("ring ATTACH from rank ", header.worker,
                                                     " to rank ", header.chunk, "; expected rank ",
                                                     expected_prev, " to rank ", rank_));
    }
    return std::span<std::byte>{};
  }
  if (&connection != prev_.get()) {
    return absl::InvalidArgumentError("ring data from a connection that is not the previous rank's");
  }
  const std::uint64_t seq = header.iteration / kStepSpan;
  if (seq == calls_started_) {  // the next call, not started here yet: stage it
    // Bounded by what a piece can be and how many a call can send ahead, never by the claim.
    if (header.payload_bytes > WireBytes(piece_elems_) || header.payload_bytes == 0 ||
        header.payload_bytes % element_bytes_ != 0 || early_.size() >= kMaxEarlyMessages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "early ring message of ", header.payload_bytes, " bytes (", early_.size(),
          " staged already): pieces are at most ", WireBytes(piece_elems_), " bytes of ",
          element_bytes_, "-byte elements"));
    }
    early_.push_back(Early{header, std::vector<std::byte>(header.payload_bytes)});
    receiving_early_ = true;
    return std::span<std::byte>(early_.back().payload);
  }
  if (!active_ || seq + 1 != calls_started_) {
    return absl::InvalidArgumentError(absl::StrCat("ring message of call ", seq, " during call ",
                                                   calls_started_ - 1));
  }
  PHUB_ASSIGN_OR_RETURN(std::span<float> piece, Locate(header));
  if (WireBytes(piece.size()) != header.payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring piece of ", header.payload_bytes, " bytes, expected ", WireBytes(piece.size()),
        ": ranks called Allreduce with different lengths",
        compact() ? " or different --wire formats?" : "?"));
  }
  // Reduce-scatter pieces are added to the buffer, so they land in scratch; allgather pieces
  // are final values and land in place (compact: in the mirror, widened on arrival).
  if (header.op == Op::kPush) return std::span<std::byte>(scratch_).first(header.payload_bytes);
  if (compact()) return std::span<std::byte>(MirrorOf(piece), header.payload_bytes);
  return std::as_writable_bytes(piece);
}

Status RingAllreduce::Impl::OnReceived(Connection& connection, const WireHeader& header) {
  if (header.op == Op::kAttach) {  // checked by ResolveSlot
    const std::uint32_t expected_prev = (rank_ + world_ - 1) % world_;
    auto it = std::find_if(pending_accepts_.begin(), pending_accepts_.end(),
                           [&](const auto& c) { return c.get() == &connection; });
    if (it == pending_accepts_.end()) return absl::InternalError("ATTACH on an unknown connection");
    prev_ = *it;
    prev_->set_tag(expected_prev);
    pending_accepts_.erase(it);
    {
      std::lock_guard lock(mu_);
      prev_attached_ = true;
    }
    cv_.notify_all();
    return absl::OkStatus();
  }
  if (header.op == Op::kBye) {
    said_bye_.push_back(&connection);
    gone_ = absl::StrCat("rank ", connection.tag(), " has left the ring");
    // BYE follows all of prev's data on this stream: a piece not here now never comes.
    if (&connection == prev_.get() && active_ &&
        (reduced_ < reduce_expected_ || gathered_ < gather_expected_)) {
      Fail(absl::FailedPreconditionError(absl::StrCat("ring rank ", rank_, ": ", gone_,
                                                      " in the middle of a call")));
    }
    return absl::OkStatus();
  }
  if (&connection != prev_.get()) {
    return absl::InvalidArgumentError("ring data from a connection that is not the previous rank's");
  }
  if (receiving_early_) {
    receiving_early_ = false;
    const std::uint64_t seq = header.iteration / kStepSpan;
    if (seq == calls_started_) return absl::OkStatus();  // consumed when its call starts
    // Its call started while the payload was landing: consume it now, in order.
    Early early = std::move(early_.back());
    early_.pop_back();
    PHUB_ASSIGN_OR_RETURN(std::span<float> piece, Locate(early.header));
    if (WireBytes(piece.size()) != early.header.payload_bytes) {
      return absl::InvalidArgumentError("ring piece of the wrong size");
    }
    return Consume(early.header, early.payload.data());
  }
  return Consume(header, header.op == Op::kPush ? scratch_.data() : nullptr);
}

namespace {
// out += what `staged` holds, in `format` (the reduce-scatter's sum, always float32).
void AddInto(kernels::WireFormat format, const std::byte* staged, std::span<float> out) {
  if (format != kernels::WireFormat::kFp32) return kernels::AddFromWire(format, staged, out);
  const auto* __restrict in = reinterpret_cast<const float*>(staged);
  float* __restrict o = out.data();
  for (std::size_t i = 0; i < out.size(); ++i) o[i] += in[i];
}
}  // namespace

// A piece of the current call has arrived in `staged` (scratch or an early copy), or in place
// (`staged` null, allgather only): reduce or store it, and pass it on.
Status RingAllreduce::Impl::Consume(const WireHeader& header, const std::byte* staged) {
  PHUB_ASSIGN_OR_RETURN(std::span<float> piece, Locate(header));
  const auto step = static_cast<std::uint32_t>(header.iteration % kStepSpan);
  const std::uint64_t j = header.chunk;
  if (header.op == Op::kPush) {
    const std::uint32_t segment = Segment(static_cast<std::int64_t>(rank_) - step - 1);
    AddInto(options_.wire, staged, piece);
    ++reduced_;
    if (step + 2 < world_) {
      SendPiece(Op::kPush, step + 1, segment, j);
    } else {  // the segment is complete here: start its allgather
      if (op_ == ReduceOp::kMean) {
        const float scale = 1.0f / static_cast<float>(world_);
        for (float& v : piece) v *= scale;
      }
      if (compact()) {
        // Kept as every other rank will have it: rounded once (SendPiece rounds it again into
        // the mirror, which changes nothing).
        kernels::ConvertToWire(options_.wire, piece, MirrorOf(piece));
        kernels::ConvertFromWire(options_.wire, MirrorOf(piece), piece);
      }
      SendPiece(Op::kWeights, 0, segment, j);
    }
  } else {
    const std::uint32_t segment = Segment(static_cast<std::int64_t>(rank_) - step);
    if (compact()) {
      kernels::ConvertFromWire(options_.wire, staged != nullptr ? staged : MirrorOf(piece), piece);
    } else if (staged != nullptr) {
      std::memcpy(piece.data(), staged, piece.size() * sizeof(float));
    }
    ++gathered_;
    if (step + 2 < world_) SendPiece(Op::kWeights, step + 1, segment, j);
  }
  CheckDone();
  return absl::OkStatus();
}

void RingAllreduce::Impl::CheckDone() {
  if (!active_ || reduced_ < reduce_expected_ || gathered_ < gather_expected_ ||
      pending_sends_ > 0) {
    return;
  }
  active_ = false;
  {
    std::lock_guard lock(mu_);
    call_done_ = true;
  }
  cv_.notify_all();
}

void RingAllreduce::Impl::Fail(const Status& status) {
  error_.Record(status);
  spdlog::error("ring rank {}: {}", rank_, status.message());
}

void RingAllreduce::Impl::OnClosed(Connection& connection, const Status& why) {
  if (closing_) return;
  if (connection.tag() < 0) {  // a connection that never attached
    std::erase_if(pending_accepts_, [&](const auto& c) { return c.get() == &connection; });
    return;
  }
  if (std::find(said_bye_.begin(), said_bye_.end(), &connection) != said_bye_.end()) {
    return;  // a clean leave; a later call that needs this neighbour fails in Start()
  }
  Fail(absl::UnavailableError(absl::StrCat("ring rank ", rank_, " lost its connection to rank ",
                                           connection.tag(), ": ", why.message())));
}

RingAllreduce::RingAllreduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RingAllreduce::~RingAllreduce() = default;

StatusOr<std::unique_ptr<RingAllreduce>> RingAllreduce::Connect(const RingOptions& options,
                                                                 Membership membership) {
  auto impl = std::make_unique<Impl>(options, membership);
  PHUB_RETURN_IF_ERROR(impl->Setup());
  return std::unique_ptr<RingAllreduce>(new RingAllreduce(std::move(impl)));
}

Status RingAllreduce::Allreduce(std::span<float> data, ReduceOp op) {
  return impl_->Allreduce(data, op);
}

}  // namespace phub::ring
