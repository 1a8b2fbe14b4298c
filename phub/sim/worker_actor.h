// A worker group's iterations, the same under every PS scheme (ps_actors.h, rack_ps_actors.h):
// the forward pass, then backward tensor by tensor, each tensor's chunks handed to `push` the
// moment backward has produced it, then every chunk's weights received on `weights_box`; the
// iteration's end goes into the log, which must be sized first: the group runs as many
// iterations as the log has for it (its job's). Streaming (Scenario::streaming), an actor a
// tensor instead, each pushing its tensor again once its weights are in on a box of its own
// (WeightsBoxOf); the group's iteration i ends when every tensor's i-th exchange has.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/sim/chunks.h"
#include "phub/sim/iteration_log.h"
#include "phub/sim/scenario.h"

namespace simgrid::s4u {
class Host;
}

namespace phub::sim {

// The chunks of a scenario and their indices by tensor, shared by the actors that use them.
struct SharedChunks {
  std::shared_ptr<const std::vector<SimChunk>> chunks;
  std::shared_ptr<const std::vector<std::vector<std::size_t>>> by_tensor;
  static SharedChunks Of(const Scenario& scenario);
};

// Where the weights of `tensor`'s chunks go for the group whose box is `weights_box`.
std::string WeightsBoxOf(const Scenario& scenario, const std::string& weights_box,
                         std::size_t tensor);

void StartWorkerActor(const Scenario& scenario, IterationLog& log, std::size_t group,
                      simgrid::s4u::Host* host, const SharedChunks& chunks,
                      std::function<void(std::size_t chunk)> push, const std::string& weights_box);

}  // namespace phub::sim
