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
// into the running job at the iteration it must replay (shard.h). Checkpoints
// (job_checkpoints.cc): every --checkpoint-every iterations the shards' copies are gathered here
// and written on the job's writer thread, into --checkpoint-dir (the job named "default") or
// --checkpoint-dir/NAME. Its start, from the last Hello to the Welcomes, is job_start.cc:
// its shards are built on every core at once, off the control plane's thread (by an installer
// thread of the job's), so phubd goes on serving every job meanwhile and the forming
// members get their Heartbeats.
//
// Every log line names the job. Threading: the control plane's thread only; the installer
// thread touches only what InstallShards gives it (the spec, the cores, its Install).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phub/common/member_schedule.h"
#include "phub/server/admission/admission_options.h"
#include "phub/server/admission/job_role.h"
#include "phub/server/checkpoint/checkpoint_writer.h"
#include "phub/server/core/core_options.h"
#include "phub/server/core/server_core.h"
#include "phub/server/job/control_session.h"
#include "phub/server/job/job_options.h"
#include "phub/server/job/job_progress.h"
#include "phub/server/job/step_values_ledger.h"
#include "phub/server/racks/uplink.h"
#include "proto/phub.pb.h"

namespace phub::server {

// What a job resumes from (--resume D: D for the job "default", D/NAME for job NAME); emptied
// once the job has started from it, so that a later job of the name starts afresh.
struct ResumeState {
  std::shared_ptr<const JobSnapshot> snapshot;
  std::string path;  // its file, for the errors that name it
  std::uint64_t iteration = 0;
};

// Lifetime counts over all jobs, exported by the control plane (AddMetrics).
struct JobCounters {
  std::uint64_t formed = 0, stalls = 0, ended = 0, losses = 0, rejoins = 0;
  std::uint64_t checkpoints_written = 0;
  // Checkpoints not written: a write that failed (periodic or on stop), or a job's directory
  // that could not be created at its start.
  std::uint64_t checkpoint_failures = 0;
};

// A restore of a job's optimizer state in progress (job_optimizer_state.cc): rank 0's pieces so
// far (by chunk id, state arrays only; allocated as they come, bounded by the key table) and the
// next piece expected, the members that asked and for how many steps. (At namespace scope: clang
// cannot default-construct a nested class with member initializers inside std::optional.)
struct OptimizerStateRestore {
  std::vector<ChunkSnapshot> chunks;
  std::uint32_t next_chunk = 0, next_array = 0, next_offset = 0;
  std::vector<SessionPtr> asked;  // by rank
  std::uint32_t asking = 0;
  std::uint64_t steps = 0;
};

class Job : public std::enable_shared_from_this<Job> {
 public:
  // What a job uses of the daemon; all of it outlives the job.
  struct Host {
    boost::asio::io_context& io;
    const JobOptions& options;           // its deadlines, checkpoints, initial weights
    const AdmissionOptions& admission;   // what its Hellos are checked against; its chunks
    const DataPlaneOptions& data_plane;  // what its Welcome names; its relay's RDMA device
    std::vector<std::unique_ptr<ServerCore>>& cores;
    SessionEnder& sessions;
    JobCounters& counters;
    ResumeState& resume;  // this job's
    // Every job's, by key: a job with none of its own is refused if one of these is of its
    // model (its checkpoints are elsewhere under --resume: CheckNotResumedElsewhere).
    const std::map<std::string, ResumeState>& resumes;
    const bool& stopping;  // phubd is stopping: members end without stalling the job
    // Runs when the job has formed, before anything is allocated for it: the control plane
    // takes its memory charge, or returns the Error that refuses every member.
    std::function<std::optional<proto::Error>(Job&)> reserve;
    // Runs once, on the control thread, when the job has ended (or failed to form): the
    // control plane frees its name and its memory charge.
    std::function<void(Job&)> on_end;
  };
  // `role`: its first Hello's (every member's, CheckHello sees to it); `charge_bytes`: the
  // memory the control plane admitted it for; `weight`: its share of every core's sends
  // (fair_send_queue.h).
  Job(Host host, std::string name, JobRole role, std::uint64_t id, std::uint32_t world_size,
      std::uint64_t charge_bytes, double weight);
  ~Job();

