// The GPU backend: cuDNN and cuBLAS (worker/backend/cudnn/*.cc) plus a few kernels of its own
// (kernels.h), on device tensors. Built where CMake finds CUDA and cuDNN >= 9 (PHUB_HAVE_CUDNN
// is then defined for code linking phub_backend_cudnn). This header needs no CUDA headers.
#pragma once

#include <memory>
#include <string>

#include "worker/backend/backend.h"

namespace phub::worker {

struct CudnnOptions {
  // The CUDA device ordinal (within CUDA_VISIBLE_DEVICES).
  int device = 0;
  // Let convolutions, GEMMs and the LSTM use TF32 tensor-core math (Ampere and later): several
  // times faster, but products are rounded to 10 mantissa bits (~1e-3 relative error instead of
  // float32's ~1e-7), so results no longer agree with the CPU backend to 1e-4. Off by default,
  // as PyTorch defaults matmuls to strict float32.
  bool allow_tf32 = false;
};

// Makes the backend: a stream, cuDNN and cuBLAS handles on `options.device`, which becomes the
// calling thread's current device. Installs the process's device-tensor allocator
// (Tensor::Allocate on Device::kCuda), so one GPU per process. The backend and its ops are used by
// one thread at a time, whose current device must be this one; ops are asynchronous on the
// backend's stream (CopyToHost, SoftmaxCrossEntropy::Forward, Embedding and Synchronize wait;
// an asynchronous failure of an op is returned by the next of them). FailedPrecondition
// ("cuDNN backend: no CUDA device: ...") where no GPU is usable, InvalidArgument for a device
// that does not exist, else the failure of the CUDA, cuDNN or cuBLAS call setting it up.
StatusOr<std::unique_ptr<Backend>> MakeCudnnBackend(const CudnnOptions& options);
StatusOr<std::unique_ptr<Backend>> MakeCudnnBackend(int device = 0);

// The number of CUDA devices this process sees; 0, with the reason in *why if given (no driver,
// no GPU, CUDA_VISIBLE_DEVICES empty), where there is none. Needs no GPU.
int CudaDeviceCount(std::string* why = nullptr);

}  // namespace phub::worker
