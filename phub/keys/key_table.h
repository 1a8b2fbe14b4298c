// The key table: a model's tensors cut into fixed-size chunks, and each chunk placed on one
// (server, core). Pure code: no I/O, no threads. phubd builds it at handshake and sends the
// placement to every worker in the Welcome; PsClient rebuilds the same chunking from the tensor
// table and the chunk size, and takes the placement from the Welcome.
//
// Chunking: tensor t of E elements becomes ceil(E*4 / chunk_bytes) chunks, all of
// chunk_bytes/4 elements except the last (shorter when E is not a multiple). A tensor of 0
// elements has no chunks. Chunk ids are dense, tensor by tensor, in tensor-table order.
//
// Placement ("balanced by bytes"): chunks are assigned greedily, largest first (ties broken by
// chunk id), each to the core with the fewest bytes so far (ties: lowest core index), so the
// heaviest core carries at most one chunk more than the ideal share. Deterministic: the same
// inputs always give the same table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phub/common/status.h"

namespace phub::keys {

struct TensorSpec {
  std::string name;
  std::uint64_t elements = 0;  // float32 elements
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

struct Chunk {
  std::uint32_t id = 0;
  std::uint32_t tensor = 0;      // index into the tensor table
  std::uint64_t offset = 0;      // first element of this chunk within its tensor
  std::uint32_t elements = 0;    // > 0
  std::uint64_t bytes() const { return std::uint64_t{elements} * sizeof(float); }
};

// Index of a core across the whole job: cores are numbered server-major
// (server 0's cores first), so core index = server * cores_per_server + core.
using CoreIndex = std::uint32_t;

class KeyTable {
 public:
  // REQUIRES nothing; returns InvalidArgument when chunk_bytes is 0 or not a multiple of 4, when
  // chunk_bytes/4 does not fit in uint32, when num_cores is 0, or when the table would hold more
  // than 2^32-1 chunks. Messages say which value is wrong and what would be accepted.
  static StatusOr<KeyTable> Build(std::vector<TensorSpec> tensors, std::uint64_t chunk_bytes,
                                  std::uint32_t num_cores);

  // Same chunking, but placement taken from `owners` (chunk id -> core), e.g. from a Welcome.
  // InvalidArgument when owners.size() differs from the number of chunks or an owner is
  // >= num_cores.
  static StatusOr<KeyTable> WithPlacement(std::vector<TensorSpec> tensors,
                                          std::uint64_t chunk_bytes, std::uint32_t num_cores,
                                          std::vector<CoreIndex> owners);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  std::uint64_t chunk_bytes() const { return chunk_bytes_; }
  std::uint32_t num_cores() const { return num_cores_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  // The chunks of tensor t, in offset order (contiguous ids).
  std::span<const Chunk> chunks_of_tensor(std::uint32_t t) const;
  CoreIndex owner(std::uint32_t chunk_id) const { return owners_[chunk_id]; }
  const std::vector<CoreIndex>& owners() const { return owners_; }
  // Chunk ids owned by core c, ascending.
  const std::vector<std::uint32_t>& chunks_on_core(CoreIndex c) const { return by_core_[c]; }
  // Bytes owned by core c.
  std::uint64_t bytes_on_core(CoreIndex c) const;
  std::uint64_t total_elements() const;

 private:
  KeyTable() = default;
  static StatusOr<KeyTable> Chunked(std::vector<TensorSpec> tensors, std::uint64_t chunk_bytes,
                                    std::uint32_t num_cores);
  void IndexByCore();

  std::vector<TensorSpec> tensors_;
  std::uint64_t chunk_bytes_ = 0;
  std::uint32_t num_cores_ = 0;
  std::vector<Chunk> chunks_;
  std::vector<std::uint32_t> first_chunk_of_tensor_;  // size tensors+1
  std::vector<CoreIndex> owners_;
  std::vector<std::vector<std::uint32_t>> by_core_;
};

}  // namespace phub::keys
