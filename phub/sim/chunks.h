// The chunks a scenario's tensors are cut into and the PBox core each goes to, as phubd's key
// table does it (phub/keys: each tensor cut into pieces of at most chunk_bytes, each piece to
// the least loaded core by bytes so far; with several PS hosts, the least loaded host first).
// Past Scenario::max_chunks a model is simulated in fewer, larger pieces (a tensor's pieces
// merged; a tensor is still one chunk at least, so a model of more tensors than max_chunks has
// as many chunks as tensors, at most kMostTensors): every chunk is a flow from every worker
// group, and the flows sharing a PBox's link
// cost SimGrid's solver about their number squared. Larger pieces fill and drain the pipeline
// more coarsely, and a core sums all N copies of a piece at once (phubd's one pass), so they
// make the PS look slower at large N: 2,048 keeps phubd's 1 MiB up to a 2 GiB gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "phub/sim/scenario.h"

namespace phub::sim {

struct SimChunk {
  std::uint32_t tensor = 0;
  std::uint64_t bytes = 0;
  std::uint32_t server = 0;  // the PS host (racks of racks: the chunk's home)
  std::uint32_t core = 0;    // of that host
  // Racks of racks: the core of every rack's PBox that sums the rack's copies (each PBox's key
  // table spreads every chunk over its cores; the home's spreads the chunks it is home to).
  std::uint32_t rack_core = 0;
};

std::vector<SimChunk> CutChunks(const Scenario& scenario);
// The chunks' indices by tensor.
std::vector<std::vector<std::size_t>> ChunksByTensor(const Scenario& scenario,
                                                     const std::vector<SimChunk>& chunks);

// The PBox core's seconds per gradient byte a worker pushes (its transport's on the bytes on
// the wire, Scenario::push_bytes_ratio of them; at least the sum's).
double CoreSecondsPerByteIn(const Scenario& scenario);

}  // namespace phub::sim
