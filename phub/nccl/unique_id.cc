#include "phub/nccl/unique_id.h"

#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::nccl {

static_assert(kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES && sizeof(ncclUniqueId) == kUniqueIdBytes,
              "UniqueIdBytes must hold exactly one ncclUniqueId");

Status PublishUniqueId(rendezvous::Store& store, const UniqueIdBytes& id) {
  return store.Publish(kUniqueIdKey, std::string(id.data(), id.size()));
}

StatusOr<UniqueIdBytes> LookupUniqueId(rendezvous::Store& store, int timeout_ms) {
  PHUB_ASSIGN_OR_RETURN(const std::string bytes, store.Lookup(kUniqueIdKey, timeout_ms));
  if (bytes.size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", kUniqueIdKey, "' in the rendezvous ", store.address(), " holds ", bytes.size(),
        " bytes, not a ", kUniqueIdBytes,
        "-byte NCCL id: remove it, or give every rank a fresh rendezvous directory (or its own "
        "tcp:// port)"));
  }
  UniqueIdBytes id;
  std::memcpy(id.data(), bytes.data(), id.size());
  return id;
}

}  // namespace phub::nccl
