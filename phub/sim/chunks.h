// The chunks a scenario's tensors are cut into and the PBox core each goes to, as phubd's key
// table does it (phub/keys: each tensor cut into pieces of at most chunk_bytes, each piece to
// the least loaded core by bytes so far; with several PS hosts, the least loaded host first). A model of thousands of chunks is simulated with
// fewer, larger ones (at most Scenario::max_chunks, a tensor's pieces merged): every chunk is a
// flow from every worker group, and flows all sharing the PBox's link cost SimGrid's solver
// their number squared; the larger pieces pipeline a little more coarsely.
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
