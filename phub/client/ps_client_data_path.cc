// PsClient's data path: pushes out, weights in (ResolveSlot is the one validation point of
// everything phubd sends), and the first error, which every later call returns.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/client/ps_client_impl.h"
#include "phub/client/step_values_wire.h"
#include "phub/kernels/aggregate_and_step.h"
#include "spdlog/spdlog.h"

namespace phub::client {

namespace {
// What a worker reports when a data connection to phubd is lost: the same words whether the
// connection's end or a send it failed was seen first.
Status LostDataConnection(const Connection& connection, const Status& why) {
  return absl::UnavailableError(absl::StrCat("lost the data connection to phubd (",
                                             connection.peer(), "): ", why.message()));
}
}  // namespace

void PsClient::Impl::RecordError(const Status& status) {
  error_.Record(status);
  spdlog::error("rank {}: {}", membership_.rank, status.message());
}
void PsClient::Impl::PostChunks(Op op, std::uint32_t tensor, std::span<const std::byte> data,
                                std::size_t element_bytes, std::uint64_t iteration) {
  // Only the loops that serve one of its chunks' cores (a small tensor has one chunk): an idle
  // loop is not woken for nothing. One loop (the default) serves them all.
  std::uint64_t serving = 1;  // a bit per loop; loop_count() <= kMaxIoThreads = 64
  if (loop_count() > 1) {
    serving = 0;
    for (const keys::Chunk& chunk : table_->chunks_of_tensor(tensor)) {
      serving |= std::uint64_t{1} << loop_of_core(table_->owner(chunk.id));
    }
  }
  for (std::size_t k = 0; k < loop_count(); ++k) {
    if (((serving >> k) & 1) == 0) continue;
    data_loop(k).Post([this, op, tensor, data, element_bytes, iteration, k] {
      SendChunks(op, tensor, data, element_bytes, iteration, k);
    });
  }
}

void PsClient::Impl::SendChunks(Op op, std::uint32_t tensor, std::span<const std::byte> data,
                                std::size_t element_bytes, std::uint64_t iteration,
                                std::size_t k) {
  for (const keys::Chunk& chunk : table_->chunks_of_tensor(tensor)) {
    if (loop_of_core(table_->owner(chunk.id)) != k) continue;
    auto bytes = data.subspan(chunk.offset * element_bytes, chunk.elements * element_bytes);
    WireHeader header{op, membership_.rank, chunk.id, iteration,
                      static_cast<std::uint32_t>(bytes.size())};
    const std::shared_ptr<transport::SendScheduler>& sender = senders_[table_->owner(chunk.id)];
    sender->Send(header, bytes, [this, c = sender->connection()](const Status& s) {
      if (!s.ok() && !closing_) RecordError(LostDataConnection(*c, s));
    });
  }
}
Status PsClient::Impl::StepWith(const kernels::StepValues& values) {
  if (!options_.per_iteration_values) {
    return absl::FailedPreconditionError(
        "StepWith in a job with fixed hyper-parameters: connect with "
        "PsClientOptions::per_iteration_values");
  }
  PHUB_RETURN_IF_ERROR(kernels::ValidateStepValues(options_.optimizer->kind, values));
  proto::ControlMessage message;
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
    if (values_iteration_ > pushed_iteration_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "StepWith twice before iteration ", values_iteration_,
          "'s first Push: one call per iteration, before its pushes"));
    }
    values_iteration_ = pushed_iteration_ + 1;
    StepValuesToProto(values_iteration_, values, *message.mutable_step_values());
  }
  // Posted before the iteration's pushes: with one data loop (loop_) phubd has them on the
  // control connection before the pushes leave; with several a push may overtake them, and
  // phubd's shard holds a chunk whose copies are in until its iteration's values come.
  loop_.Post([this, message = std::move(message)] { SendControl(message); });
  return absl::OkStatus();
}

Status PsClient::Impl::Init() {
  if (membership_.rank == 0 && !weights_from_server_ && !resumed_) {
    for (std::uint32_t t = 0; t < tensors_.size(); ++t) {
      PostChunks(Op::kInit, t, std::as_bytes(weights_[t]), sizeof(float), 0);  // float32
    }
  }
  return WaitAll();
}

Status PsClient::Impl::Push(std::uint32_t tensor, std::span<const float> grads) {
  if (tensor >= weights_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Push of tensor ", tensor, "; the model has ",
                                                   weights_.size()));
  }
  if (grads.size() != weights_[tensor].size()) {
    return absl::InvalidArgumentError(absl::StrCat("Push of tensor ", tensor, " with ",
                                                   grads.size(), " floats; it has ",
                                                   weights_[tensor].size()));
  }
  std::uint64_t iteration;
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
    TensorState& state = tensors_[tensor];
    if (state.pending > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("Push of tensor ", tensor, " while its previous push or Init is in flight: "
                       "call Wait(", tensor, ") first"));
    }
    iteration = state.iteration + 1;
    if (options_.per_iteration_values && iteration > values_iteration_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Push of tensor ", tensor, " for iteration ", iteration, " before its hyper-parameters: "
          "call StepWith once before each iteration's first Push (the job has per-iteration "
          "values)"));
    }
    pushed_iteration_ = std::max(pushed_iteration_, iteration);
    state.expect_iteration = iteration;
    state.pending = static_cast<std::uint32_t>(table_->chunks_of_tensor(tensor).size());
    if (state.pending == 0) state.iteration = iteration;  // an empty tensor has nothing to move
  }
  std::span<const std::byte> data = std::as_bytes(grads);
  if (compact_pushes()) {
    // Converted here, on the caller's thread: the staging buffer is free (the previous push of
    // this tensor was waited for, so phubd has all of it) and the loop thread stays free.
    auto* out = reinterpret_cast<std::byte*>(push_wire_[tensor].data());
    if (options_.wire.error_feedback) {
      kernels::ConvertToWireWithFeedback(options_.wire.format, grads,
                                         push_residual_[tensor].span(), out);
    } else {
      kernels::ConvertToWire(options_.wire.format, grads, out);
    }
    data = {out, grads.size() * kernels::WireBytes(options_.wire.format)};
  }
  const std::size_t element_bytes =
      compact_pushes() ? kernels::WireBytes(options_.wire.format) : sizeof(float);
  PostChunks(Op::kPush, tensor, data, element_bytes, iteration);
  return absl::OkStatus();
}

