#include "phub/sim/ps_actors.h"

#include <simgrid/s4u.hpp>

#include <memory>
#include <string>
#include <vector>

#include "phub/sim/chunks.h"
#include "phub/sim/streams.h"
#include "phub/sim/worker_actor.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

std::string PushBox(std::size_t chunk) { return "push" + std::to_string(chunk); }
std::string WeightsBox(std::size_t group) { return "weights" + std::to_string(group); }
std::string Name(const char* what, std::size_t a, std::size_t b, std::size_t c) {
  return std::string(what) + std::to_string(a) + "_" + std::to_string(b) + "_" + std::to_string(c);
}

}  // namespace

void StartPsActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  const SharedChunks shared = SharedChunks::Of(s);
  const auto& chunks = shared.chunks;
  const std::size_t groups = platform.groups.size(), servers = platform.servers.size();
  log.Resize(groups, s.iterations);
  // One connection a (worker group, PS host, core), each way.
  auto pushes = std::make_shared<std::vector<Stream>>(), sends = std::make_shared<std::vector<Stream>>();
  const auto at = [&s, servers](std::size_t g, std::size_t h, std::size_t k) {
    return (g * servers + h) * s.ps_cores + k;
  };
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t h = 0; h < servers; ++h) {
      for (std::uint32_t k = 0; k < s.ps_cores; ++k) {
        pushes->push_back(Stream::Open(Name("push", g, h, k), platform.groups[g].host));
        sends->push_back(Stream::Open(Name("send", g, h, k), platform.servers[h]));
      }
    }
  }

  for (std::size_t g = 0; g < groups; ++g) {
    const double members = platform.groups[g].members;
    StartWorkerActor(s, log, g, platform.groups[g].host, shared,
                     [g, members, chunks, pushes, at](std::size_t c) {
      const SimChunk& chunk = (*chunks)[c];
      (*pushes)[at(g, chunk.server, chunk.core)].Send(PushBox(c), chunk.bytes * members);
    }, WeightsBox(g));
  }

  // A core runs one chunk's work at a time, as phubd's pinned core does.
  auto cores = std::make_shared<std::vector<sg4::MutexPtr>>();  // [server * ps_cores + core]
  for (std::size_t k = 0; k < servers * s.ps_cores; ++k) cores->push_back(sg4::Mutex::create());
  const double per_byte = CoreSecondsPerByteIn(s);
  for (std::size_t c = 0; c < chunks->size(); ++c) {
    const SimChunk chunk = (*chunks)[c];
    sg4::Actor::create("chunk" + std::to_string(c), platform.servers[chunk.server],
                       [&s, &platform, c, chunk, cores, per_byte, sends, at] {
      Own(PushBox(c));  // every group's copy flows as it is sent
      const double work = per_byte * static_cast<double>(chunk.bytes) * s.workers;
      for (std::uint32_t it = 0; it < s.iterations; ++it) {
        for (std::size_t g = 0; g < platform.groups.size(); ++g) Receive(PushBox(c));
        sg4::MutexPtr core = (*cores)[chunk.server * s.ps_cores + chunk.core];
        core->lock();
        sg4::this_actor::execute(work * kFlopsPerSecond);
        core->unlock();
        for (std::size_t g = 0; g < platform.groups.size(); ++g) {
          (*sends)[at(g, chunk.server, chunk.core)].Send(
              WeightsBox(g), static_cast<double>(chunk.bytes) * platform.groups[g].members);
        }
      }
    });
  }
}

}  // namespace phub::sim
