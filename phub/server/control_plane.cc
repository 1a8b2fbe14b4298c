#include "phub/server/control_plane.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <new>
#include <random>

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/plain_name.h"
#include "phub/common/token_proof.h"
#include "phub/common/version.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/initial_weights.h"
#include "phub/server/admission/job_limits.h"
#include "phub/server/admission/job_tokens.h"
#include "phub/transport/control_channel.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;
using transport::AsyncReadControlMessage;
using transport::FrameControlMessage;

namespace {

// How long a refused peer gets to read its Error before the connection is closed anyway.
constexpr std::chrono::milliseconds kFarewellTimeout{1000};
// At most one log line per this interval about connections refused for --max-connections.
constexpr std::chrono::seconds kRefusalLogInterval{10};


std::string KindOf(const proto::ControlMessage& message) {
  switch (message.body_case()) {
    case proto::ControlMessage::kHello: return "Hello";
    case proto::ControlMessage::kWelcome: return "Welcome";
    case proto::ControlMessage::kError: return "Error";
    case proto::ControlMessage::kGoodbye: return "Goodbye";
    case proto::ControlMessage::kVerbsEndpoint: return "VerbsEndpoint";
    case proto::ControlMessage::kHeartbeat: return "Heartbeat";
    case proto::ControlMessage::kNotice: return "Notice";
    case proto::ControlMessage::BODY_NOT_SET: return "an empty message";
  }
  return "an unknown message";
}

proto::Error Unexpected(const proto::ControlMessage& message, const std::string& when) {
  return MakeError(proto::Error::BAD_REQUEST,
                   absl::StrCat("unexpected ", KindOf(message), " ", when),
                   "connect with PsClient: one Hello per control connection, then only Goodbye");
}

}  // namespace

ControlPlane::ControlPlane(asio::io_context& context, const ServerOptions& options,
                           std::vector<std::unique_ptr<ServerCore>>& cores,
                           std::function<void()> on_job_end)
    : context_(context),
      options_(options),
      cores_(cores),
      on_job_end_(std::move(on_job_end)),
      pending_(options.control.pending),
      liveness_timer_(context) {}

ControlPlane::~ControlPlane() {
  *alive_ = false;
  // Jobs hold their members' sessions and the sessions their jobs: break the cycles.
  for (auto& [id, session] : sessions_) session->job.reset();
  jobs_.clear();
}

Status ControlPlane::Start() {
  PHUB_ASSIGN_OR_RETURN(listener_, transport::SocketListener::Bind(
                                       context_, options_.cores.listen_address, options_.port,
                                       options_.data_plane.tcp));
  listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
  ArmLiveness();
  return absl::OkStatus();
}

void ControlPlane::Stop() {
  if (stopping_) return;  // ending a job below may call back here (--one-job)
  stopping_ = true;
  if (listener_) listener_->Stop();
  liveness_timer_.cancel();
  auto sessions = sessions_;
  for (auto& [id, session] : sessions) Drop(session, absl::CancelledError("phubd is stopping"));
  auto jobs = jobs_;
  for (auto& [name, job] : jobs) job->EndIfRunning();
}

bool ControlPlane::CheckpointBeforeStop() {
  bool all_written = true;
  for (auto& [name, job] : jobs_) all_written &= job->CheckpointNow().ok();
  return all_written;
}

void ControlPlane::ArmLiveness() {
  const int timeout_ms = options_.jobs.deadlines.liveness_timeout_ms;
  if (timeout_ms <= 0 || stopping_) return;
  liveness_timer_.expires_after(std::chrono::milliseconds(std::max(1, timeout_ms / 4)));
  liveness_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    const auto now = std::chrono::steady_clock::now();
    auto jobs = jobs_;
    for (auto& [name, job] : jobs) job->CheckLiveness(now);
    ArmLiveness();
  });
}

