#include "phub/exchange/staged_exchange.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phub::exchange {

StatusOr<std::vector<keys::TensorSpec>> SegmentTensors(const std::vector<keys::TensorSpec>& tensors,
                                                       std::uint64_t segment_bytes) {
  if (segment_bytes % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("staged exchange: segments of ", segment_bytes,
                                                   " bytes; give a multiple of 4 (whole floats), "
                                                   "or 0 for whole tensors"));
  }
  const std::uint64_t cut = segment_bytes / sizeof(float);
  std::vector<keys::TensorSpec> out;
  for (const keys::TensorSpec& t : tensors) {
    if (cut == 0 || t.elements <= cut) {
      out.push_back(t);
    } else {
      for (std::uint64_t k = 0, at = 0; at < t.elements; ++k, at += cut) {
        out.push_back({absl::StrCat(t.name, "#", k), std::min(cut, t.elements - at)});
      }
    }
    if (out.size() > UINT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("staged exchange: segments of ", segment_bytes,
                                                     " bytes make more than 2^32-1 tensors; "
                                                     "give larger segments"));
    }
  }
  return out;
}

StatusOr<std::unique_ptr<StagedExchange>> StagedExchange::Create(
    std::shared_ptr<staging::CopyEngine> engine, std::vector<keys::TensorSpec> tensors,
    std::vector<std::span<const float>> grads, std::vector<std::span<float>> weights,
    const HostExchangeFactory& connect, StagedExchangeOptions options) {
  if (grads.size() != tensors.size() || weights.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staged exchange: ", tensors.size(), " tensors but ", grads.size(), " gradient and ",
        weights.size(), " weight buffers; give one of each per tensor"));
  }
  if (options.direct && engine->DeviceIsHost()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staged exchange: direct (GPUDirect) needs a GPU's copy engine, not ", engine->Describe()));
  }
  std::unique_ptr<StagedExchange> x(new StagedExchange());
  x->engine_ = std::move(engine);
  x->options_ = options;
  x->tensors_.resize(tensors.size());
  PHUB_ASSIGN_OR_RETURN(std::vector<keys::TensorSpec> below,
                        SegmentTensors(tensors, options.segment_bytes));
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    Tensor& s = x->tensors_[t];
    if (grads[t].size() != tensors[t].elements || weights[t].size() != tensors[t].elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("staged exchange: tensor ", t, " (", tensors[t].name, ") has ",
                       tensors[t].elements, " elements but buffers of ", grads[t].size(),
                       " (gradient) and ", weights[t].size(), " (weights)"));
    }
    s.name = tensors[t].name;
    s.grads = grads[t];
    s.weights = weights[t];
    if (x->staged()) {
      PHUB_ASSIGN_OR_RETURN(s.host_grads, x->engine_->AllocateStaging(grads[t].size()));
      PHUB_ASSIGN_OR_RETURN(s.host_weights, x->engine_->AllocateStaging(weights[t].size()));
      s.sent = s.host_grads.span();
      s.landed = s.host_weights.span();
    } else {
      s.sent = s.grads;
      s.landed = s.weights;
    }
  }
  // The segments, in tensor order (as SegmentTensors cut them).
  std::vector<std::span<float>> landed;
  std::vector<std::span<const float>> sent;
  for (std::uint32_t t = 0, next = 0; t < tensors.size(); ++t) {
    Tensor& s = x->tensors_[t];
    s.first_segment = next;
    s.segments = 0;
    std::uint64_t at = 0;
    do {
      const std::uint64_t n = below[next].elements;
      x->segments_.push_back({t, at, n});
      sent.push_back(x->SentOf(x->segments_.back()));
      landed.push_back(x->LandedOf(x->segments_.back()));
      at += n;
      ++next;
      ++s.segments;
    } while (at < tensors[t].elements);
  }
  PHUB_ASSIGN_OR_RETURN(x->inner_, connect(std::move(below), std::move(landed)));
  // Fixed send buffers: verbs registers them once.
  PHUB_RETURN_IF_ERROR(x->inner_->DeclareGradients(sent));
  if (x->threaded()) {
    x->pusher_ = std::thread([raw = x.get()] { raw->PushLoop(); });
    x->lander_ = std::thread([raw = x.get()] { raw->LandLoop(); });
  }
  return x;
}

StagedExchange::~StagedExchange() { (void)Close(); }

std::string StagedExchange::Where(std::uint32_t segment) const {
  const Segment& k = segments_[segment];
  const Tensor& s = tensors_[k.tensor];
  if (s.segments == 1) return absl::StrCat("tensor ", k.tensor);
  return absl::StrCat("tensor ", k.tensor, " (segment ", segment - s.first_segment, " of ",
                      s.segments, ")");
}

void StagedExchange::Fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok() && !stopping_) error_ = status;
  }
  cv_.notify_all();
}

Status StagedExchange::RefusalLocked(const char* call) const {
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(call, " after Close"));
  return absl::OkStatus();
}

