// phubd's control plane, on the daemon's main thread: accepts workers' control connections,
// admits their Hellos (hello_check.h, job_limits.h), forms a job when world_size workers have
// joined (key table, shards on every core, Welcome to each worker), watches the job, and ends it.
//
// A control connection (a Session) is in exactly one state, and every state handles every
// message: what the state does not expect is refused with an Error and the session dropped.
//
//   awaiting Hello --Hello ok--> joined (job forming) --job formed--> in job --Goodbye--> (ends)
//        |                          |                                  |
//        +-- anything else, no Hello within --hello-timeout-ms, the peer gone, a bad frame:
//            Drop(): the one place a session ends. It frees the rank, and the job's accounting
//            follows: a forming job loses a member; a running job loses a live member (stalled
//            unless it said Goodbye) and ends when the last one is gone.
//
// Job states: forming (collecting Hellos; all members refused with TIMEOUT if the job is not
// complete --form-timeout-ms after its first Hello) -> running (Welcome sent; further Hellos
// refused) -> ended (every member's control connection closed) -> forming again, or the daemon
// exits with --one-job. A worker that leaves without Goodbye, or a data connection lost without
// BYE, stalls the job: it is logged, the remaining workers get Error JOB_STALLED, and members
// still connected --stalled-job-timeout-ms later are closed, so the job always ends. A Goodbye
// ends its session at once; if the others then push an iteration the leaver's copy is missing
// from, a shard reports it and the job stalls too (a clean leave mid-job is still a loss).
//
// Recovery (control_plane_recovery.cc): a member lost mid-job (its control connection closed or
// silent for --liveness-timeout-ms, or a data connection lost) leaves the job waiting up to
// --rejoin-timeout-ms for a worker of the same rank to say Hello again; the others are told
// (Notice) and wait. The rejoiner is welcomed into the running job at the iteration it must
// replay (shard.h). Past the deadline the job stalls as above. Heartbeats go both ways on every
// member's control connection. Checkpoints: every --checkpoint-every iterations the shards' copies
// are gathered here and written on a writer thread; --resume starts the first job from one.
//
// Resources a peer can hold are bounded: --max-connections open control connections, a frame
// of --max-control-frame-bytes read as its bytes arrive, --max-tensors and --max-model-bytes
// checked before anything is allocated for a job.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "phub/metrics/registry.h"
#include "phub/server/checkpoint_writer.h"
#include "phub/server/server_core.h"
#include "phub/server/server_options.h"
#include "phub/transport/control_frame.h"
#include "phub/transport/socket_listener.h"
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
  // SIGTERM with --checkpoint-dir: the running job's checkpoint, written before Stop.
  void CheckpointBeforeStop() { CheckpointNow(); }
  // --resume: loads the newest good checkpoint; the first job must match it. Before Start.
  Status LoadResume();
  // The job's series (docs/operations.md "Metrics"): callbacks over this object's state, so
  // `registry` must be rendered on the control thread only, and not after this is destroyed.
  void AddMetrics(metrics::Registry& registry);

 private:
  enum class State { kAwaitingHello, kJoined, kInJob, kLeaving, kClosed };
  struct Session {
    Session(boost::asio::ip::tcp::socket s, boost::asio::io_context& context)
        : socket(std::move(s)), deadline(context) {}
    boost::asio::ip::tcp::socket socket;
    boost::asio::steady_timer deadline;  // the Hello's
    std::shared_ptr<transport::ControlFrameDecoder> decoder;
    std::uint64_t id = 0;
    State state = State::kAwaitingHello;
    std::int64_t rank = -1;  // set once its Hello is accepted
    std::string peer;        // for logs
    proto::Hello hello;
    std::chrono::steady_clock::time_point last_heard{};  // any message; liveness
    // Frames waiting to be written: asynchronous writes on one socket must not overlap.
    std::deque<std::shared_ptr<std::string>> outbox;
    bool writing = false;
    bool close_when_flushed = false;  // dropped with a farewell Error still to write
  };
  using SessionPtr = std::shared_ptr<Session>;

  void OnAccept(boost::asio::ip::tcp::socket socket);
  void ReadNext(const SessionPtr& session);
  void OnMessage(const SessionPtr& session, proto::ControlMessage message);
  void OnHello(const SessionPtr& session, const proto::Hello& hello);
  void Send(const SessionPtr& session, const proto::ControlMessage& message);
  static void WriteQueued(const SessionPtr& session);
  static void CloseSocket(Session& session);
  // Ends the session: frees its rank and updates the job (Drop's comment in the .cc); sends
  // `farewell` first if given, then closes.
  void Drop(const SessionPtr& session, const Status& why,
            const proto::Error* farewell = nullptr);
  void Refuse(const SessionPtr& session, const proto::Error& error);
  // The job's one deadline, and what it is for: a later phase's deadline replaces an earlier's.
  enum class JobDeadline { kNone, kForming, kAttaching, kLeaving, kStalled, kRejoin };
  void ArmJobDeadline(JobDeadline kind, int timeout_ms, std::function<void()> fire);
  void CancelJobDeadline();
  void StartJob();
  void FailForming(const proto::Error& error);
  void ArmLeaveDeadline(std::int64_t first_to_leave);
  void Stall(const std::string& reason);
  void EndJob();
  void OnShardEvent(const ShardEvent& event);
  void SendWelcome(const SessionPtr& member, bool resumed, std::uint64_t resume_iteration);
  // Recovery (control_plane_recovery.cc).
  void MemberLost(std::uint32_t rank, const std::string& why);
  bool IsRejoin(const proto::Hello& hello) const;
  void Rejoin(const SessionPtr& session, const proto::Hello& hello);
  void Notify(const std::string& text);
  void ArmLiveness();
  void OnSnapshot(const ShardEvent& event);
  // Writes the running job's checkpoint now, all chunks as they are (SIGTERM), and waits.
  void CheckpointNow();
  std::shared_ptr<JobSnapshot> SnapshotHeader() const;

  boost::asio::io_context& context_;
  const ServerOptions& options_;
  std::vector<std::unique_ptr<ServerCore>>& cores_;
  std::function<void()> on_job_end_;
  std::unique_ptr<transport::SocketListener> listener_;
  std::map<std::uint64_t, SessionPtr> sessions_;
  std::uint64_t next_session_id_ = 1;
  std::uint64_t refused_for_connections_ = 0;  // since the last log line about it
  std::chrono::steady_clock::time_point last_refusal_log_{};
  bool stopping_ = false;  // Stop(): sessions end without stalling the job

  // The forming or running job.
  std::vector<SessionPtr> members_;  // by rank
  std::uint32_t joined_ = 0;
  bool running_ = false;
  bool stalled_ = false;
  std::uint32_t live_members_ = 0;
  std::vector<bool> left_cleanly_;  // by rank: said Goodbye in the running job
  std::uint64_t jobs_started_ = 0;
  std::uint32_t cores_attached_ = 0;  // cores every member has attached to (kAllAttached)
  boost::asio::steady_timer job_deadline_;  // the flags of JobDeadline's phases, in the .cc
  JobDeadline job_deadline_kind_ = JobDeadline::kNone;
  std::uint64_t job_deadline_generation_ = 0;  // a deadline that fired late for another job
  // Recovery.
  proto::Hello job_hello_;                    // the running job's tensors, for rejoins
  std::vector<std::uint8_t> missing_;         // by rank: lost, may rejoin
  std::vector<std::uint64_t> resume_point_;   // by rank: the iteration it rejoins at
  std::vector<std::uint64_t> forgets_;        // by rank: ForgetWorker rounds (ShardEvent::epoch)
  std::uint32_t missing_count_ = 0;
  std::uint64_t rejoins_ = 0, losses_ = 0;
  // Exported only (AddMetrics): lifetime counts.
  std::uint64_t stalls_ = 0, jobs_ended_ = 0, hellos_refused_ = 0, checkpoints_written_ = 0;
  boost::asio::steady_timer liveness_timer_;
  std::shared_ptr<const JobSnapshot> resume_;  // --resume: the first job starts from it
  std::string resume_path_;                     // its file, for the errors that name it
  std::uint64_t resume_iteration_ = 0;
  std::unique_ptr<CheckpointWriter> checkpoints_;
  // The checkpoint being gathered from the cores: its iteration and the chunks so far.
  std::uint64_t gathering_iteration_ = 0;
  std::uint32_t gathered_cores_ = 0;
  double gathered_pause_ms_ = 0;
  std::shared_ptr<JobSnapshot> gathering_;
  std::shared_ptr<const JobSpec> spec_;  // the running job's
  // Shards post events here after the control plane is gone during shutdown: guard them.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace phub::server
