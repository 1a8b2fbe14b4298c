// phubd's control plane, on the daemon's main thread: accepts workers' control connections,
// reads their Hellos, and hands each to the job it names (job.h), creating the job on its first
// Hello if phubd admits it: a valid name, the job's token (job_tokens.h), fewer than --max-jobs
// jobs, and memory for it within --memory-budget-bytes (job_limits.h). A job refused for memory
// costs the running ones nothing: its charge is never taken.
//
// Sessions (control_session.h): a control connection is in exactly one state, and every state
// handles every message; what the state does not expect is refused with an Error and the
// session dropped. Drop() is the one place a session ends: no Hello within --hello-timeout-ms,
// the peer gone, a bad frame, a Goodbye; the session's job is told (Job::MemberGone).
//
// In four files: control_plane.cc (sessions, Hellos, jobs by name), control_plane_admission.cc
// (pending connections' quotas, the Challenge, paced token refusals, a new job's admission and
// memory charge), control_plane_resume.cc (--resume), control_plane_metrics.cc (its series).
//
// Resources a peer can hold are bounded: --max-connections open control connections, a frame
// of --max-control-frame-bytes read as its bytes arrive, --max-tensors, --max-model-bytes and
// the memory budget checked before anything is allocated for a job, --max-jobs jobs.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "phub/common/log_limiter.h"
#include "phub/common/pending_connections.h"
#include "phub/metrics/registry.h"
#include "phub/server/admission/refusal_pacer.h"
#include "phub/server/admission/stalled_names.h"
#include "phub/server/job/control_session.h"
#include "phub/server/job/job.h"
#include "phub/server/core/server_core.h"
#include "phub/server/server_options.h"
#include "phub/transport/control_frame.h"
#include "phub/transport/socket_listener.h"
#include "proto/phub.pb.h"

namespace phub::server {

class ControlPlane : public SessionEnder {
 public:
  // `cores` must outlive the control plane. `on_job_end` runs on the control thread after each
  // job's end (--one-job stops phubd there).
  ControlPlane(boost::asio::io_context& context, const ServerOptions& options,
               std::vector<std::unique_ptr<ServerCore>>& cores, std::function<void()> on_job_end);
  ~ControlPlane() override;

  Status Start();  // binds the control port
  std::uint16_t port() const { return listener_->port(); }
  void Stop();     // closes every control connection and ends every job
  // SIGTERM with --checkpoint-dir: every running job's checkpoint, written before Stop. False
  // if one failed (each failure is logged, naming the folder): phubd then exits 1.
  bool CheckpointBeforeStop();
  // --resume D: loads the newest good checkpoint of every job there (D itself: the job
  // "default"'s; D/NAME: job NAME's); each job resumes its own when it forms, and must match
  // it. Before Start.
  Status LoadResume();
  // phubd's series (docs/operations.md "Metrics"), per job where they are a job's: callbacks
  // over this object's state, so `registry` must be rendered on the control thread only, and
  // not after this is destroyed.
  void AddMetrics(metrics::Registry& registry);

  // SessionEnder
  void Drop(const SessionPtr& session, const Status& why,
            const proto::Error* farewell = nullptr) override;
  void ReadNext(const SessionPtr& session) override;

 private:
  void OnAccept(boost::asio::ip::tcp::socket socket);
  // Whether a new session may stay: the source's quota of pending connections, phubd's
  // protected mode; sends the Challenge. False: the session was refused or closed.
  bool AdmitPending(const SessionPtr& session, bool loopback);
  // A Hello whose token proof fails: refused at arrival + the source's delay (refusal_pacer.h).
  void RefuseToken(const SessionPtr& session, const proto::Error& error);
  void OnMessage(const SessionPtr& session, proto::ControlMessage message);
  void OnHello(const SessionPtr& session, const proto::Hello& hello);
  // The job `name` (its token checked by the caller), created for `role` if phubd admits it;
  // null with `refusal` set if not.
  // `source`: the first Hello's address (--max-forming-jobs-per-source).
  std::shared_ptr<Job> FindOrAdmit(const std::string& name, JobRole role,
                                   const proto::Hello& hello, const std::string& source,
                                   proto::Error& refusal);
  // The job formed (all its Hellos in and checked): its memory charge is taken now, or the
  // Error that refuses every member says the budget cannot hold it.
  std::optional<proto::Error> ReserveMemory(Job& job);
  proto::Error MemoryRefusal(const std::string& name, std::optional<std::uint64_t> charge,
                             bool ever) const;
  void NoLongerForming(const Job& job);
  void JobEnded(Job& job);
  // One job's folder under --resume (nothing when it holds no checkpoint).
  Status LoadResumeFolder(const std::string& job, const std::string& folder);
  // What job `job` (its key) resumes from: its own folder's checkpoint, else an empty state.
  ResumeState& ResumeFor(const std::string& job);
  void AddAdmissionMetrics(metrics::Registry& registry);
  void ArmLiveness();

  boost::asio::io_context& context_;
  const ServerOptions& options_;
  std::vector<std::unique_ptr<ServerCore>>& cores_;
  std::function<void()> on_job_end_;
  std::unique_ptr<transport::SocketListener> listener_;
  std::map<std::uint64_t, SessionPtr> sessions_;
  std::uint64_t next_session_id_ = 1;
  std::uint64_t refused_for_connections_ = 0;  // since the last log line about it
  std::chrono::steady_clock::time_point last_refusal_log_{};
  bool stopping_ = false;  // Stop(): sessions end without stalling their jobs

  std::map<std::string, std::shared_ptr<Job>> jobs_;  // forming or running, by name
  StalledNames stalled_names_;  // elastic jobs that stalled lately: no new job under their name
  std::uint64_t jobs_created_ = 0;
  std::uint64_t charged_bytes_ = 0;  // formed jobs' memory charges (--memory-budget-bytes)
  std::set<std::uint64_t> charged_jobs_;  // by id: the jobs charged_bytes_ counts
  // Forming jobs by their first Hello's address (--max-forming-jobs-per-source).
  std::map<std::uint64_t, std::string> forming_source_;
  std::map<std::string, std::uint32_t> forming_by_source_;
  JobCounters counters_;
  // Exported only (AddMetrics): lifetime counts.
  std::uint64_t hellos_refused_ = 0, jobs_refused_for_memory_ = 0;
  // Peers flooding the control port must not flood the log: bad frames and refused Hellos are
  // logged a few per interval, the rest counted (phubd_hellos_refused_total has them all).
  LogLimiter bad_frame_log_, refusal_log_, pending_log_, token_file_log_;
  // Control connections not yet in a job (pending_connections.h), and how fast each source may
  // fail its token (refusal_pacer.h).
  PendingConnections pending_;
  RefusalPacer pacer_;
  std::uint64_t refused_pending_ = 0, evicted_pending_ = 0, refused_remote_ = 0;
  boost::asio::steady_timer liveness_timer_;
  // --resume: by job key, what each resumes from when it forms (emptied once it has); entries
  // are never erased, so a Job may hold a reference to its own.
  std::map<std::string, ResumeState> resumes_;
  // Handlers may run after the control plane is gone during shutdown: guard them.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace phub::server
