// OpenStore (rendezvous.h): the one place that names both stores.
#include "absl/strings/str_cat.h"
#include "phub/rendezvous/address.h"
#include "phub/rendezvous/file_store.h"
#include "phub/rendezvous/rendezvous.h"
#include "phub/rendezvous/tcp_store.h"

namespace phub::rendezvous {

StatusOr<std::unique_ptr<Store>> OpenStore(const StoreOptions& options) {
  PHUB_ASSIGN_OR_RETURN(const Address address, ParseAddress(options.address));
  if (const auto* directory = std::get_if<DirectoryAddress>(&address)) {
    return std::unique_ptr<Store>(std::make_unique<FileStore>(directory->directory));
  }
  if (options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: rank ", options.rank,
                                                   " is outside the world of ", options.world_size,
                                                   " ranks"));
  }
  PHUB_ASSIGN_OR_RETURN(auto store, TcpStore::Open(std::get<TcpAddress>(address), options.rank,
                                                   options.world_size, options.timeout_ms));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace phub::rendezvous
