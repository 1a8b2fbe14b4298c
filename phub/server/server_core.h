// One server core: a pinned event loop, the TCP listener for its data connections, and the
// Shard of the running job (none between jobs). Other threads (the control plane) reach it
// only through InstallShard/RemoveShard, which run on the core's thread and wait.
//
// On verbs the listener still takes each worker's TCP side channel; the core then sets up an
// RC queue pair over it (VerbsConnection::Accept) on its own completion queue, and the job's
// shard memory is registered with the NIC once, when the shard is installed.
#pragma once

#include <memory>
#include <optional>

#include "phub/server/server_options.h"
#include "phub/server/shard.h"
#include "phub/transport/tcp/event_loop.h"
#include "phub/transport/tcp/tcp_listener.h"
#include "phub/transport/verbs/verbs_connection.h"

namespace phub::server {

class ServerCore {
 public:
  // pin_core < 0: not pinned. port 0: any free port. `rdma` null: TCP data connections.
  // `limits`: max_connections bounds the data connections not yet attached; attach_timeout_ms
  // closes one that has not sent its ATTACH by then.
  static StatusOr<std::unique_ptr<ServerCore>> Create(
      keys::CoreIndex index, const std::string& address, std::uint16_t port, int pin_core,
      const transport::tcp::SocketTuning& tcp,
      std::shared_ptr<const transport::verbs::VerbsDevice> rdma, const ServerLimits& limits);
  ~ServerCore();

  keys::CoreIndex index() const { return index_; }
  std::uint16_t port() const { return port_; }

  // Builds the job's shard on this core's thread (its memory is first touched there); on verbs
  // registers its slots and weights (the error says how to raise the memlock limit). A failed
  // allocation is ResourceExhausted: the job is refused, the core goes on.
  Status InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink);
  // Closes the shard's connections and frees it; returns its counters.
  ShardStats RemoveShard();

 private:
  ServerCore(keys::CoreIndex index, int pin_core);
  void OnAccept(boost::asio::ip::tcp::socket socket);
  // Closes `connection` if it has not attached within limits_.attach_timeout_ms.
  void WatchAttach(const std::shared_ptr<transport::Connection>& connection);
  void CloseSettingUp();  // verbs connections still in set-up: they have our rkeys

  keys::CoreIndex index_;
  ServerLimits limits_;
  std::uint64_t job_chunk_bytes_ = 0;  // the installed job's: the largest payload a shard sends
  std::unique_ptr<transport::tcp::TcpListener> listener_;  // used on loop_'s thread only
  std::unique_ptr<Shard> shard_;                            // used on loop_'s thread only
  std::uint64_t shard_generation_ = 0;                      // bumps with every shard
  std::shared_ptr<const transport::verbs::VerbsDevice> rdma_;
  std::optional<transport::verbs::VerbsLoop> verbs_;        // the core's CQ; this job's registry
  std::vector<std::weak_ptr<transport::verbs::VerbsConnection>> setting_up_;
  std::uint16_t port_ = 0;
  std::uint64_t refused_ = 0;  // data connections refused for --max-connections
  // Last, so it is destroyed (its thread joined) first: handlers still queued on it may touch
  // the members above.
  transport::tcp::EventLoop loop_;
};

}  // namespace phub::server
