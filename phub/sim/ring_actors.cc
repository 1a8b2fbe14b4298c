#include "phub/sim/ring_actors.h"

#include <simgrid/s4u.hpp>

#include <string>

#include "phub/sim/collective_rank.h"
#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

void StartRingActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  log.Resize(platform.groups.size(), s.iterations);
  const std::size_t hosts = platform.groups.size();
  // The N-rank ring on H <= N hosts: 2 (H - 1) steps, each of the N-ring's (N - 1) / (H - 1)
  // steps together — their bytes in one segment, their hops' latency waited after it — so each
  // link carries 2 (N - 1) / N x S and each bucket waits 2 (N - 1) hops, as in the N-ring,
  // with 2 (H - 1) messages a host, not 2 (N - 1): a 25 MiB bucket of N = 4,096 is 126
  // messages a host, not 8,190 (BERT-large's 52 buckets took minutes a point).
  const std::uint64_t steps = 2ull * (hosts - 1);
  const double merged = static_cast<double>(s.workers - 1) / static_cast<double>(hosts - 1);
  const double hop = 2 * s.latency_us * 1e-6;  // a host's link up, the next one's down
  const double wait = hop * (merged - 1);
  for (std::size_t g = 0; g < hosts; ++g) {
    const std::string in = "ring" + std::to_string(g);
    const std::string next = "ring" + std::to_string((g + 1) % hosts);
    StartCollectiveRank(s, log, g, platform.groups[g].host,
                        [&s, in, next, steps, merged, wait](std::uint64_t bytes) {
      // A rank's previous bucket may still be arriving when the next starts: its own box,
      // owned by the actor that runs every bucket, keeps them in order.
      Own(in);
      const double segment = static_cast<double>(bytes) / s.workers * merged;
      for (std::uint64_t step = 0; step < steps; ++step) {
        sg4::Mailbox::by_name(next)->put_init(Token(), static_cast<std::uint64_t>(segment))
            ->detach();
        Receive(in);
        if (wait > 0) sg4::this_actor::sleep_for(wait);
      }
    });
  }
}

}  // namespace phub::sim
