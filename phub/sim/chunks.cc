#include "phub/sim/chunks.h"

#include <algorithm>

namespace phub::sim {

std::vector<SimChunk> CutChunks(const Scenario& s) {
  std::uint64_t total = 0;
  for (const Tensor& t : s.tensors) total += t.bytes;
  const std::uint32_t most = s.max_chunks;
  // Pieces of chunk_bytes, or larger where there would be more than max_chunks of them.
  const std::uint64_t piece =
      std::max<std::uint64_t>(s.chunk_bytes, (total + most - 1) / std::max<std::uint32_t>(1, most));
  // Racks of racks: each chunk's home is a rack's PBox.
  const std::uint32_t hosts =
      std::max<std::uint32_t>(1, s.scheme == Scheme::kPsRacks ? s.racks : s.ps_hosts);
  std::vector<std::uint64_t> host_load(hosts, 0);
  std::vector<std::vector<std::uint64_t>> load(
      hosts, std::vector<std::uint64_t>(std::max<std::uint32_t>(1, s.ps_cores), 0));
  std::vector<std::uint64_t> rack_load(std::max<std::uint32_t>(1, s.ps_cores), 0);
  std::vector<SimChunk> chunks;
  const auto least = [](const std::vector<std::uint64_t>& v) {
    return static_cast<std::uint32_t>(std::min_element(v.begin(), v.end()) - v.begin());
  };
  for (std::uint32_t t = 0; t < s.tensors.size(); ++t) {
    for (std::uint64_t at = 0; at < s.tensors[t].bytes; at += piece) {
      const std::uint64_t bytes = std::min(piece, s.tensors[t].bytes - at);
      const std::uint32_t server = least(host_load);
      const std::uint32_t core = least(load[server]);
      const std::uint32_t rack_core = least(rack_load);
      host_load[server] += bytes;
      load[server][core] += bytes;
      rack_load[rack_core] += bytes;
      chunks.push_back({t, bytes, server, core, rack_core});
    }
  }
  return chunks;
}

std::vector<std::vector<std::size_t>> ChunksByTensor(const Scenario& s,
                                                     const std::vector<SimChunk>& chunks) {
  std::vector<std::vector<std::size_t>> of(s.tensors.size());
  for (std::size_t c = 0; c < chunks.size(); ++c) of[chunks[c].tensor].push_back(c);
  return of;
}

double CoreSecondsPerByteIn(const Scenario& s) {
  const Calibration& c = s.calibration;
  const double transport = s.verbs ? c.verbs_core_seconds_per_byte : c.tcp_core_seconds_per_byte;
  // The transport's per byte received covers the weights sent back too (calibration.h), and
  // bf16 pushes shrink only the way in: taken as half of it each way. The sum's on every
  // element.
  return std::max(transport * (1 + s.push_bytes_ratio) / 2,
                  1.0 / c.aggregate_bytes_per_core_second);
}

}  // namespace phub::sim
