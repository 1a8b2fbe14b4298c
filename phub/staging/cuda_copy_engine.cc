#include "phub/staging/cuda_copy_engine.h"

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/common/cuda_error_text.h"

namespace phub::staging {
namespace {

Status CudaFailure(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // reported here, once
  return absl::InternalError(absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line,
                                          ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                                          ")", kCudaUnderAsanHint));
}

#define STAGING_CUDA(call)                                           \
  do {                                                               \
    const cudaError_t staging_error_ = (call);                       \
    if (staging_error_ != cudaSuccess) {                             \
      return CudaFailure(staging_error_, #call, __FILE__, __LINE__); \
    }                                                                \
  } while (0)

// A fence: an event, destroyed with the last Fence that names it (CUDA releases a recorded
// event's resources once the work it follows completes).
struct CudaFence {
  cudaEvent_t event = nullptr;
  ~CudaFence() {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
};

cudaEvent_t EventOf(const Fence& fence) {
  auto* f = static_cast<CudaFence*>(fence.state());
  return f == nullptr ? nullptr : f->event;
}

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(const CudaCopyEngineOptions& o) : options_(o) {}
  ~CudaCopyEngine() override {
    (void)cudaSetDevice(options_.device);
    for (cudaStream_t s : {to_host_.stream, to_device_.stream}) {
      if (s != nullptr) {
        (void)cudaStreamSynchronize(s);  // copies into staging that may be freed next
        (void)cudaStreamDestroy(s);
      }
    }
  }

  Status Init() {
    STAGING_CUDA(cudaSetDevice(options_.device));
    STAGING_CUDA(cudaStreamCreateWithFlags(&to_host_.stream, cudaStreamNonBlocking));
    STAGING_CUDA(cudaStreamCreateWithFlags(&to_device_.stream, cudaStreamNonBlocking));
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat("cuda streams (device ", options_.device, ", pinned staging)");
  }
  bool DeviceIsHost() const override { return false; }

  StatusOr<StagingBuffer> AllocateStaging(std::size_t floats) override {
    if (floats == 0) return StagingBuffer();
    STAGING_CUDA(cudaSetDevice(options_.device));
    void* p = nullptr;
    if (const cudaError_t e = cudaHostAlloc(&p, floats * sizeof(float), cudaHostAllocPortable);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(
          absl::StrCat("cudaHostAlloc of ", floats * sizeof(float),
                       " bytes of pinned staging failed: ", cudaGetErrorString(e),
                       "; the host is short of lockable memory (ulimit -l, or fewer "
                       "workers per host)"));
    }
    std::memset(p, 0, floats * sizeof(float));
    std::shared_ptr<void> owner(p, [](void* q) { (void)cudaFreeHost(q); });
    return StagingBuffer({static_cast<float*>(p), floats}, std::move(owner));
  }

  StatusOr<Fence> Record(Stream producer) override {
    STAGING_CUDA(cudaSetDevice(options_.device));
    return RecordOn(static_cast<cudaStream_t>(producer));
  }
  StatusOr<Fence> ToHost(const float* device, float* host, std::size_t n,
                         const Fence& after) override {
    return Copy(to_host_, host, device, n, cudaMemcpyDeviceToHost, after);
  }
  StatusOr<Fence> ToDevice(const float* host, float* device, std::size_t n,
                           const Fence& after) override {
    return Copy(to_device_, device, host, n, cudaMemcpyHostToDevice, after);
  }

  Status HostWait(const Fence& fence, std::chrono::milliseconds timeout) override {
    cudaEvent_t event = EventOf(fence);
    if (event == nullptr) return absl::OkStatus();
    // Polled, not cudaEventSynchronize: that cannot be interrupted, so a wedged copy would
    // hang the caller forever.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaFailure(e, "cudaEventQuery", __FILE__, __LINE__);
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "a copy between device ", options_.device, " and pinned host memory did not finish in ",
            timeout.count(), " ms: is the GPU wedged (nvidia-smi)?"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  Status StreamWait(Stream consumer, const Fence& fence) override {
    cudaEvent_t event = EventOf(fence);
    if (event == nullptr) return absl::OkStatus();
    STAGING_CUDA(cudaSetDevice(options_.device));
    STAGING_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), event, 0));
    return absl::OkStatus();
  }

 private:
  // One direction's stream and its copies not yet known to be done (for back-pressure).
  struct Lane {
    cudaStream_t stream = nullptr;
    std::mutex mu;
    std::deque<Fence> in_flight;
  };

  StatusOr<Fence> RecordOn(cudaStream_t stream) {
    auto fence = std::make_shared<CudaFence>();
    STAGING_CUDA(cudaEventCreateWithFlags(&fence->event, cudaEventDisableTiming));
    STAGING_CUDA(cudaEventRecord(fence->event, stream));
    return Fence(std::move(fence));
  }

  StatusOr<Fence> Copy(Lane& lane, float* to, const float* from, std::size_t n, cudaMemcpyKind kind,
                       const Fence& after) {
    if (n > 0 && (from == nullptr || to == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("a copy of ", n, " floats with a null ",
                                                     from == nullptr ? "source" : "destination"));
    }
    STAGING_CUDA(cudaSetDevice(options_.device));
    std::lock_guard<std::mutex> lock(lane.mu);
    // Back-pressure: retire finished copies; past the limit wait for the oldest.
    while (!lane.in_flight.empty()) {
      const cudaError_t e = cudaEventQuery(EventOf(lane.in_flight.front()));
      if (e == cudaErrorNotReady && lane.in_flight.size() < options_.max_in_flight) break;
      if (e == cudaErrorNotReady) {
        PHUB_RETURN_IF_ERROR(HostWait(lane.in_flight.front(), std::chrono::seconds(60)));
      } else if (e != cudaSuccess) {
        return CudaFailure(e, "cudaEventQuery", __FILE__, __LINE__);
      }
      lane.in_flight.pop_front();
    }
    if (cudaEvent_t wait = EventOf(after); wait != nullptr) {
      STAGING_CUDA(cudaStreamWaitEvent(lane.stream, wait, 0));
    }
    if (n > 0) {
      STAGING_CUDA(cudaMemcpyAsync(to, from, n * sizeof(float), kind, lane.stream));
    }
    PHUB_ASSIGN_OR_RETURN(Fence done, RecordOn(lane.stream));
    lane.in_flight.push_back(done);
    return done;
  }

  const CudaCopyEngineOptions options_;
  Lane to_host_, to_device_;
};

}  // namespace

StatusOr<std::unique_ptr<CopyEngine>> MakeCudaCopyEngine(CudaCopyEngineOptions options) {
  if (options.max_in_flight == 0) {
    return absl::InvalidArgumentError("cuda copy engine: max_in_flight is 0; it must be >= 1");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device for the staging copies (no NVIDIA driver or no GPU visible)",
        kCudaUnderAsanHint));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(absl::StrCat("cuda copy engine: device ", options.device,
                                                   " does not exist (", devices, " visible)"));
  }
  auto engine = std::make_unique<CudaCopyEngine>(options);
  PHUB_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<CopyEngine>(std::move(engine));
}

void* CudaEventOf(const Fence& fence) { return EventOf(fence); }

}  // namespace phub::staging
