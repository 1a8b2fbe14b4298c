// CoreLane: one job's shard on one server core, on a thread of its own. The lane has its own
// event loop (pinned to the core's CPU, beside the other jobs' lanes on that core), its own
// transport bound to that loop (verbs: its own completion queue), its own data listener and the
// shard_router.h in front of its shard. Everything a job's data costs the core — receiving its
// pushes, summing them, the optimizer, sending its weights — runs on its lane's thread, so the
// kernel's scheduler shares the core among jobs, thread by thread: a job that floods phubd
// uses its own thread's share and no other's (docs/design.md "Fair service: a thread per job
// on each core"). Only the jobs' sends share state: the core's SharedSendQueue, when paced.
//
// Other threads (the control plane, through ServerCore) reach a lane only through the calls
// below, which run on the lane's thread and wait, or are posted there.
#pragma once

#include <cassert>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/common/log_limiter.h"
#include "phub/common/status.h"
#include "phub/server/core/core_options.h"
#include "phub/server/core/shard_router.h"
#include "phub/server/shard/shard.h"
#include "phub/server/shard/shared_send_queue.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"

namespace phub::server {

// Where a core runs and whom it listens for (nic_plan.h).
struct CorePlace {
  std::string address;     // its NIC's address (a wildcard: every NIC's)
  std::uint16_t port = 0;  // the first data port of the core (0: any free port; core_ports)
  int pin_core = -1;       // physical core; < 0: not pinned
  std::uint32_t nic = 0;   // its NIC, in --nics order (told to workers in the Welcome)
  int queue = 0;           // its rank among its NIC's cores: the NIC queue it polls
};

// How much lower than its core's other lanes a job's lane runs, in nice levels, so that the
// kernel shares the CPU between lanes by the jobs' weights (--job-weight): CFS gives a thread
// 1.25x the CPU of one a nice level lower, so a job of weight w beside one of the largest
// weight `top` runs log(top / w) / log(1.25) levels lower (weight 2 against 1: 3 levels,
// 1.95:1). 0 for a job of the largest weight; at most 19.
int LaneNiceLevels(double weight, double top_weight);

// What every lane of one core shares: owned by the ServerCore, which outlives its lanes.
struct LaneSite {
  keys::CoreIndex index = 0;
  const CorePlace* place = nullptr;
  transport::Device* device = nullptr;  // the data plane of the core's NIC
  CoreLimits limits;
  const CoreMetrics* metrics = nullptr;  // the core's series; null: none (all null inside)
  SharedSendQueue* sends = nullptr;      // the core's paced sends; null: sent at once
  double top_weight = 1;                 // the largest --job-weight (LaneNiceLevels)
};

class CoreLane {
 public:
  // Starts the lane's thread, builds the job's shard there (its memory is first touched on the
  // core's CPU), registers the shard's memory with the lane's transport (verbs: the error says
  // how to raise the memlock limit), then listens on `port` (0: any free port) for the job's
  // data connections. A failed allocation is ResourceExhausted.
  // `slot`: the lane's place among the core's (its thread is named "core i lane slot").
  // `weight`: the job's share of the core's sends.
  static StatusOr<std::unique_ptr<CoreLane>> Create(const LaneSite& site, std::uint32_t slot,
                                                    std::uint16_t port,
                                                    std::shared_ptr<const JobSpec> job,
                                                    Shard::EventSink sink, double weight);
  // Frees the shard (if Remove has not) and joins the thread.
  ~CoreLane();

  std::uint16_t port() const { return port_; }
  std::uint64_t session() const { return session_; }
  std::uint32_t slot() const { return slot_; }

  // Closes the listener and the shard's connections, frees the shard; returns its counters, the
  // CPU its thread used included.
  ShardStats Remove();
  // Recovery (shard.h): a worker gone, a worker coming back; the shard's connections closed
  // (phubd stops) and then a copy of every chunk.
  RejoinPoint ForgetWorker(std::uint32_t rank);
  void ExpectRejoin(std::uint32_t rank, std::uint64_t iteration);
  std::vector<ChunkSnapshot> StopAndSnapshot();
  // Runs `fn` on the shard on the lane's thread, later (nothing if it is gone by then).
  void Post(std::function<void(Shard&)> fn);
  // Runs `fn` on the job's shard on the lane's thread and waits for it (nothing if the shard is
  // gone).
  void RunOnShard(const std::function<void(Shard&)>& fn);

 private:
  CoreLane(const LaneSite& site, std::uint32_t slot, std::uint64_t session);
  // REQUIRES where the members "used on loop_'s thread only" are touched (STYLE.md "One owner
  // per piece of state"). Off with NDEBUG.
  void AssertOnLoop() const {
    assert(loop_.on_loop_thread() && "CoreLane's state touched off its thread");
  }
  Status Build(std::uint16_t port, std::shared_ptr<const JobSpec> job, Shard::EventSink sink,
               double weight);
  void Teardown(const Status& why);
  transport::AcceptHooks Hooks();
  // Closes `connection` if it has not attached within limits.attach_timeout_ms.
  void WatchAttach(const std::shared_ptr<transport::Connection>& connection);
  // Counts, once, whether the kernel handles `connection`'s packets on this lane's CPU.
  void SampleSteering(const std::shared_ptr<transport::Connection>& connection);

  LaneSite site_;
  std::uint32_t slot_;
  std::uint64_t session_;
  std::uint16_t port_ = 0;
  std::uint64_t chunk_bytes_ = 0;  // the largest payload the shard sends (one chunk)
  // Used on loop_'s thread only:
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Acceptor> acceptor_;
  ShardRouter router_;
  bool flow_added_ = false;    // in site_.sends
  std::uint64_t refused_ = 0;  // data connections refused for --max-connections
  LogLimiter pending_log_;     // data connections closed for the quotas before their ATTACH
  // Last, so it is destroyed (its thread joined) first: handlers still queued on it may touch
  // the members above.
  transport::EventLoop loop_;
};

}  // namespace phub::server