std::size_t StagedExchange::InFlight() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const Tensor& s : tensors_) n += s.waited < s.pushed ? 1 : 0;
  return n;
}

Status StagedExchange::Init(staging::Stream stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHUB_RETURN_IF_ERROR(RefusalLocked("Init"));
  }
  if (!threaded()) return inner_->Init();
  if (!staged()) {
    // Direct: rank 0's weights go out from the device once written; the others' land there.
    PHUB_ASSIGN_OR_RETURN(staging::Fence written, engine_->Record(stream));
    PHUB_RETURN_IF_ERROR(engine_->HostWait(written, options_.copy_timeout));
    PHUB_RETURN_IF_ERROR(inner_->Init());
    return engine_->FlushRemoteWrites();
  }
  // Rank 0's weights go out from the staging: copy them there first.
  PHUB_ASSIGN_OR_RETURN(staging::Fence written, engine_->Record(stream));
  staging::Fence copied;
  for (Tensor& s : tensors_) {
    PHUB_ASSIGN_OR_RETURN(
        copied, engine_->ToHost(s.weights.data(), s.landed.data(), s.weights.size(), written));
  }
  PHUB_RETURN_IF_ERROR(engine_->HostWait(copied, options_.copy_timeout));
  PHUB_RETURN_IF_ERROR(inner_->Init());
  for (Tensor& s : tensors_) {
    PHUB_ASSIGN_OR_RETURN(
        copied, engine_->ToDevice(s.landed.data(), s.weights.data(), s.weights.size(), {}));
  }
  PHUB_RETURN_IF_ERROR(engine_->StreamWait(stream, copied));
  return engine_->HostWait(copied, options_.copy_timeout);
}

Status StagedExchange::BeginIteration(const kernels::StepValues& values) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    PHUB_RETURN_IF_ERROR(RefusalLocked("BeginIteration"));
    // Bounded: each queued push waits for its copy at most copy_timeout; a failure or Close
    // wakes this.
    cv_.wait(lock, [this] { return !error_.ok() || closed_ || handed_ == queued_; });
    PHUB_RETURN_IF_ERROR(RefusalLocked("BeginIteration"));
  }
  Status begun = inner_->BeginIteration(values);
  if (begun.ok() || absl::IsInvalidArgument(begun) || absl::IsFailedPrecondition(begun)) {
    return begun;
  }
  Fail(Status(begun.code(), absl::StrCat("BeginIteration: ", begun.message())));
  std::lock_guard<std::mutex> lock(mu_);
  return error_.ok() ? begun : error_;
}

Status StagedExchange::Push(std::uint32_t tensor, staging::Stream producer) {
  if (tensor >= tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Push of tensor ", tensor, ": there are ", tensors_.size()));
  }
  Tensor& s = tensors_[tensor];
  {
    std::lock_guard<std::mutex> lock(mu_);
    PHUB_RETURN_IF_ERROR(RefusalLocked("Push"));
    if (s.waited < s.pushed) {  // refused without failing the exchange: the caller's mistake
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", tensor, " pushed again before Wait(", tensor, ")"));
    }
    ++s.pushed;  // in flight from here: a Push of it on another thread is refused
  }
  Status pushed = absl::OkStatus();
  if (threaded()) {
    pushed = PushThreaded(tensor, producer);
  } else {
    for (std::uint32_t k = s.first_segment; pushed.ok() && k < s.first_segment + s.segments; ++k) {
      pushed = inner_->Push(k, SentOf(segments_[k]));
    }
  }
  if (!pushed.ok()) {
    Fail(Status(pushed.code(),
                absl::StrCat("Push of tensor ", tensor, " (", s.name, "): ", pushed.message())));
    std::lock_guard<std::mutex> lock(mu_);
    return error_.ok() ? pushed : error_;
  }
  return absl::OkStatus();
}

// Failures are the caller's to record.
Status StagedExchange::PushThreaded(std::uint32_t tensor, staging::Stream producer) {
  Tensor& s = tensors_[tensor];
  PHUB_ASSIGN_OR_RETURN(staging::Fence produced, engine_->Record(producer));
  // Each segment to the pusher as soon as its copy is enqueued: the pusher pushes the first
  // while the engine still copies the next.
  for (std::uint32_t k = s.first_segment; k < s.first_segment + s.segments; ++k) {
    const Segment& segment = segments_[k];
    staging::Fence copied = produced;  // direct: the NIC reads the gradient where it was made
    if (staged()) {
      PHUB_ASSIGN_OR_RETURN(copied, engine_->ToHost(s.grads.data() + segment.offset,
                                                    s.host_grads.span().data() + segment.offset,
                                                    segment.elements, produced));
    }
    bool closed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.to_host = copied;
      closed = closed_;
      if (!closed) {
        to_push_.emplace_back(k, copied);
        ++queued_;
      }
    }
    if (closed) {
      // Close ran while the copy was enqueued and may have missed it: it ends before the
      // staging it writes can go.
      (void)engine_->HostWait(copied, options_.copy_timeout);
      return absl::FailedPreconditionError("Push after Close");
    }
    cv_.notify_all();
  }
  return absl::OkStatus();
}

