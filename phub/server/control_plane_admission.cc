// The control plane's gate (ControlPlane, control_plane.h): who may hold a pending connection
// (pending_connections.h's quotas, protected mode), the Challenge, a refused token's paced
// answer (refusal_pacer.h), and a new job's admission: --max-jobs, the forming jobs of one
// address, and its memory charge, taken when it forms.
#include "phub/server/control_plane.h"

#include "absl/strings/str_cat.h"
#include "phub/common/token_proof.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/admission/job_limits.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;

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
      // A copy: Drop erases the map's entry, which must not be what the session is read from.
      const SessionPtr evicted = it->second;
      if (auto suppressed = pending_log_.Allow()) {
        spdlog::warn("{} control connections without an accepted Hello "
                     "(--max-pending-connections): closing the oldest, from {}{}",
                     pending_.limits().total, evicted->peer, LogLimiter::Note(*suppressed));
      }
      Refuse(evicted,
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

std::shared_ptr<Job> ControlPlane::FindOrAdmit(const std::string& name, JobRole role,
                                               const proto::Hello& hello,
                                               const std::string& source, proto::Error& refusal) {
  if (auto it = jobs_.find(name); it != jobs_.end() && !it->second->ended()) return it->second;
  jobs_.erase(name);
  if (std::optional<proto::Error> error =
          stalled_names_.RefusalFor(name, std::chrono::steady_clock::now())) {
    refusal = *error;
    return nullptr;
  }
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

}  // namespace phub::server
