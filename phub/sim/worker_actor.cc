#include "phub/sim/worker_actor.h"

#include <simgrid/s4u.hpp>

#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

SharedChunks SharedChunks::Of(const Scenario& s) {
  auto chunks = std::make_shared<const std::vector<SimChunk>>(CutChunks(s));
  auto by_tensor = std::make_shared<const std::vector<std::vector<std::size_t>>>(
      ChunksByTensor(s, *chunks));
  return {std::move(chunks), std::move(by_tensor)};
}

void StartWorkerActor(const Scenario& s, IterationLog& log, std::size_t g, sg4::Host* host,
                      const SharedChunks& shared, std::function<void(std::size_t)> push,
                      const std::string& weights_box) {
  sg4::Actor::create("worker" + std::to_string(g), host,
                     [&s, &log, g, shared, push = std::move(push), weights_box] {
    Own(weights_box);  // weights land as they come
    for (std::uint32_t it = 0; it < s.iterations; ++it) {
      sg4::this_actor::sleep_for(s.forward_seconds);
      for (std::size_t t = 0; t < s.tensors.size(); ++t) {
        sg4::this_actor::sleep_for(s.tensors[t].backward_seconds);
        for (std::size_t c : (*shared.by_tensor)[t]) push(c);
      }
      for (std::size_t c = 0; c < shared.chunks->size(); ++c) Receive(weights_box);
      log.ends[g][it] = sg4::Engine::get_clock();
    }
  });
}

}  // namespace phub::sim
