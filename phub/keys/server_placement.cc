#include "phub/keys/server_placement.h"

#include <string>

namespace phub::keys {

StatusOr<std::vector<ServerShare>> SpreadOverServers(const std::vector<TensorSpec>& tensors,
                                                     std::uint64_t chunk_bytes,
                                                     std::uint32_t num_servers) {
  PHUB_ASSIGN_OR_RETURN(KeyTable table, KeyTable::Build(tensors, chunk_bytes, num_servers));
  std::vector<ServerShare> shares(num_servers);
  for (std::uint32_t t = 0; t < tensors.size(); ++t) {
    std::span<const Chunk> chunks = table.chunks_of_tensor(t);
    for (std::size_t i = 0; i < chunks.size();) {
      // A run of consecutive chunks on the same server becomes one slice.
      const CoreIndex server = table.owner(chunks[i].id);
      TensorSlice slice{t, chunks[i].offset, 0};
      for (; i < chunks.size() && table.owner(chunks[i].id) == server; ++i) {
        slice.elements += chunks[i].elements;
      }
      ServerShare& share = shares[server];
      std::string name = tensors[t].name;
      if (slice.elements != tensors[t].elements) {
        name += '@';  // appended piecewise: "lit" + string trips GCC 12's -Wrestrict (bug 105329)
        name += std::to_string(slice.offset);
      }
      share.tensors.push_back({std::move(name), slice.elements});
      share.slices.push_back(slice);
    }
  }
  return shares;
}

}  // namespace phub::keys