void ControlPlane::OnAccept(asio::ip::tcp::socket socket) {
  const ControlLimits& limits = options_.control;
  if (sessions_.size() >= limits.max_connections) {
    // Closed at once (the socket goes out of scope): a flood of idle connections costs one
    // descriptor for a moment each, and a log line per interval, not one each.
    ++refused_for_connections_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ >= kRefusalLogInterval) {
      spdlog::warn("refused {} control connection(s): {} are open, the limit is {} "
                   "(--max-connections)",
                   refused_for_connections_, sessions_.size(), limits.max_connections);
      refused_for_connections_ = 0;
      last_refusal_log_ = now;
    }
    return;
  }
  auto session = std::make_shared<Session>(std::move(socket), context_);
  session->id = next_session_id_++;
  boost::system::error_code ec;
  auto endpoint = session->socket.remote_endpoint(ec);
  session->source = ec ? "unknown" : endpoint.address().to_string();
  session->peer = ec ? "unknown peer" : absl::StrCat(session->source, ":", endpoint.port());
  session->decoder = std::make_shared<transport::ControlFrameDecoder>(
      transport::ControlFrameLimits{.max_frame_bytes = limits.max_control_frame_bytes,
                                         .max_tensors = options_.admission.limits.max_tensors});
  if (!AdmitPending(session, !ec && endpoint.address().is_loopback())) return;
  session->deadline.expires_after(std::chrono::milliseconds(limits.hello_timeout_ms));
  session->deadline.async_wait([this, weak = std::weak_ptr<Session>(session),
                                alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    auto s = weak.lock();
    if (!s || s->state != SessionState::kAwaitingHello) return;
    Refuse(s, MakeError(proto::Error::TIMEOUT,
                        absl::StrCat("no Hello within ", options_.control.hello_timeout_ms,
                                     " ms of connecting"),
                        "send the Hello right after connecting (PsClient does); on a slow "
                        "network raise phubd's --hello-timeout-ms"));
  });
  ReadNext(session);
}

bool ControlPlane::AdmitPending(const SessionPtr& session, bool loopback) {
  const SharingOptions& sharing = options_.admission.sharing;
  const bool no_token = sharing.job_token.empty() && sharing.job_tokens_dir.empty();
  if (no_token && !loopback && !sharing.allow_remote_without_token) {
    ++refused_remote_;
    if (auto suppressed = pending_log_.Allow()) {
      spdlog::warn("refused a control connection from {}: phubd has no token and serves only "
                   "this machine (give --token-file or --job-tokens){}",
                   session->peer, LogLimiter::Note(*suppressed));
    }
    Refuse(session, MakeError(proto::Error::BAD_TOKEN,
                              "phubd runs without a job token and serves only workers on its own "
                              "machine",
                              "start phubd with --token-file (or --job-tokens) and give the "
                              "workers the token; --allow-remote-without-token lets anyone in"));
    return false;
  }
  const PendingConnections::Admission admission = pending_.Admit(session->source, session->id);
  if (!admission.admitted) {
    // Closed at once, without a word: the source already waits on its whole quota.
    ++refused_pending_;
    if (auto suppressed = pending_log_.Allow()) {
      spdlog::warn("closed a control connection from {}: it has {} connections without an "
                   "accepted Hello, the limit per address (--max-pending-per-source){}",
                   session->peer, pending_.of_source(session->source),
                   LogLimiter::Note(*suppressed));
    }
    CloseSessionSocket(*session);
    return false;
  }
  sessions_[session->id] = session;
  if (admission.evict) {
    ++evicted_pending_;
    if (auto it = sessions_.find(*admission.evict); it != sessions_.end()) {
      if (auto suppressed = pending_log_.Allow()) {
        spdlog::warn("{} control connections without an accepted Hello "
                     "(--max-pending-connections): closing the oldest, from {}{}",
                     pending_.limits().total, it->second->peer, LogLimiter::Note(*suppressed));
      }
      Refuse(it->second,
             MakeError(proto::Error::LIMIT_EXCEEDED,
                       "phubd closed this connection, the oldest of its connections without an "
                       "accepted Hello, for a newer one (--max-pending-connections)",
                       "send the Hello right after the Challenge (PsClient does) and connect "
                       "again; the operator may raise --max-pending-connections"));
    }
  }
  StatusOr<std::string> nonce = NewChallengeNonce();
  if (!nonce.ok()) {
    spdlog::error("control connection from {}: {}", session->peer, nonce.status().message());
    Drop(session, nonce.status());
    return false;
  }
  session->nonce = *std::move(nonce);
  proto::ControlMessage challenge;
  challenge.mutable_challenge()->set_nonce(session->nonce);
  SendControl(session, challenge);
  return true;
}