  const std::string& name() const { return name_; }
  std::uint64_t id() const { return id_; }  // the daemon's count of jobs, for logs
  std::uint32_t world_size() const { return world_size_; }
  std::uint64_t charge_bytes() const { return charge_bytes_; }
  double weight() const { return weight_; }
  bool running() const { return running_; }
  bool stalled() const { return stalled_; }
  const std::string& stall_reason() const { return stall_reason_; }  // Stall's, once stalled
  // It stalled with weights a restarted worker would expect to find: an elastic job of one
  // rack (a rack's part holds none) past its first iteration (or resumed from a checkpoint).
  // A stall while it formed or attached lost nothing. Its name is then refused a while
  // (admission/stalled_names.h).
  bool StalledWithWeights() const;
  bool ended() const { return ended_; }
  bool started() const { return started_; }  // formed (its shards were installed) at some time
  std::uint32_t connected() const;  // members whose control connection is open
  std::uint32_t missing() const { return missing_count_; }
  std::uint64_t model_bytes() const;  // float32, of the running job; 0 before it starts
  std::uint32_t members() const;      // ranks held by a worker (joined, not lost)
  // While the job waits for lost workers to rejoin: when it stops waiting (and stalls).
  std::optional<std::chrono::steady_clock::time_point> rejoin_deadline() const;
  // Its iteration, rate and bytes (per-job series); the control plane's thread only.
  JobProgress& progress() { return progress_; }

  // A Hello naming this job, its token already checked: joins the forming job, rejoins the
  // running one, or is refused (the Error names why).
  void OnHello(const SessionPtr& session, const proto::Hello& hello);
  // A schedule (job_step_values.cc): a member's hyper-parameters for one iteration. Refuses
  // the member for a wrong message; stalls the job when the ranks disagree.
  void OnStepValues(const SessionPtr& session, const proto::StepValues& values);
  // The optimizer's state is the user's (job_optimizer_state.cc): a member asks for it; rank 0
  // sends the pieces of a state to restore; each member asks for the restore.
  void OnStateRequest(const SessionPtr& session);
  void OnStatePiece(const SessionPtr& session, const proto::StatePiece& piece);
  void OnStateRestore(const SessionPtr& session, const proto::StateRestore& restore);
  // Elastic jobs (job_membership.cc): a member's answer to a Membership; a member asking to
  // leave at the next iteration boundary.
  void OnMembershipAck(const SessionPtr& session, const proto::MembershipAck& ack);
  void OnLeaveRequest(const SessionPtr& session);
  bool elastic() const { return elastic_.enabled; }
  // A member's Goodbye: its session ends (the caller drops it next).
  void OnGoodbye(const SessionPtr& session);
  // The session of a member ended (SessionEnder::Drop): the job's accounting follows.
  void MemberGone(const SessionPtr& session, SessionState was, const Status& why);
  // Liveness: members not heard from for --liveness-timeout-ms are refused; others get a
  // Heartbeat.
  void CheckLiveness(std::chrono::steady_clock::time_point now);
  // phubd stops: SIGTERM with --checkpoint-dir writes the running job's checkpoint first; then
  // the job ends once its sessions are dropped. An error (logged, counted) when a checkpoint
  // was due and could not be written: phubd then exits non-zero.
  Status CheckpointNow();
  void EndIfRunning();

