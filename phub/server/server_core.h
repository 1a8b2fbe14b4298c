// One server core: a pinned event loop, the transport bound to it (transport.h; on verbs its
// own completion queue), the acceptor for its data connections, and the Shard of the running
// job (none between jobs). Other threads (the control plane) reach it only through
// InstallShard/RemoveShard, which run on the core's thread and wait. The job's shard memory is
// registered with the transport once, when the shard is installed (verbs: with the NIC).
#pragma once

#include <memory>
#include <optional>

#include "phub/server/server_options.h"
#include "phub/server/shard.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"

namespace phub::server {

class ServerCore {
 public:
  // pin_core < 0: not pinned. port 0: any free port. `device`: the data plane, bound here to
  // the core's loop. `limits`: max_connections bounds the data connections not yet attached
  // (set-ups in progress included); attach_timeout_ms closes one that has not attached by
  // then (verbs: its whole set-up, which carries the ATTACH). `metrics`: the core's exported
  // series, handed to each shard (all null: none).
  static StatusOr<std::unique_ptr<ServerCore>> Create(keys::CoreIndex index,
                                                      const std::string& address,
                                                      std::uint16_t port, int pin_core,
                                                      transport::Device& device,
                                                      const ServerLimits& limits,
                                                      const CoreMetrics& metrics = {});
  ~ServerCore();

  keys::CoreIndex index() const { return index_; }
  std::uint16_t port() const { return port_; }

  // Builds the job's shard on this core's thread (its memory is first touched there); on verbs
  // registers its slots and weights (the error says how to raise the memlock limit). A failed
  // allocation is ResourceExhausted: the job is refused, the core goes on.
  Status InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink);
  // Closes the shard's connections and frees it; returns its counters.
  ShardStats RemoveShard();
  // Recovery, on the core's thread (shard.h): a worker gone, a worker coming back; the shard's
  // connections closed (phubd stops) and then a copy of every chunk. Without a shard: nothing,
  // or an empty copy.
  RejoinPoint ForgetWorker(std::uint32_t rank);
  void ExpectRejoin(std::uint32_t rank, std::uint64_t iteration);
  std::vector<ChunkSnapshot> StopAndSnapshot();

 private:
  ServerCore(keys::CoreIndex index, int pin_core);
  transport::AcceptHooks Hooks();
  // Closes `connection` if it has not attached within limits_.attach_timeout_ms.
  void WatchAttach(const std::shared_ptr<transport::Connection>& connection);
  void EndSetUps();  // connections still in set-up were meant for the shard that goes

  keys::CoreIndex index_;
  ServerLimits limits_;
  CoreMetrics metrics_;
  std::uint64_t job_chunk_bytes_ = 0;  // the installed job's: the largest payload a shard sends
  // Used on loop_'s thread only:
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Acceptor> acceptor_;
  std::unique_ptr<Shard> shard_;
  double shard_cpu_start_ = 0;  // this thread's CPU seconds when shard_ was installed
  std::uint16_t port_ = 0;
  std::uint64_t refused_ = 0;  // data connections refused for --max-connections
  // Last, so it is destroyed (its thread joined) first: handlers still queued on it may touch
  // the members above.
  transport::EventLoop loop_;
};

}  // namespace phub::server
