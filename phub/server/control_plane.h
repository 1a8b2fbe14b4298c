// phubd's control plane, on the daemon's main thread: accepts workers' control connections,
// admits their Hellos (hello_check.h), forms a job when world_size workers have joined (key
// table, shards on every core, Welcome to each worker), watches the job, and ends it.
//
// Job states: forming (collecting Hellos) -> running (Welcome sent; further Hellos refused)
// -> ended (every worker's control connection closed) -> forming again, or the daemon exits
// with --one-job. A worker that leaves without Goodbye, or a data connection lost without
// BYE, stalls the job: it is logged, the remaining workers get Error JOB_STALLED on their
// control connections (their connections stay open), and the daemon carries on.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "phub/server/server_core.h"
#include "phub/server/server_options.h"
#include "phub/transport/tcp/tcp_listener.h"
#include "proto/phub.pb.h"

namespace phub::server {

class ControlPlane {
 public:
  // `cores` must outlive the control plane. `on_job_end` runs on the control thread.
  ControlPlane(boost::asio::io_context& context, const ServerOptions& options,
               std::vector<std::unique_ptr<ServerCore>>& cores, std::function<void()> on_job_end);
  ~ControlPlane();

  Status Start();  // binds the control port
  std::uint16_t port() const { return listener_->port(); }
  void Stop();     // closes every control connection and ends a running job

 private:
  struct Session {
    explicit Session(boost::asio::ip::tcp::socket s) : socket(std::move(s)) {}
    boost::asio::ip::tcp::socket socket;
    std::uint64_t id = 0;
    std::int64_t rank = -1;  // set once its Hello is accepted
    bool in_job = false;
    bool said_goodbye = false;
    proto::Hello hello;
  };
  using SessionPtr = std::shared_ptr<Session>;

  void OnAccept(boost::asio::ip::tcp::socket socket);
  void ReadNext(const SessionPtr& session);
  void OnMessage(const SessionPtr& session, proto::ControlMessage message);
  void OnHello(const SessionPtr& session, const proto::Hello& hello);
  void OnSessionClosed(const SessionPtr& session, const Status& why);
  void Send(const SessionPtr& session, const proto::ControlMessage& message, bool close_after);
  void Refuse(const SessionPtr& session, const proto::Error& error);
  void StartJob();
  void FailForming(const proto::Error& error);
  void Stall(const std::string& reason);
  void EndJob();
  void OnShardEvent(const ShardEvent& event);

  boost::asio::io_context& context_;
  const ServerOptions& options_;
  std::vector<std::unique_ptr<ServerCore>>& cores_;
  std::function<void()> on_job_end_;
  std::unique_ptr<transport::tcp::TcpListener> listener_;
  std::map<std::uint64_t, SessionPtr> sessions_;
  std::uint64_t next_session_id_ = 1;

  // The forming or running job.
  std::vector<SessionPtr> members_;  // by rank
  std::uint32_t joined_ = 0;
  bool running_ = false;
  bool stalled_ = false;
  std::uint32_t live_members_ = 0;
  std::uint64_t jobs_started_ = 0;
  // Shards post events here after the control plane is gone during shutdown: guard them.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace phub::server