Status PsClient::Impl::Wait(std::uint32_t tensor) {
  if (tensor >= tensors_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Wait for tensor ", tensor, "; the model has ",
                                                   tensors_.size()));
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return tensors_[tensor].pending == 0 || !error_.status().ok(); });
  return error_.status();
}

Status PsClient::Impl::WaitAll() {
  for (std::uint32_t t = 0; t < tensors_.size(); ++t) PHUB_RETURN_IF_ERROR(Wait(t));
  return absl::OkStatus();
}

StatusOr<std::span<std::byte>> PsClient::Impl::ResolveSlot(Connection& connection,
                                                           const WireHeader& header) {
  // The one validation point of every message phubd sends: OnReceived trusts what passes.
  if (header.op != Op::kWeights && !(header.op == Op::kInit && compact_weights())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "phubd sent ", OpName(header.op), "; a worker only receives WEIGHTS",
        compact_weights() ? " and, first, INIT" : ""));
  }
  const std::string what = OpName(header.op);
  if (header.worker != membership_.rank) {
    return absl::InvalidArgumentError(absl::StrCat(what, " addressed to worker ", header.worker,
                                                   " reached rank ", membership_.rank));
  }
  if (header.chunk >= table_->chunks().size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " for chunk ", header.chunk,
                                                   " of ", table_->chunks().size()));
  }
  if (table_->owner(header.chunk) != connection.tag()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " of chunk ", header.chunk,
                                                   " from core ", connection.tag(),
                                                   "; the chunk belongs to core ",
                                                   table_->owner(header.chunk)));
  }
  if (header.op != WeightsOp(header.iteration)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of chunk ", header.chunk, " for iteration ", header.iteration, "; with --wire ",
        kernels::WireFormatName(options_.wire.format),
        " --wire-weights wire the weights of iteration ", resume_iteration_,
        " come whole (INIT) and later ones as changes (WEIGHTS)"));
  }
  const keys::Chunk& chunk = table_->chunks()[header.chunk];
  std::span<std::byte> landing = WeightsLanding(chunk, header.op);
  if (header.payload_bytes != landing.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of chunk ", header.chunk, " carry ", header.payload_bytes, " bytes, expected ",
        landing.size(), " (", chunk.elements, " elements in ",
        landing.size() == chunk.bytes() ? "fp32" : kernels::WireFormatName(options_.wire.format),
        ")"));
  }
  {
    std::lock_guard lock(mu_);
    const TensorState& state = tensors_[chunk.tensor];
    // landed_[chunk] is the iteration of the next weights this chunk may receive: once per
    // iteration, and only for the push in flight.
    if (state.pending == 0 || header.iteration != state.expect_iteration ||
        landed_[header.chunk] != header.iteration) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected ", what, " for chunk ", header.chunk, " of iteration ", header.iteration,
          " (tensor ", chunk.tensor, " awaits ",
          state.pending ? absl::StrCat("iteration ", state.expect_iteration) : "nothing",
          "; the chunk's next is ", landed_[header.chunk], ")"));
    }
  }
  return landing;
}

std::span<std::byte> PsClient::Impl::WeightsLanding(const keys::Chunk& chunk, Op op) {
  if (!compact_weights() || op == Op::kInit) {
    return std::as_writable_bytes(weights_[chunk.tensor].subspan(chunk.offset, chunk.elements));
  }
  const std::size_t eb = kernels::WireBytes(options_.wire.format);
  auto* base = reinterpret_cast<std::byte*>(weights_wire_[chunk.tensor].data());
  return {base + chunk.offset * eb, chunk.elements * eb};
}

Status PsClient::Impl::OnReceived(Connection& connection, const WireHeader& header) {
  const keys::Chunk& chunk = table_->chunks()[header.chunk];  // checked by ResolveSlot
  if (compact_weights() && header.op == Op::kWeights) {
    // A change: added to the weights, which equal phubd's view of them (the tensor is in
    // flight: nobody reads it until Wait).
    kernels::AddFromWire(options_.wire.format, WeightsLanding(chunk, header.op).data(),
                         weights_[chunk.tensor].subspan(chunk.offset, chunk.elements));
  }
  bool done = false;
  {
    std::lock_guard lock(mu_);
    ++landed_[header.chunk];
    if (header.iteration > weights_seen_) {
      weights_seen_ = header.iteration;
      done = true;  // MembersOf may wait for it
    }
    TensorState& state = tensors_[chunk.tensor];
    if (--state.pending == 0) {
      state.iteration = state.expect_iteration;
      done = true;
    }
  }
  if (done) cv_.notify_all();
  return absl::OkStatus();
}

void PsClient::Impl::OnClosed(Connection& connection, const Status& why) {
  if (closing_) return;
  RecordError(LostDataConnection(connection, why));
}

}  // namespace phub::client
