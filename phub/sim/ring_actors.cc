#include "phub/sim/ring_actors.h"

#include <simgrid/s4u.hpp>

#include <string>

#include "phub/sim/collective_rank.h"
#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

void StartRingActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  log.Resize(platform.groups.size(), s.iterations);
  const std::uint64_t steps = 2ull * (s.workers - 1);
  const std::size_t hosts = platform.groups.size();
  for (std::size_t g = 0; g < hosts; ++g) {
    const std::string in = "ring" + std::to_string(g);
    const std::string next = "ring" + std::to_string((g + 1) % hosts);
    StartCollectiveRank(s, log, g, platform.groups[g].host,
                        [&s, in, next, steps](std::uint64_t bytes) {
      // A rank's previous bucket may still be arriving when the next starts: its own box,
      // owned by the actor that runs every bucket, keeps them in order.
      Own(in);
      const double segment = static_cast<double>(bytes) / s.workers;
      for (std::uint64_t step = 0; step < steps; ++step) {
        sg4::Mailbox::by_name(next)->put_init(Token(), static_cast<std::uint64_t>(segment))
            ->detach();
        Receive(in);
      }
    });
  }
}

}  // namespace phub::sim
