#include "phub/staging/cuda_driver.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "phub/staging/cuda_copy_engine.h"

namespace phub::staging {
namespace {

template <typename Fn>
void LookUp(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  // 12000: each of these calls' signature since long before; every driver a CUDA 12+ runtime
  // runs on has it.
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    p = nullptr;
  }
  fn = reinterpret_cast<Fn>(p);
}

}  // namespace

const DriverCalls& Driver() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    LookUp("cuCtxGetCurrent", c.ctx_get_current);
    LookUp("cuDeviceGet", c.device_get);
    LookUp("cuDevicePrimaryCtxGetState", c.primary_ctx_get_state);
    LookUp("cuDeviceGetAttribute", c.device_get_attribute);
    LookUp("cuMemGetAddressRange", c.mem_get_address_range);  // the _v2 (64-bit) one at 12000
    LookUp("cuMemGetHandleForAddressRange", c.mem_get_handle_for_address_range);
    LookUp("cuGetErrorName", c.get_error_name);
    return c;
  }();
  return calls;
}

std::string DriverErrorName(CUresult r) {
  const char* name = nullptr;
  if (Driver().get_error_name != nullptr && Driver().get_error_name(r, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return absl::StrCat("CUresult ", static_cast<int>(r));
}

StatusOr<DmaBuf> ExportCudaDmaBuf(int gpu, const void* device, std::size_t bytes) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("ExportDmaBuf of a null device pointer");
  }
  const DriverCalls& driver = Driver();
  if (driver.device_get == nullptr || driver.device_get_attribute == nullptr ||
      driver.mem_get_address_range == nullptr ||
      driver.mem_get_handle_for_address_range == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "the NVIDIA driver has no dma-buf export (cuMemGetHandleForAddressRange needs a "
        "driver of CUDA 11.7 or later) for GPU ",
        gpu, kStagedInstead));
  }
  DeviceScope scope(gpu);
  PHUB_RETURN_IF_ERROR(scope.status());
  CUdevice cu_device;
  int supported = 0;
  if (driver.device_get(&cu_device, gpu) != CUDA_SUCCESS ||
      driver.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cu_device) !=
          CUDA_SUCCESS) {
    supported = 0;  // a driver that cannot say cannot export either
  }
  if (supported == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "GPU ", gpu,
        " does not support dma-buf export (GPUDirect RDMA needs a data-center GPU and an "
        "open kernel module driver)",
        kStagedInstead));
  }
  const auto ptr = reinterpret_cast<CUdeviceptr>(device);
  const std::string at = absl::StrCat("0x", absl::Hex(ptr));
  cudaPointerAttributes where{};
  if (cudaPointerGetAttributes(&where, device) != cudaSuccess ||
      where.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return absl::UnimplementedError(absl::StrCat(
        "memory at ", at,
        " is not device memory from cudaMalloc (host, managed or unknown memory has no "
        "dma-buf to export)",
        kStagedInstead));
  }
  if (where.device != gpu) {
    return absl::InvalidArgumentError(absl::StrCat("memory at ", at, " is on GPU ", where.device,
                                                   ", not this engine's GPU ", gpu,
                                                   ": export it with that GPU's engine"));
  }
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (CUresult r = driver.mem_get_address_range(&base, &size, ptr); r != CUDA_SUCCESS) {
    return absl::UnimplementedError(absl::StrCat("cuMemGetAddressRange of ", at,
                                                 " failed: ", DriverErrorName(r),
                                                 " (not a device allocation)", kStagedInstead));
  }
  if (bytes > size - (ptr - base)) {  // ptr - base <= size: the driver found ptr in it
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes at ", at,
                                                   " run past the end of its allocation (", size,
                                                   " bytes at offset ", ptr - base, ")"));
  }
  const CUdeviceptr page = static_cast<CUdeviceptr>(::sysconf(_SC_PAGESIZE));
  const CUdeviceptr begin = base / page * page;
  const CUdeviceptr end = (base + size + page - 1) / page * page;
  int fd = -1;
  // PCIe BAR1 mapping first: on a machine with both PCIe and C2C (Grace) it is the one a NIC
  // can reach; drivers that do not know the flag refuse it, and then the default mapping.
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  for (unsigned long long flags :
       {static_cast<unsigned long long>(CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE), 0ULL}) {
    r = driver.mem_get_handle_for_address_range(&fd, begin, end - begin,
                                                CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, flags);
    if (r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_NOT_SUPPORTED) break;
  }
  if (r == CUDA_SUCCESS) return DmaBuf(fd, ptr - begin);
  const std::string what =
      absl::StrCat("cuMemGetHandleForAddressRange (dma-buf of ", end - begin, " bytes on GPU ", gpu,
                   ") failed: ", DriverErrorName(r), kStagedInstead);
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
    return absl::UnimplementedError(what);
  }
  return absl::InternalError(what);
}

}  // namespace phub::staging
