#include "phub/sim/ring_actors.h"

#include <simgrid/s4u.hpp>

#include <string>

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {
int kToken = 0;
}  // namespace

void StartRingActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  log.Resize(platform.groups.size(), s.iterations);
  std::uint64_t total = 0;
  for (const Tensor& t : s.tensors) total += t.bytes;
  const double segment = static_cast<double>(total) / s.workers;
  const std::uint64_t steps = 2ull * (s.workers - 1);
  const std::size_t hosts = platform.groups.size();
  for (std::size_t g = 0; g < hosts; ++g) {
    const WorkerGroup group = platform.groups[g];
    sg4::Actor::create("rank" + std::to_string(g), group.host, [&s, &log, g, hosts,
                                                                segment, steps] {
      sg4::Mailbox* in = sg4::Mailbox::by_name("ring" + std::to_string(g));
      in->set_receiver(sg4::Actor::self());
      sg4::Mailbox* next = sg4::Mailbox::by_name("ring" + std::to_string((g + 1) % hosts));
      for (std::uint32_t it = 0; it < s.iterations; ++it) {
        sg4::this_actor::sleep_for(s.forward_seconds);
        for (const Tensor& t : s.tensors) sg4::this_actor::sleep_for(t.backward_seconds);
        for (std::uint64_t step = 0; step < steps; ++step) {
          next->put_init(&kToken, static_cast<std::uint64_t>(segment))->detach();
          in->get<int>();
        }
        log.ends[g][it] = sg4::Engine::get_clock();
      }
    });
  }
}

}  // namespace phub::sim
