// One job on phubd: everything a job owns on the control plane's side, in one place. phubd
// serves any number of jobs at once (ControlPlane keeps them by name); each is formed by the
// workers whose Hellos name it, and carries its own world size, tensor table and chunk placement
// (JobSpec), optimizer, token (checked by the control plane before a Hello reaches it), memory
// charge, weight, lifecycle and recovery. Its shards live on every core, keyed by its session
// (server_core.h); its end removes them, and with them all it allocated.
//
// Lifecycle: forming (collecting Hellos; every member refused with TIMEOUT if the job is not
// complete --form-timeout-ms after its first Hello) -> running (Welcome sent; further Hellos
// refused, except a lost member's rejoin) -> ended (every member's control connection closed,
// or forming failed). A worker that leaves without Goodbye, or a data connection lost without
// BYE, stalls the job unless it rejoins (job_recovery.cc): it is logged, the remaining workers
// get Error JOB_STALLED, and members still connected --stalled-job-timeout-ms later are closed,
// so the job always ends. A Goodbye ends its session at once; if the others then push an
// iteration the leaver's copy is missing from, a shard reports it and the job stalls too.
//
// Recovery (job_recovery.cc): a member lost mid-job leaves the job waiting up to
// --rejoin-timeout-ms for a worker of the same rank to say Hello again; the rejoiner is welcomed
// into the running job at the iteration it must replay (shard.h). Checkpoints: every
// --checkpoint-every iterations the shards' copies are gathered here and written on the job's
// writer thread, into --checkpoint-dir (the job named "default") or --checkpoint-dir/NAME.
//
// Every log line names the job. Threading: the control plane's thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/server/checkpoint/checkpoint_writer.h"
#include "phub/server/job/control_session.h"
#include "phub/server/core/server_core.h"
#include "phub/server/server_options.h"
#include "phub/server/racks/uplink.h"
#include "proto/phub.pb.h"

namespace phub::server {

// The job that resumes a checkpoint (--resume): the first to start takes it.
struct ResumeState {
  std::shared_ptr<const JobSnapshot> snapshot;
  std::string path;  // its file, for the errors that name it
  std::uint64_t iteration = 0;
};

// Lifetime counts over all jobs, exported by the control plane (AddMetrics).
struct JobCounters {
  std::uint64_t formed = 0, stalls = 0, ended = 0, losses = 0, rejoins = 0;
  std::uint64_t checkpoints_written = 0;
};

class Job : public std::enable_shared_from_this<Job> {
 public:
  // What a job uses of the daemon; all of it outlives the job.
  struct Host {
    boost::asio::io_context& io;
    const ServerOptions& options;
    std::vector<std::unique_ptr<ServerCore>>& cores;
    SessionEnder& sessions;
    JobCounters& counters;
    ResumeState& resume;
    const bool& stopping;  // phubd is stopping: members end without stalling the job
    // Runs once, on the control thread, when the job has ended (or failed to form): the
    // control plane frees its name and its memory charge.
    std::function<void(Job&)> on_end;
  };
  // `charge_bytes`: the memory the control plane admitted it for; `weight`: its share of every
  // core's sends (fair_send_queue.h).
  Job(Host host, std::string name, std::uint64_t id, std::uint32_t world_size,
      std::uint64_t charge_bytes, double weight);
  ~Job();

  const std::string& name() const { return name_; }
  std::uint64_t id() const { return id_; }  // the daemon's count of jobs, for logs
  std::uint32_t world_size() const { return world_size_; }
  std::uint64_t charge_bytes() const { return charge_bytes_; }
  double weight() const { return weight_; }
  bool running() const { return running_; }
  bool stalled() const { return stalled_; }
  bool ended() const { return ended_; }
  bool started() const { return started_; }  // formed (its shards were installed) at some time
  std::uint32_t connected() const;  // members whose control connection is open
  std::uint32_t missing() const { return missing_count_; }
  std::uint64_t model_bytes() const;  // float32, of the running job; 0 before it starts

