#include "phub/nccl/nccl_allreduce.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/common/membership.h"
#include "phub/nccl/detail/checks.h"
#include "phub/nccl/unique_id.h"
#include "spdlog/spdlog.h"

namespace phub::nccl {

using detail::CudaError;
using detail::NcclError;

namespace {

using Clock = std::chrono::steady_clock;

Status ValidateOptions(const NcclOptions& o) {
  if (o.world_size == 0) {
    return absl::InvalidArgumentError("world_size is 0: it must be the number of ranks (>= 1)");
  }
  if (o.world_size > static_cast<std::uint32_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size ", o.world_size, " is more ranks than NCCL supports"));
  }
  PHUB_RETURN_IF_ERROR(CheckMembership(o.rank, o.world_size));
  if (o.world_size > 1 && o.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous is empty: ", o.world_size,
        " ranks need one to exchange the NCCL id: a directory they all share, or "
        "tcp://HOST:PORT with HOST the address of rank 0's node"));
  }
  if (o.device < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", o.device, " is not a CUDA device ordinal: use >= 0, or -1 for rank % devices"));
  }
  if (o.timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms is ", o.timeout_ms, ": it must be > 0"));
  }
  return absl::OkStatus();
}

const char* VisibleDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v != nullptr ? v : "(unset)";
}

// A non-blocking communicator runs init, enqueue and finalize in the background and reports
// ncclInProgress until done. Polls until it is done (ok), fails (NCCL's error for `what()`) or
// `deadline` passes (DeadlineExceeded, with `on_timeout()` appended). Sleeps `pause` between
// polls (zero: yield, for short waits where latency matters). The messages are built only on
// failure: this sits on every call's path.
template <typename What, typename OnTimeout>
Status WaitForComm(ncclComm_t comm, Clock::time_point deadline, What&& what,
                   std::chrono::microseconds pause, OnTimeout&& on_timeout) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) {
      return NcclError(r, comm, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, comm, what().c_str(), __FILE__, __LINE__);
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what(), " did not finish in time", on_timeout()));
    }
    if (pause.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace

StatusOr<int> CudaDeviceCount() {
  // No driver at all (no libcuda, or only its stub): cudaDriverGetVersion reports 0.
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    (void)cudaGetLastError();
    return 0;
  }
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice) {  // a driver, but no GPU (or CUDA_VISIBLE_DEVICES hides all)
    (void)cudaGetLastError();
    return 0;
  }
  if (error != cudaSuccess) return CudaError(error, "cudaGetDeviceCount", __FILE__, __LINE__);
  return count;
}

std::string NcclVersion() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  return absl::StrCat(code / 10000, ".", code / 100 % 100, ".", code % 100);
}

// Owns the stream and the communicator. Not thread-safe (the public contract).
class NcclAllreduce::Impl {
 public:
  Impl(NcclOptions options, int device) : options_(std::move(options)), device_(device) {}
  ~Impl();

  Status Init();
  Status Allreduce(void* data, std::size_t count, kernels::WireFormat format, ReduceOp op,
                   cudaEvent_t after = nullptr,
                   const std::function<Status(void* stream)>* then = nullptr,
                   bool wait = true);
  StatusOr<bool> Poll(cudaEvent_t event, Clock::time_point deadline);
  // One look at work polled for (`query`: cudaStreamQuery's or cudaEventQuery's answer): true
  // when done, false while running; NCCL's async error, a CUDA error or the deadline abort.
  template <typename What>
  StatusOr<bool> Progress(cudaError_t query, Clock::time_point deadline, What&& what);

  const NcclOptions options_;
  const int device_;

 private:
  std::string Where() const {
    return absl::StrCat("rank ", options_.rank, " of ", options_.world_size, ", device ", device_);
  }
  // Aborts the communicator after `status` (a failed or timed-out operation) and remembers it:
  // NCCL cannot resume a communicator whose peers may be stuck mid-collective.
  Status Abort(Status status);

  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  Status aborted_by_;  // not ok once the communicator was aborted
};

