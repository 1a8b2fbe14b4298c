#include "phub/sim/worker_actor.h"

#include <simgrid/s4u.hpp>

#include <algorithm>

#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

SharedChunks SharedChunks::Of(const Scenario& s) {
  auto chunks = std::make_shared<const std::vector<SimChunk>>(CutChunks(s));
  auto by_tensor = std::make_shared<const std::vector<std::vector<std::size_t>>>(
      ChunksByTensor(s, *chunks));
  return {std::move(chunks), std::move(by_tensor)};
}

std::string WeightsBoxOf(const Scenario& s, const std::string& weights_box, std::size_t tensor) {
  return s.streaming ? weights_box + "_" + std::to_string(tensor) : weights_box;
}

void StartWorkerActor(const Scenario& s, IterationLog& log, std::size_t g, sg4::Host* host,
                      const SharedChunks& shared, std::function<void(std::size_t)> push,
                      const std::string& weights_box) {
  if (s.streaming) {
    for (std::size_t t = 0; t < s.tensors.size(); ++t) {
      sg4::Actor::create("worker" + std::to_string(g) + "_" + std::to_string(t), host,
                         [&log, g, t, shared, push, box = WeightsBoxOf(s, weights_box, t)] {
        Own(box);
        const std::vector<std::size_t>& mine = (*shared.by_tensor)[t];
        for (std::size_t it = 0; it < log.ends[g].size(); ++it) {
          for (std::size_t c : mine) push(c);
          for (std::size_t n = 0; n < mine.size(); ++n) Receive(box);
          log.ends[g][it] = std::max(log.ends[g][it], sg4::Engine::get_clock());
        }
      });
    }
    return;
  }
  sg4::Actor::create("worker" + std::to_string(g), host,
                     [&s, &log, g, shared, push = std::move(push), weights_box] {
    Own(weights_box);  // weights land as they come
    for (std::size_t it = 0; it < log.ends[g].size(); ++it) {  // its job's (iteration_log.h)
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