  // A Hello naming this job, its token already checked: joins the forming job, rejoins the
  // running one, or is refused (the Error names why).
  void OnHello(const SessionPtr& session, const proto::Hello& hello);
  // A member's Goodbye: its session ends (the caller drops it next).
  void OnGoodbye(const SessionPtr& session);
  // The session of a member ended (SessionEnder::Drop): the job's accounting follows.
  void MemberGone(const SessionPtr& session, SessionState was, const Status& why);
  // Liveness: members not heard from for --liveness-timeout-ms are refused; others get a
  // Heartbeat.
  void CheckLiveness(std::chrono::steady_clock::time_point now);
  // phubd stops: SIGTERM with --checkpoint-dir writes the running job's checkpoint first; then
  // the job ends once its sessions are dropped.
  void CheckpointNow();
  void EndIfRunning();

 private:
  enum class Deadline { kNone, kForming, kAttaching, kLeaving, kStalled, kRejoin };
  const ServerOptions& options() const { return host_.options; }
  void Send(const SessionPtr& session, const proto::ControlMessage& message) {
    SendControl(session, message);
  }
  void Refuse(const SessionPtr& session, const proto::Error& error) {
    host_.sessions.Refuse(session, error);
  }
  void Join(const SessionPtr& session, const proto::Hello& hello);
  // The job's one deadline, and what it is for: a later phase's deadline replaces an earlier's.
  void ArmDeadline(Deadline kind, int timeout_ms, std::function<void()> fire);
  void CancelDeadline();
  void Start();
  // Racks of racks (uplink.h): the relay of a job whose workers span several racks, or null.
  std::shared_ptr<Uplink> MakeUplink(const proto::Hello& hello, const keys::KeyTable& table,
                                     const kernels::OptimizerConfig& optimizer,
                                     std::uint64_t session);
  void FailForming(const proto::Error& error);
  void ArmLeaveDeadline(std::int64_t first_to_leave);
  void Stall(const std::string& reason);
  void End();
  void OnShardEvent(const ShardEvent& event);
  void SendWelcome(const SessionPtr& member, bool resumed, std::uint64_t resume_iteration);
  // Recovery (job_recovery.cc).
  void MemberLost(std::uint32_t rank, const std::string& why);
  bool IsRejoin(const proto::Hello& hello) const;
  void Rejoin(const SessionPtr& session, const proto::Hello& hello);
  void Notify(const std::string& text);
  void OnSnapshot(const ShardEvent& event);
  std::shared_ptr<JobSnapshot> SnapshotHeader() const;
  std::unique_ptr<CheckpointWriter> MakeCheckpointWriter();

  Host host_;
  const std::string name_;
  const std::uint64_t id_;
  const std::uint32_t world_size_;
  const std::uint64_t charge_bytes_;
  const double weight_;
  std::string log_name_;  // "job 'NAME'" for log lines and Errors

  std::vector<SessionPtr> members_;  // by rank
  std::uint32_t joined_ = 0;
  bool running_ = false;
  bool stalled_ = false;
  bool ended_ = false;
  bool started_ = false;
  std::uint32_t live_members_ = 0;
  std::vector<bool> left_cleanly_;  // by rank: said Goodbye in the running job
  std::uint32_t cores_attached_ = 0;  // cores every member has attached to (kAllAttached)
  boost::asio::steady_timer deadline_;  // the flags of Deadline's phases, in job.cc
  Deadline deadline_kind_ = Deadline::kNone;
  std::uint64_t deadline_generation_ = 0;  // a deadline that fired late for another phase
  // Recovery.
  proto::Hello job_hello_;                    // the running job's tensors, for rejoins
  std::vector<std::uint8_t> missing_;         // by rank: lost, may rejoin
  std::vector<std::uint64_t> resume_point_;   // by rank: the iteration it rejoins at
  std::vector<std::uint64_t> forgets_;        // by rank: ForgetWorker rounds (ShardEvent::epoch)
  std::uint32_t missing_count_ = 0;
  std::unique_ptr<CheckpointWriter> checkpoints_;
  // The checkpoint being gathered from the cores: its iteration and the chunks so far.
  std::uint64_t gathering_iteration_ = 0;
  std::uint32_t gathered_cores_ = 0;
  double gathered_pause_ms_ = 0;
  std::shared_ptr<JobSnapshot> gathering_;
  std::shared_ptr<const JobSpec> spec_;  // while running
  // Racks of racks: this job's part on this rack's PBox passes its sums on (uplink.h).
  std::shared_ptr<Uplink> uplink_;
  // Shards' events and timers may come after the job is gone: guard them.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace phub::server
