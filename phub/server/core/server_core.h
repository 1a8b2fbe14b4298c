// One server core: a physical core, its NIC queue, and a lane (core_lane.h) for every job phubd
// runs — a thread of the job's own pinned to the core, with its own listener, transport and the
// job's shard. The core hands each job's lane a data port, and when phubd paces its sends
// (--nic-gbps) owns the queue its jobs' sends take turns in (shared_send_queue.h), by weight.
// Other threads (the control plane) reach a job's lane only through the calls below, which run
// on the lane's thread and wait; each names the job by its session. A job's shard memory is
// registered with its lane's transport (verbs: with the NIC) for the job's life.
//
// Threading: a job's InstallShard and RemoveShard from one thread at a time (its installer, then
// the control plane's); different jobs' and different cores' at once; every other call from
// any thread.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "phub/server/core/core_lane.h"
#include "phub/server/core/core_options.h"
#include "phub/server/shard/shard.h"
#include "phub/server/shard/shared_send_queue.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"

namespace phub::server {

// The data ports of a core's lanes: with CorePlace::port P (--data-port-base + i), a job's lane
// listens on the first of P, P + stride, ..., P + (slots - 1) * stride no other lane of this
// core holds; stride = --cores, so the cores' ranges interleave and never meet, and slots =
// --max-jobs, one per job phubd may run at once. P = 0: any free port.
struct CorePorts {
  std::uint32_t stride = 1;
  std::uint32_t slots = 1;
};

class ServerCore {
 public:
  // `device`: the data plane of the core's NIC; each lane binds it to its own loop on
  // `place.queue`. `limits`: max_connections bounds a lane's data connections not yet attached
  // (set-ups in progress included); attach_timeout_ms closes one that has not attached by
  // then (verbs: its whole set-up, which carries the ATTACH). `metrics`: the core's exported
  // series, shared by its lanes (all null: none). `pace_bytes_per_s`: this core's share of the
  // NIC, to which it paces the jobs' sends while they share it (0: not paced;
  // fair_send_queue.h). `top_weight`: the largest --job-weight; a job of less runs its lanes
  // that many nice levels lower (LaneNiceLevels). InvalidArgument if the ports run past 65535.
  static StatusOr<std::unique_ptr<ServerCore>> Create(
      keys::CoreIndex index, const CorePlace& place, std::shared_ptr<transport::Device> device,
      const CoreLimits& limits, const CorePorts& ports, const CoreMetrics& metrics = {},
      double pace_bytes_per_s = 0, double top_weight = 1);
  ~ServerCore();

  keys::CoreIndex index() const { return index_; }
  const std::string& address() const { return place_.address; }
  std::uint32_t nic() const { return place_.nic; }
  // The data port of the job's lane (0: no such job here).
  std::uint16_t port(std::uint64_t session) const;
  // "9100+2k, k < 16" or "any free port": for the start-up log.
  std::string DescribePorts() const;

  // Starts the job's lane: its thread, its shard (built there: its memory is first touched on
  // the core's CPU), registered (verbs: the error says how to raise the memlock limit), and
  // its data port. A failed allocation is ResourceExhausted: the job is refused, the core goes
  // on; no data port left (another program holds them) is Unavailable, naming the flag.
  // `weight`: the job's share of the core's sends.
  Status InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink, double weight = 1);
  // Closes the job's data port and connections, frees its shard and ends its lane; returns its
  // counters (zero if none).
  ShardStats RemoveShard(std::uint64_t session);
  // Recovery, on the lane's thread (shard.h): a worker gone, a worker coming back; the shard's
  // connections closed (phubd stops) and then a copy of every chunk. Without a lane: nothing,
  // or an empty copy.
  RejoinPoint ForgetWorker(std::uint64_t session, std::uint32_t rank);
  void ExpectRejoin(std::uint64_t session, std::uint32_t rank, std::uint64_t iteration);
  std::vector<ChunkSnapshot> StopAndSnapshot(std::uint64_t session);
  // Runs `fn` on the job's shard on its lane's thread, later (does not wait; nothing if the
  // shard is gone by then). For the racks-of-racks relay (uplink.h).
  void Post(std::uint64_t session, std::function<void(Shard&)> fn);
  // Runs `fn` on the job's shard on its lane's thread, now, and waits (nothing without a lane):
  // the optimizer's state read or restored (job_optimizer_state.cc).
  void RunOnShard(std::uint64_t session, const std::function<void(Shard&)>& fn);

 private:
  ServerCore(keys::CoreIndex index, const CorePlace& place,
             std::shared_ptr<transport::Device> device, const CoreLimits& limits,
             const CorePorts& ports, const CoreMetrics& metrics);
  // The job's lane, or null (REQUIRES: mu_ held).
  CoreLane* Find(std::uint64_t session) const;
  // Arms the pacing timer for `delay` (the queue's wake callback; posts to pacing_loop_).
  void ArmPacing(std::chrono::nanoseconds delay);

  keys::CoreIndex index_;
  CorePlace place_;
  std::shared_ptr<transport::Device> device_;
  CoreLimits limits_;
  CorePorts ports_;
  CoreMetrics metrics_;
  double top_weight_ = 1;
  // Paced sends only: the queue, and a thread of its own for the queue's wake-ups.
  std::unique_ptr<SharedSendQueue> sends_;
  std::unique_ptr<transport::EventLoop> pacing_loop_;
  std::unique_ptr<boost::asio::steady_timer> pace_timer_;  // on pacing_loop_'s thread only

  mutable std::mutex mu_;
  std::map<std::uint64_t, std::unique_ptr<CoreLane>> lanes_;  // by session; guarded by mu_
  std::vector<bool> slot_taken_;  // by CoreLane::slot(); guarded by mu_
};

}  // namespace phub::server