void ControlPlane::RefuseToken(const SessionPtr& session, const proto::Error& error) {
  // Counted from the Hello's arrival (last_heard), whatever the checks cost: the answer's
  // timing is the source's record, not what the job is.
  const auto delay = pacer_.Fail(session->source, session->last_heard);
  session->deadline.cancel();
  session->deadline.expires_at(session->last_heard + delay);
  session->deadline.async_wait([this, session, error, alive = alive_](
                                   const boost::system::error_code& ec) {
    if (!*alive || ec || session->state != SessionState::kAwaitingHello) return;
    Refuse(session, error);
  });
}

void ControlPlane::ReadNext(const SessionPtr& session) {
  AsyncReadControlMessage(
      session->socket, session->decoder,
      [this, session, alive = alive_](StatusOr<proto::ControlMessage> m) {
        if (!*alive || session->state == SessionState::kClosed) return;
        if (m.ok()) return OnMessage(session, std::move(*m));
        if (!absl::IsInvalidArgument(m.status())) return Drop(session, m.status());
        // The peer sent a frame over a limit (the message names it and its flag) or garbage.
        const auto& limits = session->decoder->limits();
        const std::string what(m.status().message());
        const bool over_limit = absl::StrContains(what, limits.frame_flag) ||
                                absl::StrContains(what, limits.tensors_flag);
        if (auto suppressed = bad_frame_log_.Allow()) {
          spdlog::warn("control connection from {}: {}{}", session->peer, Bounded(what, 400),
                       LogLimiter::Note(*suppressed));
        }
        Refuse(session,
               MakeError(over_limit ? proto::Error::LIMIT_EXCEEDED : proto::Error::BAD_REQUEST,
                         what,
                         over_limit ? "raise the flag the message names, if the model is real"
                                    : "connect with PsClient (a PHub control connection)"));
      });
}

void ControlPlane::OnMessage(const SessionPtr& session, proto::ControlMessage message) {
  session->last_heard = std::chrono::steady_clock::now();
  switch (session->state) {
    case SessionState::kAwaitingHello:
      if (message.has_hello()) return OnHello(session, message.hello());
      return Refuse(session, Unexpected(message, "before the Hello"));
    case SessionState::kJoined:
      // One Hello per connection; anything else while the job forms gives the rank back.
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " while its job forms")));
    case SessionState::kInJob:
      if (message.has_goodbye()) {
        spdlog::info("job '{}': rank {} says goodbye after {} iterations",
                     session->job ? session->job->name() : "?", session->rank,
                     message.goodbye().iterations());
        if (session->job) session->job->OnGoodbye(session);
        return Drop(session, absl::OkStatus());
      }
      if (message.has_heartbeat()) return ReadNext(session);  // last_heard is all it is for
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " in a running job")));
    case SessionState::kLeaving:
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " after its Goodbye")));
    case SessionState::kClosed:
      return;
  }
}

void ControlPlane::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  const auto refuse = [&](const proto::Error& error) {
    if (auto suppressed = refusal_log_.Allow()) {
      spdlog::warn("refusing a worker from {}: {}{}", session->peer, Bounded(error.message(), 1024),
                   LogLimiter::Note(*suppressed));
    }
    Refuse(session, error);
  };
  StatusOr<std::string> name = JobName(hello.job());
  if (!name.ok()) {
    return refuse(MakeError(proto::Error::BAD_REQUEST, std::string(name.status().message()),
                            "give every worker of the job such a name (phub-worker --job)"));
  }
  // The token first, before anything about the job is said or held: a peer without it learns
  // nothing of the job (not even whether it exists) and can change nothing of it.
  const SharingOptions& sharing = options_.admission.sharing;
  StatusOr<std::string> token = ExpectedToken(sharing, *name);
  if (!token.ok() && !absl::IsNotFound(token.status())) {
    // The operator's file is wrong (empty, a directory, too big): say so to the operator, and
    // to the worker only what any refused worker hears.
    if (auto suppressed = token_file_log_.Allow()) {
      spdlog::error("job '{}': {}; its workers are refused until the file holds a token{}",
                    *name, token.status().message(), LogLimiter::Note(*suppressed));
    }
  }
  if (!token.ok() || !ProofMatches(hello.token_proof(), *token, session->nonce, hello.job())) {
    if (auto suppressed = refusal_log_.Allow()) {
      spdlog::warn("refusing a worker from {}: no valid token for job '{}'{}", session->peer,
                   *name, LogLimiter::Note(*suppressed));
    }
    return RefuseToken(session, MakeError(
        proto::Error::BAD_TOKEN,
        absl::StrCat("the token for job '", *name, "' does not match phubd's",
                     sharing.job_tokens_dir.empty() ? "" : " (--job-tokens)"),
        sharing.job_tokens_dir.empty()
            ? "give the worker the same --token-file as phubd"
            : "give the worker the token file the operator issued for this job name"));
  }
  pending_.Done(session->id);  // it proved itself: no longer a stranger's connection
  proto::Error refusal;
  const JobRole role = JobRole::Of(hello);
  std::shared_ptr<Job> job =
      FindOrAdmit(role.JobKey(*name), role, hello, session->source, refusal);
  if (!job) return refuse(refusal);
  job->OnHello(session, hello);
}

