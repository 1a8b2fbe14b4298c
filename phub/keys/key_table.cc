#include "phub/keys/key_table.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <utility>

namespace phub::keys {
namespace {

constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kMaxChunkBytes = kMaxU32 * sizeof(float);  // chunk_bytes/4 fits in uint32
constexpr std::uint64_t kMaxChunks = kMaxU32;                      // ids are uint32
// Per-core loads are summed in bytes, so the whole table's bytes must fit in uint64.
constexpr std::uint64_t kMaxTotalElements =
    std::numeric_limits<std::uint64_t>::max() / sizeof(float);

std::string Str(std::uint64_t v) { return std::to_string(v); }

Status ValidateShape(std::size_t num_tensors, std::uint64_t chunk_bytes, std::uint32_t num_cores) {
  if (chunk_bytes == 0 || chunk_bytes % sizeof(float) != 0 || chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        "KeyTable: chunk_bytes is " + Str(chunk_bytes) +
        "; it must be a positive multiple of 4 (one float32) and at most " + Str(kMaxChunkBytes) +
        " (4 * (2^32-1)), e.g. 4096");
  }
  if (num_cores == 0) {
    return absl::InvalidArgumentError(
        "KeyTable: num_cores is 0; it must be at least 1 (servers * cores per server)");
  }
  if (num_tensors > kMaxU32) {
    return absl::InvalidArgumentError("KeyTable: the tensor table has " + Str(num_tensors) +
                                      " tensors; at most " + Str(kMaxU32) + " are accepted");
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<KeyTable> KeyTable::Chunked(std::vector<TensorSpec> tensors, std::uint64_t chunk_bytes,
                                     std::uint32_t num_cores) {
  PHUB_RETURN_IF_ERROR(ValidateShape(tensors.size(), chunk_bytes, num_cores));
  const std::uint64_t per_chunk = chunk_bytes / sizeof(float);

  // Count before allocating, so an oversized table is rejected without trying to build it.
  std::uint64_t num_chunks = 0;
  std::uint64_t total_elements = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::uint64_t e = tensors[t].elements;
    const std::uint64_t n = e / per_chunk + (e % per_chunk != 0 ? 1 : 0);  // ceil, no overflow
    if (n > kMaxChunks - num_chunks) {
      return absl::InvalidArgumentError(
          "KeyTable: tensors 0.." + Str(t) + " (through '" + tensors[t].name +
          "') need more than " + Str(kMaxChunks) + " chunks of " + Str(chunk_bytes) + " bytes (" +
          Str(num_chunks) + " before tensor " + Str(t) + ", which adds " + Str(n) + "); at most " +
          Str(kMaxChunks) + " chunks are accepted: use a larger chunk_bytes");
    }
    num_chunks += n;
    if (e > kMaxTotalElements - total_elements) {
      return absl::InvalidArgumentError(
          "KeyTable: the tensor table holds more than " + Str(kMaxTotalElements) +
          " elements in all (reached at tensor " + Str(t) + " '" + tensors[t].name +
          "'), so its size in bytes does not fit in 64 bits");
    }
    total_elements += e;
  }

  KeyTable table;
  table.chunk_bytes_ = chunk_bytes;
  table.num_cores_ = num_cores;
  table.chunks_.reserve(num_chunks);
  table.first_chunk_of_tensor_.reserve(tensors.size() + 1);
  for (std::uint32_t t = 0; t < tensors.size(); ++t) {
    table.first_chunk_of_tensor_.push_back(static_cast<std::uint32_t>(table.chunks_.size()));
    const std::uint64_t e = tensors[t].elements;
    for (std::uint64_t offset = 0; offset < e; offset += per_chunk) {
      Chunk c;
      c.id = static_cast<std::uint32_t>(table.chunks_.size());
      c.tensor = t;
      c.offset = offset;
      c.elements = static_cast<std::uint32_t>(std::min(per_chunk, e - offset));
      table.chunks_.push_back(c);
    }
  }
  table.first_chunk_of_tensor_.push_back(static_cast<std::uint32_t>(table.chunks_.size()));
  table.tensors_ = std::move(tensors);
  return table;
}

StatusOr<KeyTable> KeyTable::Build(std::vector<TensorSpec> tensors, std::uint64_t chunk_bytes,
                                   std::uint32_t num_cores) {
  PHUB_ASSIGN_OR_RETURN(KeyTable table, Chunked(std::move(tensors), chunk_bytes, num_cores));

  // Largest first, ties by id. Every chunk is full-size except possibly the last of each tensor,
  // so the order is: all full chunks in id order, then the short tails sorted. This is the same
  // order a full sort by (bytes desc, id asc) gives, in O(C + T log T).
  const std::uint64_t per_chunk = chunk_bytes / sizeof(float);
  std::vector<std::uint32_t> order;
  order.reserve(table.chunks_.size());
  std::vector<std::uint32_t> tails;
  for (const Chunk& c : table.chunks_) {
    (c.elements == per_chunk ? order : tails).push_back(c.id);
  }
  std::sort(tails.begin(), tails.end(), [&](std::uint32_t a, std::uint32_t b) {
    const std::uint32_t ea = table.chunks_[a].elements;
    const std::uint32_t eb = table.chunks_[b].elements;
    return ea != eb ? ea > eb : a < b;
  });
  order.insert(order.end(), tails.begin(), tails.end());

  // Min-heap of (bytes so far, core): the top is the least-loaded core, lowest index on ties.
  using Load = std::pair<std::uint64_t, CoreIndex>;
  std::vector<Load> initial;
  initial.reserve(std::min<std::uint64_t>(num_cores, order.size()));
  // Cores past the chunk count would never be picked (lower-index empty cores win the tie).
  for (CoreIndex c = 0; c < num_cores && c < order.size(); ++c) initial.emplace_back(0, c);
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap(std::greater<Load>{},
                                                                        std::move(initial));
  table.owners_.assign(table.chunks_.size(), 0);
  for (std::uint32_t id : order) {
    auto [bytes, core] = heap.top();
    heap.pop();
    table.owners_[id] = core;
    heap.emplace(bytes + table.chunks_[id].bytes(), core);
  }
  table.IndexByCore();
  return table;
}

StatusOr<KeyTable> KeyTable::WithPlacement(std::vector<TensorSpec> tensors,
                                           std::uint64_t chunk_bytes, std::uint32_t num_cores,
                                           std::vector<CoreIndex> owners) {
  PHUB_ASSIGN_OR_RETURN(KeyTable table, Chunked(std::move(tensors), chunk_bytes, num_cores));
  if (owners.size() != table.chunks_.size()) {
    return absl::InvalidArgumentError("KeyTable::WithPlacement: owners has " + Str(owners.size()) +
                                      " entries; the tensor table cut into " + Str(chunk_bytes) +
                                      "-byte chunks has " + Str(table.chunks_.size()) +
                                      " chunks, and there must be one owner per chunk");
  }
  for (std::size_t id = 0; id < owners.size(); ++id) {
    if (owners[id] >= num_cores) {
      return absl::InvalidArgumentError("KeyTable::WithPlacement: owner of chunk " + Str(id) +
                                        " is core " + Str(owners[id]) + "; cores are 0.." +
                                        Str(num_cores - 1) + " (num_cores " + Str(num_cores) + ")");
    }
  }
  table.owners_ = std::move(owners);
  table.IndexByCore();
  return table;
}

void KeyTable::IndexByCore() {
  std::vector<std::uint32_t> counts(num_cores_, 0);
  for (CoreIndex c : owners_) ++counts[c];
  by_core_.assign(num_cores_, {});
  for (CoreIndex c = 0; c < num_cores_; ++c) by_core_[c].reserve(counts[c]);
  // Ascending ids per core because chunks are visited in id order.
  for (std::uint32_t id = 0; id < owners_.size(); ++id) by_core_[owners_[id]].push_back(id);
}

std::span<const Chunk> KeyTable::chunks_of_tensor(std::uint32_t t) const {
  assert(t + std::size_t{1} < first_chunk_of_tensor_.size());
  const std::uint32_t first = first_chunk_of_tensor_[t];
  const std::uint32_t end = first_chunk_of_tensor_[t + 1];
  return std::span<const Chunk>(chunks_).subspan(first, end - first);
}

std::uint64_t KeyTable::bytes_on_core(CoreIndex c) const {
  std::uint64_t bytes = 0;
  for (std::uint32_t id : by_core_[c]) bytes += chunks_[id].bytes();
  return bytes;
}

std::uint64_t KeyTable::total_elements() const {
  std::uint64_t total = 0;
  for (const TensorSpec& t : tensors_) total += t.elements;
  return total;
}

}  // namespace phub::keys
