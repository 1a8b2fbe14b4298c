#include "phub/transport/verbs/verbs_error.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace phub::transport::verbs {
namespace {

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

constexpr char kNoDmaBuf[] = "its driver has no GPUDirect RDMA support (ibv_reg_dmabuf_mr: ";

std::string Limit(rlim_t value) {
  return value == RLIM_INFINITY ? "unlimited" : absl::StrCat(value, " bytes");
}

}  // namespace

Status VerbsError(const std::string& call, const std::string& device, int err) {
  std::string message = absl::StrCat(call, " on ", device, ": ", ErrnoText(err));
  switch (err) {
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENODEV:
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOMEM:
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    case ETIMEDOUT:
    case ECONNRESET:
    case EPIPE:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

Status RegisterMemoryError(const std::string& device, std::size_t bytes, int err) {
  if (err != ENOMEM && err != EPERM) {
    return VerbsError(absl::StrCat("ibv_reg_mr of ", bytes, " bytes"), device, err);
  }
  rlimit limit{};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  return absl::ResourceExhaustedError(absl::StrCat(
      "ibv_reg_mr of ", bytes, " bytes on ", device, ": ", ErrnoText(err),
      ". Registered memory is locked memory, and this process may lock ", Limit(limit.rlim_cur),
      ". Raise the limit: `ulimit -l unlimited` in the shell that starts it, LimitMEMLOCK=infinity "
      "in its systemd unit, `--ulimit memlock=-1` for docker, or a memlock line in "
      "/etc/security/limits.conf; or run it with CAP_IPC_LOCK"));
}

Status RegisterDmaBufError(const std::string& device, std::size_t bytes, int err) {
  if (err == EOPNOTSUPP || err == ENOSYS || err == EPROTONOSUPPORT) {
    return absl::UnimplementedError(
        absl::StrCat(device, " cannot register device memory (dma-buf): ", kNoDmaBuf,
                     ErrnoText(err), "); stage through host memory"));
  }
  return VerbsError(absl::StrCat("ibv_reg_dmabuf_mr of ", bytes, " bytes of device memory"), device,
                    err);
}

}  // namespace phub::transport::verbs
