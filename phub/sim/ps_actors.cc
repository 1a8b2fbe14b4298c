#include "phub/sim/ps_actors.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "phub/sim/chunks.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

int kToken = 0;  // what every simulated message carries: SimGrid moves sizes, not bytes

std::string PushBox(std::size_t chunk) { return "push" + std::to_string(chunk); }
std::string WeightsBox(std::size_t group) { return "weights" + std::to_string(group); }
// The queue of one connection's sends: a worker group's to a core ("w"), a core's to a group.
std::string StreamBox(const char* side, std::size_t group, std::uint32_t server,
                      std::uint32_t core) {
  return std::string(side) + std::to_string(group) + "_" + std::to_string(server) + "_" +
         std::to_string(core);
}

// One TCP connection's sender: the chunks queued on `queue`, one after another, each `bytes_of`
// it to `to_box(chunk)` (a connection streams its messages in order; the connections of one
// host share its link). Runs until the simulation ends.
void StartStream(const std::string& name, sg4::Host* host, const std::string& queue,
                 std::function<std::string(std::size_t)> to_box,
                 std::function<double(std::size_t)> bytes_of) {
  sg4::Actor::create(name, host, [queue, to_box, bytes_of] {
    sg4::Mailbox* in = sg4::Mailbox::by_name(queue);
    for (;;) {
      std::unique_ptr<std::size_t> c(in->get<std::size_t>());
      sg4::Mailbox::by_name(to_box(*c))->put(&kToken, static_cast<std::uint64_t>(bytes_of(*c)));
    }
  })->daemonize();
}

}  // namespace

void StartPsActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  auto chunks = std::make_shared<const std::vector<SimChunk>>(CutChunks(s));
  std::vector<std::vector<std::size_t>> of_tensor(s.tensors.size());
  for (std::size_t c = 0; c < chunks->size(); ++c) of_tensor[(*chunks)[c].tensor].push_back(c);
  auto by_tensor = std::make_shared<const std::vector<std::vector<std::size_t>>>(std::move(of_tensor));
  log.Resize(platform.groups.size(), s.iterations);

  for (std::size_t g = 0; g < platform.groups.size(); ++g) {
    const WorkerGroup group = platform.groups[g];
    sg4::Actor::create("worker" + std::to_string(g), group.host, [&s, &log, g, group, chunks,
                                                                   by_tensor] {
      sg4::Mailbox* weights = sg4::Mailbox::by_name(WeightsBox(g));
      weights->set_receiver(sg4::Actor::self());  // weights land as they come
      for (std::uint32_t it = 0; it < s.iterations; ++it) {
        sg4::this_actor::sleep_for(s.forward_seconds);
        for (std::size_t t = 0; t < s.tensors.size(); ++t) {
          sg4::this_actor::sleep_for(s.tensors[t].backward_seconds);
          for (std::size_t c : (*by_tensor)[t]) {
            // To the stream of the chunk's core: its connection sends in order.
            const SimChunk& chunk = (*chunks)[c];
            sg4::Mailbox::by_name(StreamBox("w", g, chunk.server, chunk.core))
                ->put(new std::size_t(c), 0);
          }
        }
        for (std::size_t c = 0; c < chunks->size(); ++c) weights->get<int>();
        log.ends[g][it] = sg4::Engine::get_clock();
      }
    });
  }

  for (std::size_t g = 0; g < platform.groups.size(); ++g) {
    const double members = platform.groups[g].members;
    const auto bytes_of = [chunks, members](std::size_t c) {
      return static_cast<double>((*chunks)[c].bytes) * members;
    };
    for (std::uint32_t h = 0; h < platform.servers.size(); ++h) {
      for (std::uint32_t k = 0; k < s.ps_cores; ++k) {
        const std::string name = std::to_string(g) + "_" + std::to_string(h) + "_" + std::to_string(k);
        StartStream("push" + name, platform.groups[g].host, StreamBox("w", g, h, k),
                    [](std::size_t c) { return PushBox(c); }, bytes_of);
        StartStream("send" + name, platform.servers[h], StreamBox("ps", g, h, k),
                    [g](std::size_t) { return WeightsBox(g); }, bytes_of);
      }
    }
  }

  // A core runs one chunk's work at a time, as phubd's pinned core does.
  auto cores = std::make_shared<std::vector<sg4::MutexPtr>>();  // [server * ps_cores + core]
  for (std::uint32_t k = 0; k < s.ps_hosts * s.ps_cores; ++k) cores->push_back(sg4::Mutex::create());
  const double per_byte = CoreSecondsPerByteIn(s);
  for (std::size_t c = 0; c < chunks->size(); ++c) {
    sg4::Actor::create("chunk" + std::to_string(c), platform.servers[(*chunks)[c].server],
                       [&s, &platform, c, chunks,
                                                                     cores, per_byte] {
      sg4::Mailbox* pushes = sg4::Mailbox::by_name(PushBox(c));
      pushes->set_receiver(sg4::Actor::self());  // every group's copy flows as it is sent
      const SimChunk& chunk = (*chunks)[c];
      const double work = per_byte * static_cast<double>(chunk.bytes) * s.workers;
      for (std::uint32_t it = 0; it < s.iterations; ++it) {
        for (std::size_t g = 0; g < platform.groups.size(); ++g) pushes->get<int>();
        sg4::MutexPtr core = (*cores)[chunk.server * s.ps_cores + chunk.core];
        core->lock();
        sg4::this_actor::execute(work * kFlopsPerSecond);
        core->unlock();
        for (std::size_t g = 0; g < platform.groups.size(); ++g) {
          sg4::Mailbox::by_name(StreamBox("ps", g, chunk.server, chunk.core))
              ->put(new std::size_t(c), 0);
        }
      }
    });
  }
}

}  // namespace phub::sim