std::shared_ptr<Job> ControlPlane::FindOrAdmit(const std::string& name, JobRole role,
                                               const proto::Hello& hello,
                                               const std::string& source, proto::Error& refusal) {
  if (auto it = jobs_.find(name); it != jobs_.end() && !it->second->ended()) return it->second;
  jobs_.erase(name);
  // A new job: its first Hello sets its world size and what it is charged. Both are the
  // peer's word: bounded here, before anything is allocated.
  const std::uint32_t world = hello.world_size();
  if (std::optional<proto::Error> error =
          CheckWorldSize(hello, options_.admission.limits, options_.control.max_connections)) {
    refusal = *error;
    return nullptr;
  }
  if (std::optional<proto::Error> error = CheckJobLimits(hello, options_.admission)) {
    refusal = *error;
    return nullptr;
  }
  const SharingOptions& sharing = options_.admission.sharing;
  if (jobs_.size() >= sharing.max_jobs) {
    refusal = MakeError(proto::Error::LIMIT_EXCEEDED,
                        absl::StrCat("phubd already serves ", jobs_.size(),
                                     " jobs, its limit (--max-jobs ", sharing.max_jobs, ")"),
                        "wait until a job ends, or raise phubd's --max-jobs");
    return nullptr;
  }
  // A forming job holds a --max-jobs place; one address may hold only a few of them.
  const std::uint32_t forming_limit = sharing.max_forming_jobs_per_source;
  if (auto it = forming_by_source_.find(source);
      it != forming_by_source_.end() && it->second >= forming_limit) {
    refusal = MakeError(proto::Error::LIMIT_EXCEEDED,
                        absl::StrCat(source, " already has ", it->second,
                                     " jobs forming on this phubd, its limit "
                                     "(--max-forming-jobs-per-source ",
                                     forming_limit, ")"),
                        "start the job's other workers so that those jobs form, or wait until "
                        "they time out (--form-timeout-ms)");
    return nullptr;
  }
  // The charge is taken when the job forms (ReserveMemory), not now: a job that never forms
  // must not hold the budget. Here only what could never fit is refused.
  const std::optional<std::uint64_t> charge =
      JobChargeBytes(hello, options_.admission.chunk_bytes);
  const std::uint64_t budget = sharing.memory_budget_bytes;
  if (!charge || *charge > budget) {
    ++jobs_refused_for_memory_;
    refusal = MemoryRefusal(name, charge, /*ever=*/true);
    return nullptr;
  }
  double weight = 1;
  if (auto it = sharing.job_weights.find(name); it != sharing.job_weights.end()) {
    weight = it->second;
  }
  auto job = std::make_shared<Job>(
      Job::Host{.io = context_,
                .options = options_.jobs,
                .admission = options_.admission,
                .data_plane = options_.data_plane,
                .cores = cores_,
                .sessions = *this,
                .counters = counters_,
                .resume = ResumeFor(name),
                .resumes = resumes_,
                .stopping = stopping_,
                .reserve = [this](Job& forming) { return ReserveMemory(forming); },
                .on_end = [this](Job& ended) { JobEnded(ended); }},
      name, role, ++jobs_created_, world, *charge, weight);
  jobs_[name] = job;
  forming_source_[job->id()] = source;
  ++forming_by_source_[source];
  spdlog::info("job '{}' is forming: {} workers from {}, {} bytes to charge when it forms ({} of "
               "{} held)",
               name, world, source, *charge, charged_bytes_, budget);
  return job;
}