void StagedExchange::PushLoop() {
  while (true) {
    std::pair<std::uint32_t, staging::Fence> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !to_push_.empty(); });
      if (stopping_) return;
      next = std::move(to_push_.front());
      to_push_.pop_front();
    }
    const std::uint32_t k = next.first;
    Status s = engine_->HostWait(next.second, options_.copy_timeout);
    if (s.ok()) s = inner_->Push(k, SentOf(segments_[k]));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++handed_;
    }
    if (!s.ok()) {
      Fail(Status(s.code(),
                  absl::StrCat(Where(k), " (gradient to host, then pushed): ", s.message())));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_land_.push_back(k);
    }
    cv_.notify_all();
  }
}

void StagedExchange::LandLoop() {
  while (true) {
    std::uint32_t k;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !to_land_.empty(); });
      if (stopping_) return;
      k = to_land_.front();
      to_land_.pop_front();
    }
    const Segment& segment = segments_[k];
    Tensor& s = tensors_[segment.tensor];
    Status status = inner_->Wait(k);
    // Direct: the NIC wrote the weights in place; its writes made visible, nothing to copy.
    if (status.ok() && !staged()) status = engine_->FlushRemoteWrites();
    StatusOr<staging::Fence> copied =
        !status.ok() ? StatusOr<staging::Fence>(status)
        : staged() ? engine_->ToDevice(LandedOf(segment).data(), s.weights.data() + segment.offset,
                                       segment.elements, {})
                   : StatusOr<staging::Fence>(staging::Fence());
    if (!copied.ok()) {
      Fail(Status(copied.status().code(), absl::StrCat(Where(k), " (weights, then to the device): ",
                                                       copied.status().message())));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.on_device = *std::move(copied);
      // The tensor has arrived once its last segment's copy is enqueued (segments land in push
      // order, and the copies to the device finish in that order).
      if (++s.landed_segments == s.segments) {
        s.landed_segments = 0;
        ++s.arrived;
      }
    }
    cv_.notify_all();
  }
}

Status StagedExchange::Wait(std::uint32_t tensor, staging::Stream consumer) {
  if (tensor >= tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wait of tensor ", tensor, ": there are ", tensors_.size()));
  }
  Tensor& s = tensors_[tensor];
  if (!threaded()) {
    std::uint64_t pushed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PHUB_RETURN_IF_ERROR(RefusalLocked("Wait"));
      pushed = s.pushed;
    }
    Status waited = absl::OkStatus();
    for (std::uint32_t k = s.first_segment; waited.ok() && k < s.first_segment + s.segments; ++k) {
      waited = inner_->Wait(k);
    }
    if (!waited.ok()) {
      Fail(Status(waited.code(),
                  absl::StrCat("Wait of tensor ", tensor, " (", s.name, "): ", waited.message())));
      std::lock_guard<std::mutex> lock(mu_);
      return error_.ok() ? waited : error_;
    }
    std::lock_guard<std::mutex> lock(mu_);
    s.waited = std::max(s.waited, pushed);
    return absl::OkStatus();
  }
  staging::Fence on_device;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Bounded: the pusher's copies by copy_timeout, the exchange's waits by its own deadlines;
    // either failing sets error_, and Close wakes it.
    cv_.wait(lock, [&] { return !error_.ok() || closed_ || s.arrived == s.pushed; });
    PHUB_RETURN_IF_ERROR(RefusalLocked("Wait"));
    on_device = s.on_device;
    s.waited = s.pushed;
  }
  return engine_->StreamWait(consumer, on_device);
}

Status StagedExchange::WaitAll(staging::Stream consumer) {
  for (std::uint32_t t = 0; t < tensors_.size(); ++t) {
    bool in_flight;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PHUB_RETURN_IF_ERROR(RefusalLocked("WaitAll"));
      in_flight = tensors_[t].waited < tensors_[t].pushed;
    }
    if (in_flight) PHUB_RETURN_IF_ERROR(Wait(t, consumer));
  }
  return absl::OkStatus();
}

Status StagedExchange::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  // The exchange first: a lander blocked in its Wait (a peer that stays silent) returns now,
  // and a pusher's next Push is refused at once. Then each thread finishes what it is doing
  // (bounded: copy_timeout, the exchange's close).
  Status closed = inner_ ? inner_->Close() : absl::OkStatus();
  if (pusher_.joinable()) pusher_.join();
  if (lander_.joinable()) lander_.join();
  // Copies still queued in the engine write staging and device buffers: done before they go.
  std::vector<staging::Fence> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Tensor& s : tensors_) {
      last.push_back(s.to_host);
      last.push_back(s.on_device);
    }
  }
  for (const staging::Fence& f : last) (void)engine_->HostWait(f, options_.copy_timeout);
  return closed;
}

}  // namespace phub::exchange
