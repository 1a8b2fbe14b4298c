#include "phub/sim/collective_rank.h"

#include <simgrid/s4u.hpp>

#include <memory>
#include <string>

#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

std::vector<Bucket> CutBuckets(const Scenario& s) {
  std::vector<Bucket> buckets;
  std::uint64_t filling = 0;
  for (std::size_t t = 0; t < s.tensors.size(); ++t) {
    filling += s.tensors[t].bytes;
    if ((s.bucket_bytes > 0 && filling >= s.bucket_bytes) || t + 1 == s.tensors.size()) {
      buckets.push_back({filling, t});
      filling = 0;
    }
  }
  return buckets;
}

void StartCollectiveRank(const Scenario& s, IterationLog& log, std::size_t g, sg4::Host* host,
                         std::function<void(std::uint64_t)> allreduce) {
  auto buckets = std::make_shared<const std::vector<Bucket>>(CutBuckets(s));
  const std::string filled = "filled" + std::to_string(g), done = "reduced" + std::to_string(g);
  // Both sides own their box, so that a detached 0-byte hand-over (same host: no link, no
  // time) completes at once and neither waits for the other to ask.
  sg4::Actor::create("compute" + std::to_string(g), host, [&s, buckets, filled, done] {
    Own(done);
    for (std::uint32_t it = 0; it < s.iterations; ++it) {
      sg4::this_actor::sleep_for(s.forward_seconds);
      std::size_t next = 0;
      for (std::size_t t = 0; t < s.tensors.size(); ++t) {
        sg4::this_actor::sleep_for(s.tensors[t].backward_seconds);
        if (next < buckets->size() && (*buckets)[next].last_tensor == t) {
          sg4::Mailbox::by_name(filled)->put_init(Token(), 0)->detach();
          ++next;
        }
      }
      Receive(done);
    }
  });
  sg4::Actor::create("collective" + std::to_string(g), host,
                     [&s, &log, g, buckets, filled, done, allreduce = std::move(allreduce)] {
    Own(filled);
    for (std::uint32_t it = 0; it < s.iterations; ++it) {
      for (const Bucket& b : *buckets) {
        Receive(filled);
        allreduce(b.bytes);
      }
      log.ends[g][it] = sg4::Engine::get_clock();
      sg4::Mailbox::by_name(done)->put_init(Token(), 0)->detach();
    }
  });
}

}  // namespace phub::sim