proto::Error ControlPlane::MemoryRefusal(const std::string& name,
                                         std::optional<std::uint64_t> charge, bool ever) const {
  // The job's own need and the operator's budget: nothing of what other tenants hold.
  const std::uint64_t budget = options_.admission.sharing.memory_budget_bytes;
  return MakeError(
      proto::Error::RESOURCE_EXHAUSTED,
      absl::StrCat("job '", name, "' needs ",
                   charge ? absl::StrCat(*charge) : std::string("more than 2^64"),
                   " bytes on phubd (its model times world size + 3); ",
                   ever ? "phubd's whole memory budget is "
                        : "what is left of phubd's memory budget now is less, of ",
                   budget, " bytes (--memory-budget-bytes)"),
      ever ? "run the job on a PBox with more memory, or raise --memory-budget-bytes if the "
             "machine has it"
           : "start the job again when another ends, or run it on another PBox");
}

void ControlPlane::NoLongerForming(const Job& job) {
  auto it = forming_source_.find(job.id());
  if (it == forming_source_.end()) return;
  if (auto count = forming_by_source_.find(it->second);
      count != forming_by_source_.end() && --count->second == 0) {
    forming_by_source_.erase(count);
  }
  forming_source_.erase(it);
}

std::optional<proto::Error> ControlPlane::ReserveMemory(Job& job) {
  NoLongerForming(job);
  const std::uint64_t budget = options_.admission.sharing.memory_budget_bytes;
  if (job.charge_bytes() > budget - std::min(budget, charged_bytes_)) {
    ++jobs_refused_for_memory_;
    return MemoryRefusal(job.name(), job.charge_bytes(), /*ever=*/false);
  }
  charged_bytes_ += job.charge_bytes();
  charged_jobs_.insert(job.id());
  spdlog::info("job '{}' formed: {} bytes charged ({} of {} held)", job.name(), job.charge_bytes(),
               charged_bytes_, budget);
  return std::nullopt;
}

void ControlPlane::JobEnded(Job& job) {
  NoLongerForming(job);
  if (charged_jobs_.erase(job.id()) > 0) {
    charged_bytes_ -= std::min(charged_bytes_, job.charge_bytes());
  }
  // The name is free at once (FindOrAdmit replaces an ended job); the object goes once no
  // caller on the stack holds it. By id, not address: a new job of the same name may sit at
  // the ended one's address by then.
  asio::post(context_, [this, alive = alive_, name = job.name(), id = job.id()] {
    if (!*alive) return;
    if (auto it = jobs_.find(name); it != jobs_.end() && it->second->id() == id) {
      jobs_.erase(it);
    }
  });
  // Only a job that started has ended (--one-job); one that never formed just goes.
  if (job.started() && on_job_end_) on_job_end_();
}

namespace {

// The checkpoint folders under --resume D, by the job key that resumes each: D itself for the
// job "default", D/NAME for job NAME, D/NAME@racks for a job's home part over racks.
std::vector<std::pair<std::string, std::string>> ResumeFolders(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> folders = {{"default", dir}};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    std::string_view job = name;
    if (job.ends_with("@racks")) job.remove_suffix(6);
    // "default" is D itself; other folders are no job's (logs, a copy put aside).
    if (job == "default" || !PlainNameFault(job).empty()) continue;
    folders.emplace_back(name, entry.path().string());
  }
  std::sort(folders.begin() + 1, folders.end());
  return folders;
}

}  // namespace

Status ControlPlane::LoadResume() {
  const CheckpointOptions& options = options_.jobs.checkpoint;
  if (options.resume_dir.empty()) return absl::OkStatus();
  for (const auto& [job, folder] : ResumeFolders(options.resume_dir)) {
    PHUB_RETURN_IF_ERROR(LoadResumeFolder(job, folder));
  }
  if (resumes_.empty()) {
    // Killed before its first checkpoint (or a first start under a restart policy): the jobs
    // start afresh, and workers that reconnect start over with them.
    spdlog::warn("--resume {}: no checkpoint there nor in any job's folder in it; every job "
                 "starts afresh", options.resume_dir);
  }
  return absl::OkStatus();
}

