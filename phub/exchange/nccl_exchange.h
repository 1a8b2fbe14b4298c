// `--comm nccl`: NCCL's allreduce (phub/nccl) behind AllreduceExchange, the GPU ring users
// would otherwise pick. The worker's exchange API hands over host arrays (the Trainer keeps host
// mirrors of its parameters), so each gradient is staged through a device buffer: copied to
// the GPU, averaged by NCCL, copied back, and the optimizer steps the host weights as the ring
// exchange does. The two PCIe copies cost ~2 x bytes / 25 GB/s; keeping gradients on the GPU
// end to end is the next step once the Trainer hands device arrays to the exchange.
//
// Built only where CMake found CUDA and NCCL (PHUB_HAVE_NCCL); elsewhere MakeExchange answers
// `--comm nccl` with an error saying so.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phub/common/membership.h"
#include "phub/exchange/allreduce_exchange.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/keys/key_table.h"

namespace phub::nccl {
struct NcclOptions;  // phub/nccl/nccl_allreduce.h (built with NCCL only)
}  // namespace phub::nccl

namespace phub::exchange {

struct NcclExchangeOptions {
  std::string rendezvous;              // a shared directory or tcp://HOST:PORT[/JOB]
  int device = -1;                     // CUDA device ordinal; -1: rank % visible devices
  int timeout_ms = 60000;              // bounds joining and each allreduce
  kernels::OptimizerConfig optimizer;  // what phubd's --optimizer flags would say
  // `--wire`: fp32, or bf16/fp16: the gradient is rounded on the host (half the PCIe bytes
  // too) and NCCL reduces in that type (ncclBfloat16/ncclHalf), as users of NCCL's
  // reduced-precision allreduce (Horovod's fp16 compression) do.
  kernels::WireFormat wire = kernels::WireFormat::kFp32;
};

// The communicator's options for `membership` (what both NCCL exchanges join with).
nccl::NcclOptions CommunicatorOptions(const NcclExchangeOptions& options, Membership membership);

// Joins the NCCL communicator (blocks until every rank has), then as AllreduceExchange::Create.
// FailedPrecondition without a usable GPU.
StatusOr<std::unique_ptr<AllreduceExchange>> ConnectNcclExchange(
    const NcclExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights);

}  // namespace phub::exchange
