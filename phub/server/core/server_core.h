// One server core: a pinned event loop, the transport bound to it (transport.h; on verbs its
// own completion queue), the acceptor for its data connections, and a Shard of every job phubd
// runs (shard_router.h routes each connection to its job's; fair_send_queue.h shares the core's
// sends among them by weight). Other threads (the control plane) reach it only through the
// calls below, which run on the core's thread and wait; each names the job by its session. A
// job's shard memory is registered with the transport when its shard is installed (verbs: with
// the NIC) and unregistered when it is removed.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cassert>
#include <map>
#include <memory>
#include <optional>

#include "phub/common/log_limiter.h"
#include "phub/server/core/core_options.h"
#include "phub/server/shard/fair_send_queue.h"
#include "phub/server/shard/shard.h"
#include "phub/server/core/shard_router.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"

namespace phub::server {

// Where a core runs and whom it listens for (nic_plan.h).
struct CorePlace {
  std::string address;      // its NIC's address (a wildcard: every NIC's)
  std::uint16_t port = 0;   // 0: any free port
  int pin_core = -1;        // physical core; < 0: not pinned
  std::uint32_t nic = 0;    // its NIC, in --nics order (told to workers in the Welcome)
  int queue = 0;            // its rank among its NIC's cores: the NIC queue it polls
};

class ServerCore {
 public:
  // `device`: the data plane of the core's NIC, bound here to the core's loop on `place.queue`. `limits`: max_connections bounds the data connections not yet attached
  // (set-ups in progress included); attach_timeout_ms closes one that has not attached by
  // then (verbs: its whole set-up, which carries the ATTACH). `metrics`: the core's exported
  // series, handed to each shard (all null: none). `pace_bytes_per_s`: this core's share of the NIC,
  // to which it paces the jobs' sends while they share it (0: not paced; fair_send_queue.h).
  static StatusOr<std::unique_ptr<ServerCore>> Create(keys::CoreIndex index,
                                                      const CorePlace& place,
                                                      transport::Device& device,
                                                      const CoreLimits& limits,
                                                      const CoreMetrics& metrics = {},
                                                      double pace_bytes_per_s = 0);
  ~ServerCore();

  keys::CoreIndex index() const { return index_; }
  std::uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  std::uint32_t nic() const { return nic_; }

  // Builds the job's shard on this core's thread (its memory is first touched there); on verbs
  // registers its slots and weights (the error says how to raise the memlock limit). A failed
  // allocation is ResourceExhausted: the job is refused, the core goes on.
  // `weight`: the job's share of the core's sends.
  Status InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink,
                      double weight = 1);
  // Closes the shard's connections and frees it; returns its counters (zero if none).
  ShardStats RemoveShard(std::uint64_t session);
  // Recovery, on the core's thread (shard.h): a worker gone, a worker coming back; the shard's
  // connections closed (phubd stops) and then a copy of every chunk. Without a shard: nothing,
  // or an empty copy.
  RejoinPoint ForgetWorker(std::uint64_t session, std::uint32_t rank);
  void ExpectRejoin(std::uint64_t session, std::uint32_t rank, std::uint64_t iteration);
  std::vector<ChunkSnapshot> StopAndSnapshot(std::uint64_t session);
  // Runs `fn` on the job's shard on the core's thread, later (does not wait; nothing if the
  // shard is gone by then). For the racks-of-racks relay (uplink.h).
  void Post(std::uint64_t session, std::function<void(Shard&)> fn);

 private:
  ServerCore(keys::CoreIndex index, int pin_core, double pace_bytes_per_s);
  // REQUIRES where the members "used on loop_'s thread only" are touched (STYLE.md "One owner
  // per piece of state"): the caller is on the core's loop thread. Off with NDEBUG.
  void AssertOnLoop() const {
    assert(loop_.on_loop_thread() && "ServerCore's state touched off its core's thread");
  }
  transport::AcceptHooks Hooks();
  // Closes `connection` if it has not attached within limits_.attach_timeout_ms.
  void WatchAttach(const std::shared_ptr<transport::Connection>& connection);
  // Counts, once, whether the kernel handles `connection`'s packets on this core's CPU.
  void SampleSteering(const std::shared_ptr<transport::Connection>& connection);

  keys::CoreIndex index_;
  CoreLimits limits_;
  CoreMetrics metrics_;
  std::uint64_t job_chunk_bytes_ = 0;  // the largest payload a shard sends (one chunk)
  // Used on loop_'s thread only:
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Acceptor> acceptor_;
  FairSendQueue fair_;  // before router_: its shards' sends complete into it as they close
  std::unique_ptr<boost::asio::steady_timer> pace_timer_;  // fair_'s wake-ups
  ShardRouter router_{index_};
  std::map<std::uint64_t, double> shard_cpu_start_;  // by session: CPU seconds at install
  std::uint16_t port_ = 0;
  std::string address_;
  std::uint32_t nic_ = 0;
  std::uint64_t refused_ = 0;  // data connections refused for --max-connections
  // Data connections refused between jobs: a flood of them must not flood the log.
  LogLimiter no_job_log_;
  // Last, so it is destroyed (its thread joined) first: handlers still queued on it may touch
  // the members above.
  transport::EventLoop loop_;
};

}  // namespace phub::server
