#include "phub/staging/cuda_copy_engine.h"

#include <cuda_runtime.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/common/cuda_error_text.h"
#include "phub/staging/cuda_driver.h"

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

// Whether the calling thread's current device `ordinal` has a context: making it current
// again then creates nothing. True where the driver cannot tell (the caller keeps its device).
bool HasContext(int ordinal) {
  const DriverCalls& driver = Driver();
  if (driver.ctx_get_current != nullptr) {
    CUcontext current = nullptr;
    if (driver.ctx_get_current(&current) == CUDA_SUCCESS && current != nullptr) return true;
  }
  if (driver.device_get == nullptr || driver.primary_ctx_get_state == nullptr) return true;
  CUdevice device;
  unsigned int flags = 0;
  int active = 0;
  if (driver.device_get(&device, ordinal) != CUDA_SUCCESS ||
      driver.primary_ctx_get_state(device, &flags, &active) != CUDA_SUCCESS) {
    return false;  // not a device the driver knows: nothing to restore
  }
  return active != 0;
}

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(const CudaCopyEngineOptions& o) : options_(o) {}
  ~CudaCopyEngine() override {
    DeviceScope scope(options_.device);
    for (cudaStream_t s : {to_host_.stream, to_device_.stream}) {
      if (s != nullptr) {
        (void)cudaStreamSynchronize(s);  // copies into staging that may be freed next
        (void)cudaStreamDestroy(s);
      }
    }
  }

  Status Init() {
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
    STAGING_CUDA(cudaStreamCreateWithFlags(&to_host_.stream, cudaStreamNonBlocking));
    STAGING_CUDA(cudaStreamCreateWithFlags(&to_device_.stream, cudaStreamNonBlocking));
    // Whether a NIC's writes need a flush before this device's work reads them: asked once,
    // here, before the engine is shared (so read without a lock). Where the device cannot say,
    // flush: needless, but never wrong.
    int ordering = cudaGPUDirectRDMAWritesOrderingNone;
    if (cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering,
                               options_.device) != cudaSuccess) {
      (void)cudaGetLastError();
      ordering = cudaGPUDirectRDMAWritesOrderingNone;
    }
    flush_remote_writes_ = ordering < cudaGPUDirectRDMAWritesOrderingOwner;
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat("cuda streams (device ", options_.device, ", pinned staging)");
  }
  bool DeviceIsHost() const override { return false; }

  StatusOr<StagingBuffer> AllocateStaging(std::size_t floats) override {
    if (floats == 0) return StagingBuffer();
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
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
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
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
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
    STAGING_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), event, 0));
    return absl::OkStatus();
  }

  StatusOr<DmaBuf> ExportDmaBuf(const void* device, std::size_t bytes) override {
    return ExportCudaDmaBuf(options_.device, device, bytes);
  }

  Status FlushRemoteWrites() override {
    if (!flush_remote_writes_) return absl::OkStatus();
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
    STAGING_CUDA(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                    cudaFlushGPUDirectRDMAWritesToOwner));
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
    DeviceScope scope(options_.device);
    PHUB_RETURN_IF_ERROR(scope.status());
    std::lock_guard<std::mutex> lock(lane.mu);
    // Back-pressure: retire finished copies; past the limit wait for the oldest, bounded.
    while (!lane.in_flight.empty()) {
      const cudaError_t e = cudaEventQuery(EventOf(lane.in_flight.front()));
      if (e == cudaErrorNotReady && lane.in_flight.size() < options_.max_in_flight) break;
      if (e == cudaErrorNotReady) {
        if (Status room = HostWait(lane.in_flight.front(), options_.backpressure_timeout);
            !room.ok()) {
          return Status(room.code(),
                        absl::StrCat("no room for a copy: ", options_.max_in_flight,
                                     " copies in flight in its direction (the staging ring is "
                                     "full) and the oldest: ",
                                     room.message()));
        }
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
  bool flush_remote_writes_ = true;  // set by Init, read-only after
};

}  // namespace

StatusOr<std::unique_ptr<CopyEngine>> MakeCudaCopyEngine(CudaCopyEngineOptions options) {
  if (options.max_in_flight == 0) {
    return absl::InvalidArgumentError("cuda copy engine: max_in_flight is 0; it must be >= 1");
  }
  if (options.backpressure_timeout <= std::chrono::milliseconds::zero()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda copy engine: backpressure_timeout is ", options.backpressure_timeout.count(),
        " ms; it must be > 0 (how long a copy waits for room in a full staging ring)"));
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

DeviceScope::DeviceScope(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    current = -1;
  }
  if (current == device) return;  // already there: nothing to set or restore
  if (current >= 0 && HasContext(current)) restore_ = current;
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    status_ = CudaFailure(e, "cudaSetDevice", __FILE__, __LINE__);
    status_ = Status(status_.code(),
                     absl::StrCat("making CUDA device ", device, " current: ", status_.message()));
  }
}

DeviceScope::~DeviceScope() {
  if (restore_ >= 0 && cudaSetDevice(restore_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace phub::staging