Status ControlPlane::LoadResumeFolder(const std::string& job, const std::string& folder) {
  StatusOr<LoadedCheckpoint> newest = LoadNewestCheckpoint(folder);
  if (absl::IsNotFound(newest.status())) return absl::OkStatus();
  PHUB_RETURN_IF_ERROR(newest.status());
  LoadedCheckpoint loaded = *std::move(newest);
  const JobSnapshot& s = loaded.snapshot;
  auto mismatch = [&](const std::string& what, const std::string& flag) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: checkpoint ", loaded.path, " ",
                                                   what, ": start phubd with ", flag,
                                                   ", or without --resume"));
  };
  const std::uint32_t max_world = options_.admission.limits.max_world_size;
  if (max_world > 0 && s.world_size > max_world) {
    return mismatch(absl::StrCat("is of a job of ", s.world_size, " workers, phubd takes at most ",
                                 max_world),
                    absl::StrCat("--max-world-size ", s.world_size));
  }
  const std::uint64_t chunk_bytes = options_.admission.chunk_bytes;
  if (s.chunk_bytes != chunk_bytes) {
    return mismatch(absl::StrCat("cut the model in chunks of ", s.chunk_bytes, " bytes, phubd ",
                                 chunk_bytes),
                    absl::StrCat("--chunk-bytes ", s.chunk_bytes));
  }
  // The job's optimizer (the workers' or phubd's flags) is checked against the checkpoint's
  // when the workers say Hello (CheckResumedModel).
  std::uint64_t low = UINT64_MAX;
  for (const ChunkSnapshot& chunk : s.chunks) low = std::min(low, chunk.iteration);
  for (const ChunkSnapshot& chunk : s.chunks) {
    if (chunk.iteration > low + 1 || (chunk.iteration == low + 1 && chunk.previous.empty())) {
      return absl::DataLossError(absl::StrCat(
          "--resume: checkpoint ", loaded.path, " has chunk ", chunk.chunk, " at iteration ",
          chunk.iteration, " beside chunks at ", low,
          " without the weights to go back to: it cannot be resumed; use an older one"));
    }
  }
  ResumeState& resume = resumes_[job];
  resume.iteration = s.chunks.empty() ? 0 : low;
  resume.snapshot = std::make_shared<const JobSnapshot>(std::move(loaded.snapshot));
  resume.path = loaded.path;
  spdlog::info("job '{}': resuming from {}: iteration {}, {} tensors, {} chunks{} (when it forms)",
               job, loaded.path, resume.iteration, resume.snapshot->tensors.size(),
               resume.snapshot->chunks.size(),
               loaded.refused.empty() ? ""
                                      : absl::StrCat(" (", loaded.refused.size(),
                                                     " newer checkpoint(s) refused)"));
  return absl::OkStatus();
}

ResumeState& ControlPlane::ResumeFor(const std::string& job) {
  auto own = resumes_.find(job);
  if (own != resumes_.end() && own->second.snapshot) return own->second;
  // --resume pointed at a job's own folder (D/NAME, as before every job had its folder under
  // D): the checkpoints in D itself are that job's, not the job "default"'s.
  const std::string& dir = options_.jobs.checkpoint.resume_dir;
  auto in_dir = resumes_.find("default");
  if (job != "default" && in_dir != resumes_.end() && in_dir->second.snapshot &&
      std::filesystem::path(dir).lexically_normal().filename() == job) {
    spdlog::info("job '{}': resuming from {}: --resume {} is named for it", job,
                 in_dir->second.path, dir);
    resumes_[job] = std::move(in_dir->second);
    in_dir->second = {};
  }
  return resumes_[job];
}

// The one place a session ends, whatever its state: the job's accounting stays exact.
void ControlPlane::Drop(const SessionPtr& session, const Status& why,
                        const proto::Error* farewell) {
  if (session->state == SessionState::kClosed) return;
  const SessionState was = session->state;
  session->state = SessionState::kClosed;
  sessions_.erase(session->id);
  pending_.Done(session->id);
  session->deadline.cancel();
  if (was == SessionState::kAwaitingHello && !stopping_) ++hellos_refused_;
  if (farewell != nullptr) {
    proto::ControlMessage message;
    *message.mutable_error() = *farewell;
    session->close_when_flushed = true;
    SendControl(session, message);
    // A peer that does not read its Error does not keep the connection.
    session->deadline.expires_after(kFarewellTimeout);
    session->deadline.async_wait([session](const boost::system::error_code& ec) {
      if (!ec) CloseSessionSocket(*session);
    });
  } else {
    CloseSessionSocket(*session);
  }
  // Its job's accounting follows (the job may end here).
  if (std::shared_ptr<Job> job = std::move(session->job)) job->MemberGone(session, was, why);
}

}  // namespace phub::server
