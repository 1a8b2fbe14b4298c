#include "phub/exchange/nccl_device_exchange.h"

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/exchange/allreduce_exchange.h"
#include "phub/kernels/cuda/optimizer_step.h"
#include "phub/nccl/nccl_allreduce.h"
#include "phub/staging/cuda_copy_engine.h"

namespace phub::exchange {
namespace {

Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("nccl exchange: ", what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

// A CUDA event, destroyed with its owner.
class Event {
 public:
  Event() = default;
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    std::swap(event_, other.event_);  // ours goes with `other`
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  Status Create() {
    return Cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclDeviceExchange final : public DeviceExchange {
 public:
  ~NcclDeviceExchange() override { (void)Close(); }

  Status Setup(const NcclExchangeOptions& options, std::unique_ptr<nccl::NcclAllreduce> nccl,
               std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> grads,
               std::vector<std::span<float>> weights) {
    optimizer_ = options.optimizer;
    kind_ = options.optimizer.kind;
    timeout_ms_ = options.timeout_ms;
    nccl_ = std::move(nccl);
    staging::DeviceScope scope(nccl_->device());
    PHUB_RETURN_IF_ERROR(scope.status());
    tensors_.resize(tensors.size());
    const std::size_t states = kernels::StateArrays(optimizer_.kind);
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      Tensor& s = tensors_[t];
      s.grads = grads[t];
      s.weights = weights[t];
      PHUB_RETURN_IF_ERROR(s.produced.Create());
      PHUB_RETURN_IF_ERROR(s.stepped.Create());
      for (std::size_t k = 0; k < states; ++k) {
        float* p = nullptr;
        const std::size_t bytes = std::max<std::size_t>(1, s.weights.size()) * sizeof(float);
        PHUB_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, bytes), "cudaMalloc of optimizer state"));
        s.state.emplace_back(p, [](float* q) { (void)cudaFree(q); });
        PHUB_RETURN_IF_ERROR(Cuda(cudaMemset(p, 0, bytes), "cudaMemset of optimizer state"));
      }
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  // Rank 0's weights: a sum where every other rank contributes zeros (exact: x + 0 = x).
  Status Init(staging::Stream stream) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      PHUB_RETURN_IF_ERROR(RefusalLocked("Init"));
    }
    staging::DeviceScope scope(nccl_->device());
    PHUB_RETURN_IF_ERROR(scope.status());
    auto consumer = static_cast<cudaStream_t>(stream);
    for (Tensor& s : tensors_) {
      if (nccl_->rank() != 0) {
        PHUB_RETURN_IF_ERROR(
            Cuda(cudaMemsetAsync(s.weights.data(), 0, s.weights.size_bytes(), consumer),
                 "cudaMemsetAsync"));
      }
      PHUB_RETURN_IF_ERROR(Cuda(cudaEventRecord(s.produced.get(), consumer), "cudaEventRecord"));
      PHUB_RETURN_IF_ERROR(nccl_->Allreduce(s.weights.data(), s.weights.size(), ReduceOp::kSum,
                                            s.produced.get(),
                                            [](void*) { return absl::OkStatus(); }));
    }
    return absl::OkStatus();  // each Allreduce returned once the GPU had done it
  }

  // The values every later Push steps with: each push takes those in force when it is made.
  Status BeginIteration(const kernels::StepValues& values) override {
    if (Status valid = kernels::ValidateStepValues(kind_, values); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl exchange: BeginIteration: ", valid.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    PHUB_RETURN_IF_ERROR(RefusalLocked("BeginIteration"));
    optimizer_ = kernels::WithValues(optimizer_, values);
    return absl::OkStatus();
  }

  Status Push(std::uint32_t tensor, staging::Stream producer) override {
    PHUB_RETURN_IF_ERROR(Check(tensor, "Push"));
    Tensor& s = tensors_[tensor];
    std::lock_guard<std::mutex> lock(mu_);
    PHUB_RETURN_IF_ERROR(RefusalLocked("Push"));
    if (s.pushed != s.enqueued) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", tensor, " pushed again before Wait(", tensor, ")"));
    }
    // Safe to re-record: the exchange thread has enqueued the wait on this tensor's last one.
    staging::DeviceScope scope(nccl_->device());
    PHUB_RETURN_IF_ERROR(scope.status());
    PHUB_RETURN_IF_ERROR(
        Cuda(cudaEventRecord(s.produced.get(), static_cast<cudaStream_t>(producer)),
             "cudaEventRecord on the producer's stream"));
    ++s.pushed;
    queue_.push_back({tensor, optimizer_});
    cv_.notify_all();
    return absl::OkStatus();
  }

