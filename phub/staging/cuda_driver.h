// The CUDA driver's calls the staging code needs, looked up once through the runtime
// (cudaGetDriverEntryPointByVersion: no link against libcuda, so a build machine without the
// driver links and the worker starts where the driver is older), and the dma-buf export a NIC
// registers device memory from (GPUDirect RDMA). Internal to phub/staging.
#pragma once

#include <cuda.h>          // the driver's types only: its calls come through the runtime
#include <cudaTypedefs.h>  // PFN_cu* for the calls looked up through the runtime

#include <cstddef>
#include <string>

#include "phub/common/status.h"
#include "phub/staging/copy_engine.h"

namespace phub::staging {

// Null where the driver does not have the call.
struct DriverCalls {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAddressRange_v3020 mem_get_address_range = nullptr;
  PFN_cuMemGetHandleForAddressRange_v11070 mem_get_handle_for_address_range = nullptr;
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
};

const DriverCalls& Driver();

// "CUDA_ERROR_NOT_SUPPORTED" (the number where the driver cannot name it).
std::string DriverErrorName(CUresult r);

// "; staging through host memory instead": the end of every refusal to export.
inline constexpr const char* kStagedInstead = "; staging through host memory instead";

// CopyEngine::ExportDmaBuf on GPU `gpu`: the whole allocation holding [device, device + bytes)
// exported (page-aligned, as the driver requires; a cudaMalloc'd block normally is already),
// and the range's offset in it returned: a NIC registers the dma-buf at that offset.
// Unimplemented, saying why, where the GPU, its driver or the memory cannot.
StatusOr<DmaBuf> ExportCudaDmaBuf(int gpu, const void* device, std::size_t bytes);

}  // namespace phub::staging