 private:
  enum class Deadline { kNone, kForming, kAttaching, kLeaving, kStalled, kRejoin };
  struct StartPlan;  // job_start.cc
  struct Install;    // job_start.cc: the installer thread and what it reports
  const JobOptions& options() const { return host_.options; }
  const JobDeadlines& deadlines() const { return host_.options.deadlines; }
  void Send(const SessionPtr& session, const proto::ControlMessage& message) {
    SendControl(session, message);
  }
  void Refuse(const SessionPtr& session, const proto::Error& error) {
    host_.sessions.Refuse(session, error);
  }
  void Join(const SessionPtr& session, const proto::Hello& hello);
  // A Heartbeat to a member of the forming job whose Hello asked for them, now and every
  // forming_heartbeat_ms until the job starts (or the member goes).
  void BeatWhileForming(const SessionPtr& session);
  // The job's one deadline, and what it is for: a later phase's deadline replaces an earlier's.
  void ArmDeadline(Deadline kind, int timeout_ms, std::function<void()> fire);
  void CancelDeadline();
  void FailForming(const proto::Error& error);
  // The start (job_start.cc), step by step: each that may fail returns the Error that refuses
  // every member, having left nothing installed.
  void Start();
  std::optional<proto::Error> BuildKeyTable(const proto::Hello& hello, StartPlan& plan) const;
  // A home part: every tensor (a rack's chunk and its counts) is one chunk of `table`.
  std::optional<proto::Error> CheckHomeChunks(const keys::KeyTable& table) const;
  kernels::OptimizerConfig ShardOptimizer(const kernels::OptimizerConfig& job_optimizer) const;
  // A home part: by rank, the most copies the member's pushes may count (JobSpec::most_copies).
  std::vector<std::uint32_t> MostCopies() const;
  // JobSpec::lr_scaling and lr_start_members: the Hello's and the elastic start size; across
  // racks, none on a rack's part and, on a home part, the racks' start sizes summed.
  kernels::LrScaling LrScalingOf(const proto::Hello& hello) const;
  std::uint32_t LrStartMembers() const;
  std::optional<proto::Error> MakeRelay(const proto::Hello& hello, StartPlan& plan);
  std::shared_ptr<JobSpec> MakeSpec(const proto::Hello& hello, StartPlan& plan) const;
  // Starts the installer: every core's shard built at once, off this thread; Installed()
  // follows on this thread (posted), with the plan.
  void InstallShards(std::unique_ptr<StartPlan> plan);
  // The shards are in, or one core could not take its own (none is then installed): the start
  // goes on (checkpoints, Welcomes), or every member is refused.
  void Installed();
  // Waits for the installer (phubd stopping: on the control plane's thread, blocking) and
  // removes what it installed. Nothing if none runs.
  void AbandonInstall();
  std::optional<proto::Error> OpenCheckpoints(const StartPlan& plan);
  void Run(StartPlan& plan, const proto::Hello& hello);  // the state, Welcomes, attach deadline
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
  // A schedule (job_step_values.cc). The optimizer iteration `iteration` stepped with (its
  // agreed values where kept); a core's chunk waits for `iteration`'s values: unless they come
  // within the liveness timeout, the job stalls naming the ranks that never sent theirs.
  kernels::OptimizerConfig OptimizerOf(std::uint64_t iteration) const;
  void AwaitValues(std::uint64_t iteration);
  // Elastic: no chunk of the job completes an iteration past the latest any has (until the
  // next change is applied); returns that latest.
  std::uint64_t FreezeCores();
  // Each agreed iteration's values go to every core.
  void StepWithAgreed(const StepValuesLedger::Outcome& outcome);
  // Elastic: who gives the values changed (`left` gives no more; none: the schedule changed,
  // a joiner entered); iterations that waited only on it are agreed.
  void ValuesMembersChanged(std::optional<std::uint32_t> left);
  // The Welcome's per_iteration_values and, resumed at `iteration`, its values where known.
  void DescribeValues(proto::Welcome& welcome, bool resumed, std::uint64_t iteration) const;
  // Elastic jobs (job_membership.cc). ConfigureElastic: from the job's first Hello.
  // ReadyToStart: every worker the job starts with has said Hello. ElasticJoin: a Hello of the
  // running job takes a free slot and attaches; once every joiner has attached to every core
  // (kAllAttached), BeginChange freezes the cores, decides the next membership and its first
  // iteration, tells every member and waits for their MembershipAcks (FinishChange then
  // applies it on every core). ElasticLoss: a member gone without Goodbye is dropped at once.
  void ConfigureElastic(const proto::Hello& hello);
  bool ReadyToStart() const;
  void ElasticJoin(const SessionPtr& session, const proto::Hello& hello);
  void BeginChange();
  void FinishChange();
  bool JoinersAttached();  // every core has every member and joiner attached, now
  void ElasticLoss(std::uint32_t rank, const std::string& why);
  void ElasticGoodbye(std::uint32_t rank);
  void DropOnCores(std::uint32_t rank);
  // Below --min-workers: the cores stay frozen until joins bring it back, or the job stalls
  // after --rejoin-timeout-ms.
  void CheckMinimum();
  void DescribeMembership(proto::Membership& membership) const;
  // The optimizer's state (job_optimizer_state.cc): every member that asked for the restore is
  // answered (an error: nothing restored), and the restore forgotten.
  void AnswerRestore(std::uint64_t steps, const std::string& error);
  void FinishRestore();
  // Checkpoints (job_checkpoints.cc).
  void OnSnapshot(const ShardEvent& event);
  // The checkpoint of `iteration` without its chunks (its optimizer: OptimizerOf(iteration)).
  std::shared_ptr<JobSnapshot> SnapshotHeader(std::uint64_t iteration) const;
  std::unique_ptr<CheckpointWriter> MakeCheckpointWriter();
  std::optional<proto::Error> CheckNotResumedElsewhere(const proto::Hello& hello) const;
  // Hands a gathered checkpoint to the writer, or, while it still writes the one before,
  // keeps it to write next (a newer one due meanwhile replaces it, logged).
  void SubmitCheckpoint(std::shared_ptr<const JobSnapshot> snapshot, std::uint64_t iteration,
                        double pause_ms);
  // The job ends: a checkpoint still waiting for the writer is written now (the last one too).
  void FlushPendingCheckpoint();