  Status Wait(std::uint32_t tensor, staging::Stream consumer) override {
    PHUB_RETURN_IF_ERROR(Check(tensor, "Wait"));
    Tensor& s = tensors_[tensor];
    std::unique_lock<std::mutex> lock(mu_);
    // Until t's reduction and step are enqueued (not done: the consumer's stream waits for them
    // on the device). Bounded: NCCL's enqueue is; a reduction that does not finish fails
    // error_ within the communicator's timeout.
    cv_.wait(lock, [&] { return !error_.ok() || s.enqueued == s.pushed; });
    if (!error_.ok()) return error_;
    return Cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), s.stepped.get(), 0),
                "cudaStreamWaitEvent");
  }

  Status WaitAll(staging::Stream consumer) override {
    for (std::uint32_t t = 0; t < tensors_.size(); ++t) PHUB_RETURN_IF_ERROR(Wait(t, consumer));
    return absl::OkStatus();
  }

  // Enqueues what was pushed before, then leaves; returns the first error the exchange saw
  // (every time: idempotent).
  Status Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return error_;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    nccl_.reset();  // finalizes the communicator (bounded)
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  std::string name() const override { return "nccl"; }

 private:
  struct Tensor {
    std::span<float> grads, weights;
    std::vector<std::unique_ptr<float, void (*)(float*)>> state;
    std::uint64_t steps = 0;  // exchange thread only
    Event produced, stepped;
    std::uint64_t pushed = 0;    // guarded by mu_
    std::uint64_t enqueued = 0;  // guarded by mu_
  };

  // What Push and Init are refused with: the first error, or that Close has run (the
  // communicator is gone). REQUIRES: mu_ held.
  Status RefusalLocked(const char* call) const {
    if (!error_.ok()) return error_;
    if (stopping_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nccl exchange: ", call, " after Close (the communicator is gone; make a new exchange)"));
    }
    return absl::OkStatus();
  }

  Status Check(std::uint32_t tensor, const char* call) const {
    if (tensor < tensors_.size()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(call, " of tensor ", tensor, ": there are ", tensors_.size()));
  }

  // A pushed tensor and the optimizer it steps with (its push's iteration's values).
  struct Pushed {
    std::uint32_t tensor;
    kernels::OptimizerConfig optimizer;
  };

  // Enqueues t's reduction and step on NCCL's stream, after the producer's event; records
  // `watch` after them (this step's own event: `stepped` is recorded again by t's next step).
  Status Enqueue(std::uint32_t t, const kernels::OptimizerConfig& optimizer, cudaEvent_t watch) {
    Tensor& s = tensors_[t];
    const std::uint64_t step = ++s.steps;
    return nccl_->Enqueue(
        s.grads.data(), s.grads.size(), ReduceOp::kMean, s.produced.get(), [&](void* stream) {
          PHUB_RETURN_IF_ERROR(kernels::cuda::LaunchOptimizerStep(
              s.grads.data(), s.weights.data(), s.state.size() > 0 ? s.state[0].get() : nullptr,
              s.state.size() > 1 ? s.state[1].get() : nullptr,
              static_cast<std::int64_t>(s.weights.size()), optimizer.kind,
              kernels::Prepare(1, optimizer, step), stream));
          PHUB_RETURN_IF_ERROR(
              Cuda(cudaEventRecord(s.stepped.get(), static_cast<cudaStream_t>(stream)),
                   "cudaEventRecord after the step"));
          return Cuda(cudaEventRecord(watch, static_cast<cudaStream_t>(stream)),
                      "cudaEventRecord of the step's watch");
        });
  }

  // The exchange thread: enqueues pushed tensors in push order as they come, and between them
  // watches the enqueued work finish, each within the communicator's timeout (a dead peer
  // would otherwise leave the consumer's stream waiting forever: the watch aborts NCCL, which
  // releases it, and fails every later call). Each step is watched through an event of its
  // own: a tensor's `stepped` is recorded again by its next step, which may be enqueued while
  // this one is still watched, and would then stand for the wrong step.
  void Run() {
    (void)cudaSetDevice(nccl_->device());  // the exchange's own thread: nothing to restore
    struct Watched {
      Event event;  // recorded after the step
      Clock::time_point deadline;
    };
    std::deque<Watched> watched;
    std::vector<Event> spare;  // watch events of retired steps, recorded again
    const auto timeout = std::chrono::milliseconds(timeout_ms_);
    while (true) {
      std::optional<Pushed> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (watched.empty()) {
          cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        } else {
          cv_.wait_for(lock, std::chrono::microseconds(50),
                       [this] { return stopping_ || !queue_.empty(); });
        }
        if (!queue_.empty()) {
          next = queue_.front();
          queue_.pop_front();
        } else if (stopping_ && watched.empty()) {
          return;
        }
      }
      Status s;
      if (next) {
        Event watch;
        if (!spare.empty()) {
          watch = std::move(spare.back());
          spare.pop_back();
        } else {
          s = watch.Create();
        }
        if (s.ok()) s = Enqueue(next->tensor, next->optimizer, watch.get());
        if (s.ok()) watched.push_back({std::move(watch), Clock::now() + timeout});
      }
      while (s.ok() && !watched.empty()) {  // retire what has finished, in order
        StatusOr<bool> done = nccl_->Poll(watched.front().event.get(), watched.front().deadline);
        if (!done.ok()) s = done.status();
        if (!done.ok() || !*done) break;
        spare.push_back(std::move(watched.front().event));
        watched.pop_front();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && error_.ok()) {
        error_ =
            next ? Status(s.code(), absl::StrCat("tensor ", next->tensor, ": ", s.message())) : s;
      }
      if (next) ++tensors_[next->tensor].enqueued;
      cv_.notify_all();
      if (!error_.ok()) return;
    }
  }

  using Clock = std::chrono::steady_clock;
  kernels::OptimizerKind kind_{};       // fixed at Setup
  kernels::OptimizerConfig optimizer_;  // guarded by mu_ once the thread runs (BeginIteration)
  int timeout_ms_ = 60000;
  std::unique_ptr<nccl::NcclAllreduce> nccl_;
  std::vector<Tensor> tensors_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pushed> queue_;
  Status error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceExchange>> ConnectNcclDeviceExchange(
    const NcclExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> grads,
    std::vector<std::span<float>> weights) {
  if (options.wire != kernels::WireFormat::kFp32) {
    return absl::InvalidArgumentError(
        "the device-resident NCCL exchange reduces fp32; --wire bf16|fp16 uses the host path");
  }
  PHUB_RETURN_IF_ERROR(AllreduceExchange::Check(options.optimizer, tensors, weights));
  if (grads.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("nccl exchange: ", tensors.size(),
                                                   " tensors but ", grads.size(), " gradients"));
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (grads[t].size() != tensors[t].elements) {
      return absl::InvalidArgumentError(absl::StrCat("nccl exchange: tensor ", t,
                                                     "'s gradient has ", grads[t].size(),
                                                     " elements, not ", tensors[t].elements));
    }
  }
  PHUB_ASSIGN_OR_RETURN(auto nccl,
                        nccl::NcclAllreduce::Connect(CommunicatorOptions(options, membership)));
  auto exchange = std::make_unique<NcclDeviceExchange>();
  PHUB_RETURN_IF_ERROR(exchange->Setup(options, std::move(nccl), std::move(tensors),
                                       std::move(grads), std::move(weights)));
  return std::unique_ptr<DeviceExchange>(std::move(exchange));
}

}  // namespace phub::exchange
