// Every verbs call is checked, and a failure becomes a Status that names the call, the device
// and errno's meaning: "ibv_reg_mr on rxe0: Cannot allocate memory (errno 12)". Registering
// memory fails with ENOMEM when the locked-memory limit is too low; that case gets its own
// message saying how to raise the limit. A device that cannot register device memory (dma-buf)
// is Unimplemented, which tells the caller to stage through host memory.
#pragma once

#include <cstddef>
#include <string>

#include "phub/common/status.h"

namespace phub::transport::verbs {

// `err` is the errno the call left (or returned: ibv_modify_qp and friends return it).
Status VerbsError(const std::string& call, const std::string& device, int err);

// ibv_reg_mr's failure: as VerbsError, but ENOMEM/EPERM explain RLIMIT_MEMLOCK (its current
// value) and how to raise it (ulimit -l, systemd's LimitMEMLOCK, /etc/security/limits.conf).
Status RegisterMemoryError(const std::string& device, std::size_t bytes, int err);

// ibv_reg_dmabuf_mr's failure: Unimplemented where the device or its driver cannot register a
// dma-buf (EOPNOTSUPP, ENOSYS, EPROTONOSUPPORT: no GPUDirect RDMA there), saying to stage
// through host memory; otherwise as VerbsError. Device memory is not locked memory, so no
// memlock advice.
Status RegisterDmaBufError(const std::string& device, std::size_t bytes, int err);

}  // namespace phub::transport::verbs
