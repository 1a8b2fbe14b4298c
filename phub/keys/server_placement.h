// Colocated placement (ps-lite / BytePS style): no dedicated PS box; one phubd runs on every
// worker host and each owns a share of the model. The model is cut into the key table's
// chunks, the chunks are spread over the servers exactly as KeyTable spreads them over cores
// (largest first to the least-loaded server: full chunks round-robin), and each server's share
// is described as slices of the caller's tensors, with consecutive chunks of one tensor on one
// server merged into one slice. A server's share becomes its own tensor table: phubd needs no
// notion of other servers, and each of them balances its share over its own cores.
//
// Why spread every tensor rather than give each server whole tensors: backward produces the
// last layers' gradients first, and a tensor spread over all servers keeps every host's link
// busy from the first push on (and a huge tensor cannot load one host).
#pragma once

#include <cstdint>
#include <vector>

#include "phub/common/status.h"
#include "phub/keys/key_table.h"

namespace phub::keys {

// A contiguous range of one of the caller's tensors.
struct TensorSlice {
  std::uint32_t tensor = 0;    // index into the caller's tensor table
  std::uint64_t offset = 0;    // first element
  std::uint64_t elements = 0;  // > 0
};

// What one server owns: slices in caller-tensor order, and the same slices as the tensor table
// that server is given (a slice covering a whole tensor keeps its name; a partial slice is
// named "<name>@<offset>").
struct ServerShare {
  std::vector<TensorSlice> slices;
  std::vector<TensorSpec> tensors;  // tensors[i] describes slices[i]
};

// REQUIRES nothing. Same validation and errors as KeyTable::Build (num_servers in the role of
// num_cores). With one server, its share is every non-empty tensor whole. Deterministic.
StatusOr<std::vector<ServerShare>> SpreadOverServers(const std::vector<TensorSpec>& tensors,
                                                     std::uint64_t chunk_bytes,
                                                     std::uint32_t num_servers);

}  // namespace phub::keys
