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

std::string PushBox(std::size_t job, std::size_t chunk) {
  return "push" + std::to_string(job) + "_" + std::to_string(chunk);
}
std::string WeightsBox(std::size_t group) { return "weights" + std::to_string(group); }
std::string Name(const char* what, std::size_t a, std::size_t b, std::size_t c) {
  return std::string(what) + std::to_string(a) + "_" + std::to_string(b) + "_" + std::to_string(c);
}

}  // namespace

void StartPsActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  // Every job's chunks cut alike: each job has a key table of its own over the same cores.
  const SharedChunks shared = SharedChunks::Of(s);
  const auto& chunks = shared.chunks;
  const std::vector<Job> jobs = JobsOf(s);
  const std::size_t groups = platform.groups.size(), servers = platform.servers.size();
  std::vector<std::uint32_t> job_of_group, iterations;
  auto groups_of = std::make_shared<std::vector<std::vector<std::size_t>>>(jobs.size());
  for (std::size_t g = 0; g < groups; ++g) {
    job_of_group.push_back(platform.groups[g].job);
    (*groups_of)[platform.groups[g].job].push_back(g);
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) iterations.push_back(JobIterations(s, j));
  log.Resize(job_of_group, iterations);
  // One connection a (worker group, PS host, core), each way; a core's end on its NIC.
  auto pushes = std::make_shared<std::vector<Stream>>(), sends = std::make_shared<std::vector<Stream>>();
  const auto at = [&s, servers](std::size_t g, std::size_t h, std::size_t k) {
    return (g * servers + h) * s.ps_cores + k;
  };
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t h = 0; h < servers; ++h) {
      for (std::uint32_t k = 0; k < s.ps_cores; ++k) {
        pushes->push_back(Stream::Open(Name("push", g, h, k), platform.groups[g].host));
        sends->push_back(Stream::Open(Name("send", g, h, k), platform.CoreHost(h, k)));
      }
    }
  }

  for (std::size_t g = 0; g < groups; ++g) {
    const double pushed = platform.groups[g].members * s.push_bytes_ratio;
    const std::size_t job = platform.groups[g].job;
    StartWorkerActor(s, log, g, platform.groups[g].host, shared,
                     [g, job, pushed, chunks, pushes, at](std::size_t c) {
      const SimChunk& chunk = (*chunks)[c];
      (*pushes)[at(g, chunk.server, chunk.core)].Send(PushBox(job, c), chunk.bytes * pushed);
    }, WeightsBox(g));
  }

  // A core runs one chunk's work at a time, whichever job's, as phubd's pinned core does.
  auto cores = std::make_shared<std::vector<sg4::MutexPtr>>();  // [server * ps_cores + core]
  for (std::size_t k = 0; k < servers * s.ps_cores; ++k) cores->push_back(sg4::Mutex::create());
  const double per_byte = CoreSecondsPerByteIn(s);
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const double work_per_byte = per_byte * jobs[j].workers;
    const std::uint32_t its = iterations[j];
    for (std::size_t c = 0; c < chunks->size(); ++c) {
      const SimChunk chunk = (*chunks)[c];
      sg4::Actor::create(Name("chunk", j, c, 0), platform.CoreHost(chunk.server, chunk.core),
                         [&s, &platform, j, c, chunk, its, cores, work_per_byte, sends, at,
                          groups_of] {
        Own(PushBox(j, c));  // every group's copy flows as it is sent
        const std::vector<std::size_t>& mine = (*groups_of)[j];
        for (std::uint32_t it = 0; it < its; ++it) {
          for (std::size_t n = 0; n < mine.size(); ++n) Receive(PushBox(j, c));
          sg4::MutexPtr core = (*cores)[chunk.server * s.ps_cores + chunk.core];
          core->lock();
          sg4::this_actor::execute(work_per_byte * static_cast<double>(chunk.bytes) * kFlopsPerSecond);
          core->unlock();
          for (std::size_t g : mine) {
            (*sends)[at(g, chunk.server, chunk.core)].Send(
                WeightsBoxOf(s, WeightsBox(g), chunk.tensor),
                static_cast<double>(chunk.bytes) * platform.groups[g].members);
          }
        }
      });
    }
  }
}

}  // namespace phub::sim