  Host host_;
  const std::string name_;
  const JobRole role_;
  const std::uint64_t id_;
  const std::uint32_t world_size_;
  const std::uint64_t charge_bytes_;
  const double weight_;
  std::string log_name_;  // "job 'NAME'" for log lines and Errors

  std::vector<SessionPtr> members_;  // by rank
  // What the job knows of each rank beyond its session.
  struct Rank {
    bool left_cleanly = false;      // said Goodbye in the running job
    bool missing = false;           // lost, may rejoin
    std::uint64_t resume_point = 0; // the iteration it rejoins at
    std::uint64_t forgets = 0;      // ForgetWorker rounds (ShardEvent::epoch)
  };
  std::vector<Rank> ranks_;  // by rank
  std::uint32_t joined_ = 0;
  bool running_ = false;
  bool stalled_ = false;
  std::string stall_reason_;
  bool ended_ = false;
  bool started_ = false;
  bool starting_ = false;  // install_ runs
  std::shared_ptr<Install> install_;  // shared: its type is job_start.cc's alone
  std::uint32_t live_members_ = 0;
  std::uint32_t missing_count_ = 0;
  std::uint32_t cores_attached_ = 0;  // cores every member has attached to (kAllAttached)
  // The job's one deadline (the flags of Deadline's phases, in job.cc).
  struct DeadlineState {
    boost::asio::steady_timer timer;
    Deadline kind = Deadline::kNone;
    std::uint64_t generation = 0;  // a deadline that fired late for another phase
  } deadline_;
  proto::Hello job_hello_;  // the running job's tensors and optimizer, for rejoins
  std::unique_ptr<CheckpointWriter> checkpoints_;
  // The checkpoint being gathered from the cores: its iteration and the chunks so far.
  struct Gathering {
    std::uint64_t iteration = 0;
    std::uint32_t cores = 0;
    double pause_ms = 0;
    std::shared_ptr<JobSnapshot> snapshot;
  } gathering_;
  // The checkpoint waiting for the writer to finish the one before (at most one: memory is
  // bounded by two copies of the job's state, one being written and this one).
  struct PendingCheckpoint {
    std::shared_ptr<const JobSnapshot> snapshot;
    std::uint64_t iteration = 0;
    double pause_ms = 0;
  } pending_checkpoint_;
  std::shared_ptr<const JobSpec> spec_;  // while running
  // JobSpec::per_iteration_values: the ranks' values per iteration, from the start on; the
  // timer of AwaitValues and the iteration it waits for.
  std::optional<StepValuesLedger> values_;
  boost::asio::steady_timer values_timer_;
  std::uint64_t awaited_ = 0;
  // A restore of the optimizer's state in progress (OptimizerStateRestore, above), and its
  // deadline.
  std::optional<OptimizerStateRestore> restore_;
  boost::asio::steady_timer restore_timer_;
  // Optimizer steps before iteration 0 (a restored state): chunks count iterations from it.
  std::uint64_t steps_offset_ = 0;
  JobProgress progress_;                 // from the start on (its last values after the end)
  // Elastic jobs (job_membership.cc; docs/design.md "Elastic jobs"). max = world_size_.
  struct ElasticState {
    bool enabled = false;
    std::uint32_t min = 0, start = 0;
    MemberSchedule schedule;             // as announced to the members
    std::vector<std::uint32_t> members;  // as of the latest change, ascending
    std::vector<std::uint32_t> joiners;  // welcomed, not yet members
    std::vector<std::uint32_t> leavers;  // asked to leave, still members
    bool joiners_attached = true;        // every joiner attached to every core
    bool frozen = false;                 // below min (CheckMinimum)
    // A Goodbye took it below min: it is finishing (no change, no join; it ends as the others
    // say Goodbye or are lost).
    bool ending = false;
    // The change in progress: its first iteration, its members, the joiners it makes members,
    // and by rank whose MembershipAck is awaited; `again`: another is due once it is done.
    bool changing = false, again = false;
    std::uint64_t from = 0;
    std::chrono::steady_clock::time_point frozen_since{};  // the change's Freeze
    std::uint64_t generation = 0;  // of the change in progress (its ack deadline's)
    std::vector<std::uint32_t> next, joining;
    std::vector<bool> awaiting;
  } elastic_;
  boost::asio::steady_timer elastic_timer_;
  // Racks of racks: this job's part on this rack's PBox passes its sums on (uplink.h).
  std::shared_ptr<Uplink> uplink_;
  // Shards' events and timers may come after the job is gone: guard them.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace phub::server
