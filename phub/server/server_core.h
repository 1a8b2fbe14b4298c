// One server core: a pinned event loop, the TCP listener for its data connections, and the
// Shard of the running job (none between jobs). Other threads (the control plane) reach it
// only through InstallShard/RemoveShard, which run on the core's thread and wait.
#pragma once

#include <memory>

#include "phub/server/shard.h"
#include "phub/transport/tcp/event_loop.h"
#include "phub/transport/tcp/tcp_listener.h"

namespace phub::server {

class ServerCore {
 public:
  // pin_core < 0: not pinned. port 0: any free port.
  static StatusOr<std::unique_ptr<ServerCore>> Create(keys::CoreIndex index,
                                                      const std::string& address,
                                                      std::uint16_t port, int pin_core,
                                                      const transport::tcp::SocketTuning& tcp);
  ~ServerCore();

  keys::CoreIndex index() const { return index_; }
  std::uint16_t port() const { return port_; }

  // Builds the job's shard on this core's thread (its memory is first touched there).
  void InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink);
  // Closes the shard's connections and frees it; returns its counters.
  ShardStats RemoveShard();

 private:
  ServerCore(keys::CoreIndex index, int pin_core);

  keys::CoreIndex index_;
  transport::tcp::EventLoop loop_;
  std::unique_ptr<transport::tcp::TcpListener> listener_;  // used on loop_'s thread only
  std::unique_ptr<Shard> shard_;                            // used on loop_'s thread only
  std::uint16_t port_ = 0;
};

}  // namespace phub::server