NcclAllreduce::Impl::~Impl() {
  if (comm_ != nullptr) {
    (void)cudaSetDevice(device_);
    // Finalize flushes outstanding work and releases the network resources; on a peer that no
    // longer answers it would wait, so it is bounded and falls back to abort.
    bool finalized = false;
    if (const ncclResult_t r = ncclCommFinalize(comm_); r == ncclSuccess || r == ncclInProgress) {
      const Status s = WaitForComm(
          comm_, Clock::now() + std::chrono::milliseconds(options_.timeout_ms),
          [] { return std::string("ncclCommFinalize"); }, std::chrono::milliseconds(1),
          [this] { return absl::StrCat(" (", options_.timeout_ms, " ms)"); });
      finalized = s.ok();
      if (!s.ok()) spdlog::warn("nccl {}: {}; aborting the communicator", Where(), s.message());
    }
    if (finalized) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
  }
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status NcclAllreduce::Impl::Abort(Status status) {
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  aborted_by_ = status;
  return status;
}

Status NcclAllreduce::Impl::Init() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  PHUB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // Blocking (default flags): ordered after the caller's work on the legacy default stream.
  PHUB_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&stream_));

  // Rank 0 publishes the id; the others look it up and are done with the store.
  std::unique_ptr<rendezvous::Store> store;
  const auto here = [this](const Status& s) {
    return Status(s.code(), absl::StrCat("nccl ", Where(), ": ", s.message()));
  };
  if (options_.world_size > 1) {
    auto opened = rendezvous::OpenStore(
        {options_.rendezvous, options_.rank, options_.world_size, options_.timeout_ms});
    if (!opened.ok()) return here(opened.status());
    store = *std::move(opened);
  }
  ncclUniqueId id;
  if (options_.rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return NcclError(r, nullptr, "ncclGetUniqueId", __FILE__, __LINE__);
    }
    if (store != nullptr) {
      UniqueIdBytes bytes;
      std::memcpy(bytes.data(), id.internal, bytes.size());
      if (Status s = PublishUniqueId(*store, bytes); !s.ok()) return here(s);
    }
  } else {
    auto bytes = LookupUniqueId(*store, options_.timeout_ms);
    if (!bytes.ok()) return here(bytes.status());
    std::memcpy(id.internal, bytes->data(), bytes->size());
    if (Status s = store->Finish(); !s.ok()) return here(s);
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that joining (and every call) can be bounded by timeout_ms
  const auto what = [this] { return absl::StrCat("ncclCommInitRankConfig (", Where(), ")"); };
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, static_cast<int>(options_.world_size), id,
                                                static_cast<int>(options_.rank), &config);
  Status joined;
  if (r != ncclSuccess && r != ncclInProgress) {
    joined = NcclError(r, comm_, what().c_str(), __FILE__, __LINE__);
  } else {
    joined = WaitForComm(comm_, deadline, what, std::chrono::milliseconds(1), [&] {
      return absl::StrCat(" (", options_.timeout_ms, " ms): are all ", options_.world_size,
                          " ranks running, with the same --rendezvous (", options_.rendezvous,
                          ")? With a directory, a '", kUniqueIdKey,
                          "' left there by an earlier job misleads late ranks: use a fresh one");
    });
  }
  // Every rank has read the id once the communicator is complete; removing it lets the next
  // job reuse a directory. Removed on failure too: the id names a communicator that is gone.
  // Then rank 0's TCP server stops (every rank was done with it before joining); after a
  // failure it stops at once, with the store.
  if (options_.rank == 0 && store != nullptr) {
    if (Status s = store->Remove(kUniqueIdKey); !s.ok()) {
      spdlog::warn("nccl {}: {}", Where(), s.message());
    }
    if (joined.ok()) {
      if (Status s = store->Finish(); !s.ok()) spdlog::warn("nccl {}: {}", Where(), s.message());
    }
  }
  if (!joined.ok()) return Abort(joined);
  return absl::OkStatus();
}

namespace {
ncclDataType_t NcclType(kernels::WireFormat format) {
  switch (format) {
    case kernels::WireFormat::kBf16:
      return ncclBfloat16;
    case kernels::WireFormat::kFp16:
      return ncclHalf;
    case kernels::WireFormat::kFp32:
      break;
  }
  return ncclFloat;
}
}  // namespace

Status NcclAllreduce::Impl::Allreduce(void* data, std::size_t count, kernels::WireFormat format,
                                      ReduceOp op, cudaEvent_t after,
                                      const std::function<Status(void* stream)>* then,
                                      bool wait) {
  if (!aborted_by_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl ", Where(), ": the communicator was aborted after an earlier failure (",
                     aborted_by_.message(), "); restart the job"));
  }
  if (count == 0) return absl::OkStatus();
  if (data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl ", Where(), ": Allreduce of ", count, " ",
                     kernels::WireFormatName(format), " elements at a null pointer"));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  PHUB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const auto what = [&] {
    return absl::StrCat("ncclAllReduce of ", count, " ", kernels::WireFormatName(format),
                        " elements (", Where(), ")");
  };
  const auto on_timeout = [this] {
    return absl::StrCat(" (", options_.timeout_ms,
                        " ms): has a peer rank died, or not made the same call? Every rank must "
                        "call Allreduce with the same count, in the same order");
  };
  if (after != nullptr) PHUB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, after, 0));
  const ncclResult_t r = ncclAllReduce(data, data, count, NcclType(format),
                                       op == ReduceOp::kMean ? ncclAvg : ncclSum, comm_, stream_);
  if (r == ncclInProgress) {  // non-blocking communicator: the enqueue finishes in background
    if (Status s = WaitForComm(comm_, deadline, what, std::chrono::microseconds(0), on_timeout);
        !s.ok()) {
      return Abort(s);
    }
  } else if (r != ncclSuccess) {
    return Abort(NcclError(r, comm_, what().c_str(), __FILE__, __LINE__));
  }
  if (then != nullptr) PHUB_RETURN_IF_ERROR((*then)(stream_));
  if (!wait) return absl::OkStatus();
  // Not cudaStreamSynchronize: it cannot be interrupted, so a dead peer would hang this thread
  // forever. Polling the stream and NCCL's async error bounds the wait; yield keeps latency low.
  while (true) {
    PHUB_ASSIGN_OR_RETURN(const bool done, Progress(cudaStreamQuery(stream_), deadline, what));
    if (done) return absl::OkStatus();
    std::this_thread::yield();
  }
}

template <typename What>
StatusOr<bool> NcclAllreduce::Impl::Progress(cudaError_t query, Clock::time_point deadline,
                                             What&& what) {
  if (query == cudaSuccess) return true;
  if (query != cudaErrorNotReady) {
    return Abort(CudaError(query, what().c_str(), __FILE__, __LINE__));
  }
  ncclResult_t state = ncclSuccess;
  if (const ncclResult_t q = ncclCommGetAsyncError(comm_, &state); q != ncclSuccess) {
    return Abort(NcclError(q, comm_, "ncclCommGetAsyncError", __FILE__, __LINE__));
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    return Abort(NcclError(state, comm_, what().c_str(), __FILE__, __LINE__));
  }
  if (Clock::now() >= deadline) {
    return Abort(absl::DeadlineExceededError(absl::StrCat(
        what(), " did not finish (", options_.timeout_ms,
        " ms): has a peer rank died, or not made the same call? Every rank must call Allreduce "
        "with the same count, in the same order")));
  }
  return false;
}

StatusOr<bool> NcclAllreduce::Impl::Poll(cudaEvent_t event, Clock::time_point deadline) {
  if (!aborted_by_.ok()) return aborted_by_;
  return Progress(cudaEventQuery(event), deadline, [this] {
    return absl::StrCat("an enqueued ncclAllReduce (", Where(), ")");
  });
}

StatusOr<std::unique_ptr<NcclAllreduce>> NcclAllreduce::Connect(const NcclOptions& options) {
  PHUB_RETURN_IF_ERROR(ValidateOptions(options));  // before anything touches CUDA
  PHUB_ASSIGN_OR_RETURN(const int devices, CudaDeviceCount());
  if (devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl rank ", options.rank,
                     ": no CUDA device (no NVIDIA driver, or no GPU visible; "
                     "CUDA_VISIBLE_DEVICES=",
                     VisibleDevices(),
                     "): the NCCL allreduce needs one GPU per "
                     "rank; run it on a GPU machine (nvidia-smi lists the GPUs)"));
  }
  const int device =
      options.device >= 0 ? options.device : static_cast<int>(options.rank % devices);
  if (device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl rank ", options.rank, ": device ", device,
                     " does not exist: this process sees ", devices, " CUDA device(s), 0..",
                     devices - 1, " (CUDA_VISIBLE_DEVICES=", VisibleDevices(), ")"));
  }
  auto impl = std::make_unique<Impl>(options, device);
  PHUB_RETURN_IF_ERROR(impl->Init());  // on failure, ~Impl releases what Init created
  return std::unique_ptr<NcclAllreduce>(new NcclAllreduce(std::move(impl)));
}

NcclAllreduce::NcclAllreduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclAllreduce::~NcclAllreduce() = default;

Status NcclAllreduce::Allreduce(float* device_data, std::size_t count, ReduceOp op) {
  return impl_->Allreduce(device_data, count, kernels::WireFormat::kFp32, op);
}
Status NcclAllreduce::Allreduce(void* device_data, std::size_t count, kernels::WireFormat format,
                                ReduceOp op) {
  return impl_->Allreduce(device_data, count, format, op);
}

Status NcclAllreduce::Allreduce(float* device_data, std::size_t count, ReduceOp op, void* after,
                                const std::function<Status(void* stream)>& then) {
  return impl_->Allreduce(device_data, count, kernels::WireFormat::kFp32, op,
                          static_cast<cudaEvent_t>(after), &then);
}

Status NcclAllreduce::Enqueue(float* device_data, std::size_t count, ReduceOp op, void* after,
                              const std::function<Status(void* stream)>& then) {
  return impl_->Allreduce(device_data, count, kernels::WireFormat::kFp32, op,
                          static_cast<cudaEvent_t>(after), &then, /*wait=*/false);
}

StatusOr<bool> NcclAllreduce::Poll(void* event, std::chrono::steady_clock::time_point deadline) {
  return impl_->Poll(static_cast<cudaEvent_t>(event), deadline);
}

int NcclAllreduce::device() const { return impl_->device_; }
std::uint32_t NcclAllreduce::rank() const { return impl_->options_.rank; }
std::uint32_t NcclAllreduce::world_size() const { return impl_->options_.world_size; }

}  // namespace phub::nccl
