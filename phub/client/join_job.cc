#include "phub/client/join_job.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "phub/client/step_values_wire.h"
#include "phub/common/token_proof.h"
#include "phub/common/version.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/transport/control_channel.h"
#include "phub/transport/socket_options.h"
#include "spdlog/spdlog.h"

namespace phub::client {

int WithinDeadline(const PsClientOptions& options, int timeout_ms) {
  if (!options.deadline) return timeout_ms;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      *options.deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, timeout_ms));
}

namespace {

// phubd said nothing for `waited_ms` while this worker waited for `what`: an error that says
// where, how long, what to check, and which bound it was.
Status SilentPhubd(const PsClientOptions& options, const Membership& membership,
                   const std::string& what, int waited_ms, bool caller_deadline,
                   std::chrono::milliseconds since_hello) {
  const std::string where = absl::StrCat("phubd at ", options.host, ":", options.port);
  const std::string who = absl::StrCat("rank ", membership.rank, " of job '",
                                       options.job.empty() ? "default" : options.job, "'");
  const std::string hello =
      since_hello.count() >= 0 ? absl::StrCat(", ", since_hello.count(), " ms after the Hello")
                               : "";
  if (caller_deadline) {
    return absl::UnavailableError(absl::StrCat(
        "nothing heard from ", where, " for the last ", waited_ms, " ms before this connect's "
        "deadline while ", who, " waited for ", what, hello, ": is phubd stopped (SIGSTOP), "
        "hung or overloaded? Check its process and its log; the deadline is the caller's "
        "(phub-worker: --reconnect-timeout-ms)"));
  }
  return absl::UnavailableError(absl::StrCat(
      "nothing heard from ", where, " for ", waited_ms, " ms (--hello-answer-timeout-ms) while ",
      who, " waited for ", what, hello, ": is phubd stopped (SIGSTOP), hung or overloaded? "
      "Check its process and its log. (phubd answers at once and, while the job forms, every "
      "quarter of that bound; one older than this worker is silent until the job forms: update "
      "it, or raise --hello-answer-timeout-ms past the forming time.)"));
}

// The nonce of phubd's Challenge, or phubd's refusal (its Error: over a quota, or a phubd that
// serves only its own machine) as an error that says so.
StatusOr<std::string> ReadChallenge(boost::asio::ip::tcp::socket& control,
                                    const PsClientOptions& options, const Membership& membership) {
  const std::uint32_t rank = membership.rank;
  // A stopped phubd's kernel accepts the connection, and no Challenge comes: bounded too.
  const int silence_ms = std::max(1, options.hello_answer_timeout_ms);
  const int wait_ms = WithinDeadline(options, silence_ms);
  StatusOr<proto::ControlMessage> first =
      transport::ReadControlMessage(control, std::chrono::milliseconds(wait_ms));
  if (absl::IsDeadlineExceeded(first.status())) {
    return SilentPhubd(options, membership, "its Challenge", wait_ms, wait_ms < silence_ms,
                       std::chrono::milliseconds(-1));
  }
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat("rank ", rank, ": phubd sent no Challenge (",
                                     first.status().message(),
                                     "); a phubd older than protocol ", kProtocolVersion,
                                     " sends none: run phubd and the workers from one release"));
  }
  if (first->has_error()) {
    return absl::InvalidArgumentError(absl::StrCat("phubd refused rank ", rank, ": ",
                                                   first->error().message(), "; fix: ",
                                                   first->error().fix()));
  }
  if (!first->has_challenge() || first->challenge().nonce().size() != kChallengeNonceBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, ": phubd opened with something other than a Challenge of ",
        kChallengeNonceBytes, " bytes: is this a phubd of protocol ", kProtocolVersion, "?"));
  }
  return first->challenge().nonce();
}

// The answer to the Hello: the Welcome or an Error. Heartbeats (phubd is there, the job still
// forms) and Notices before it are skipped; each message must come within
// options.hello_answer_timeout_ms of the one before, and the last by options.deadline.
StatusOr<proto::ControlMessage> AwaitAnswer(boost::asio::ip::tcp::socket& control,
                                            const PsClientOptions& options,
                                            const Membership& membership) {
  const auto hello_sent = std::chrono::steady_clock::now();
  while (true) {
    const int silence_ms = std::max(1, options.hello_answer_timeout_ms);
    const int wait_ms = WithinDeadline(options, silence_ms);
    StatusOr<proto::ControlMessage> reply =
        transport::ReadControlMessage(control, std::chrono::milliseconds(wait_ms));
    if (reply.ok() && (reply->has_heartbeat() || reply->has_notice())) continue;
    if (!absl::IsDeadlineExceeded(reply.status())) return reply;
    const auto since_hello = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - hello_sent);
    return SilentPhubd(options, membership, "the answer to its Hello", wait_ms,
                       wait_ms < silence_ms, since_hello);
  }
}

}  // namespace

StatusOr<JoinedJob> JoinJob(boost::asio::io_context& context, const PsClientOptions& options,
                            Membership membership, const detail::RackRole& role,
                            std::vector<keys::TensorSpec> tensors,
                            boost::asio::ip::tcp::socket& control) {
  const int connect_ms = WithinDeadline(options, options.connect_timeout_ms);
  PHUB_ASSIGN_OR_RETURN(control, transport::ConnectWithRetry(
                                     context, options.host, options.port, connect_ms,
                                     {options.tcp_no_delay, options.socket_buffer_bytes}));
  // phubd speaks first: the Challenge the Hello's token proof answers (token_proof.h).
  PHUB_ASSIGN_OR_RETURN(std::string nonce, ReadChallenge(control, options, membership));
  proto::ControlMessage hello_message;
  proto::Hello& hello = *hello_message.mutable_hello();
  hello.set_protocol_version(kProtocolVersion);
  hello.set_token_proof(TokenProof(options.job_token, nonce, options.job));
  hello.set_job(options.job);
  hello.set_rank(membership.rank);
  hello.set_world_size(membership.world_size);
  hello.set_min_workers(options.min_workers);
  hello.set_lr_scaling(static_cast<proto::Hello::LrScaling>(options.lr_scaling));
  hello.set_start_workers(options.start_workers);
  hello.set_forming_heartbeat_ms(
      static_cast<std::uint32_t>(std::max(1, options.hello_answer_timeout_ms / 4)));
  if (role.racks > 1) {
    hello.set_racks(role.racks);
    hello.set_rack(role.rack);
    hello.set_rack_workers(role.rack_workers);
    // A PBox's sums end in their counts of copies and members (phub/server/shard/copy_count.h).
    hello.set_counts_copies(role.rack_workers > 0);
    if (role.rack_workers > 0) hello.set_rack_start_workers(role.rack_start);
  }
  if (options.optimizer) {
    const kernels::OptimizerConfig& c = *options.optimizer;
    proto::OptimizerSpec& spec = *hello.mutable_optimizer();
    spec.set_kind(kernels::OptimizerName(c.kind));
    spec.set_lr(c.lr);
    spec.set_momentum(c.momentum);
    spec.set_weight_decay(c.weight_decay);
    spec.set_beta1(c.beta1);
    spec.set_beta2(c.beta2);
    spec.set_eps(c.eps);
  }
  if (options.per_iteration_values) hello.set_per_iteration_values(true);
  const bool compact = options.wire.compact();
  if (compact) {
    hello.set_wire(kernels::WireFormatName(options.wire.format));
    hello.set_wire_weights(options.wire.weights);
  }
  for (const auto& t : tensors) {
    proto::TensorSpec& spec = *hello.add_tensors();
    spec.set_name(t.name);
    spec.set_elements(t.elements);
  }
  PHUB_RETURN_IF_ERROR(transport::WriteControlMessage(control, hello_message));
  spdlog::debug("rank {}: Hello sent, waiting for the other workers", membership.rank);
  PHUB_ASSIGN_OR_RETURN(proto::ControlMessage reply, AwaitAnswer(control, options, membership));
  if (reply.has_error()) {
    return absl::InvalidArgumentError(absl::StrCat("phubd refused rank ", membership.rank, ": ",
                                                   reply.error().message(), "; fix: ",
                                                   reply.error().fix()));
  }
  if (!reply.has_welcome()) {
    return absl::InvalidArgumentError("phubd answered the Hello with neither Welcome nor Error");
  }
  const proto::Welcome& welcome = reply.welcome();
  std::vector<keys::CoreIndex> owners(welcome.chunk_owner().begin(), welcome.chunk_owner().end());
  PHUB_ASSIGN_OR_RETURN(keys::KeyTable table,
                        keys::KeyTable::WithPlacement(
                            std::move(tensors), welcome.chunk_bytes(),
                            static_cast<std::uint32_t>(welcome.cores_size()), std::move(owners)));
  // Empty: a phubd from before verbs, which runs TCP.
  StatusOr<transport::TransportKind> data_plane =
      welcome.transport().empty() ? transport::TransportKind::kTcp
                                  : transport::ParseTransportKind(welcome.transport());
  if (!data_plane.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("phubd's Welcome names data plane '",
                                                   welcome.transport(), "': ",
                                                   data_plane.status().message()));
  }
  // A phubd that does not know the field answers without it: it would take the pushes for
  // float32 and refuse them one by one; say so once, here.
  const std::string asked = kernels::WireFormatName(options.wire.format);
  const std::string runs = welcome.wire().empty() ? "fp32" : welcome.wire();
  if (runs != asked || welcome.wire_weights() != (compact && options.wire.weights)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", membership.rank, " asked for --wire ", asked,
        compact ? (options.wire.weights ? " (weights too)" : " (weights fp32)") : "",
        " but phubd runs the job with ", runs, welcome.wire_weights() ? " (weights too)" : "",
        ": a phubd older than the compact wire; update phubd or use --wire fp32"));
  }
  if (welcome.per_iteration_values() != options.per_iteration_values) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", membership.rank, " asked for hyper-parameters per iteration but phubd runs the "
        "job with fixed ones: a phubd older than schedules; update phubd or use a constant "
        "schedule"));
  }
  JoinedJob job{std::move(table), welcome.weights_from_server(), welcome.session(), *data_plane,
                {}, welcome.resumed(), welcome.resume_iteration(),
                static_cast<int>(std::min<std::uint32_t>(welcome.liveness_timeout_ms(), 3600000)),
                std::nullopt};
  if (welcome.has_resume_values() && welcome.resume_values().iteration() == job.resume_iteration) {
    const kernels::StepValues values = StepValuesFromProto(welcome.resume_values());
    if (options.optimizer && kernels::ValidateStepValues(options.optimizer->kind, values).ok()) {
      job.resume_values = values;
    }
  }
  job.rank = membership.rank;
  if (options.min_workers > 0) {
    if (welcome.rank() >= membership.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "phubd's Welcome gives rank ", welcome.rank(), " in an elastic job of at most ",
          membership.world_size, " workers"));
    }
    job.rank = welcome.rank();
    job.joining = welcome.joining();
    if (!job.joining) {
      if (!welcome.has_membership()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", membership.rank, " asked for an elastic job but phubd's Welcome has no "
            "membership: a phubd older than elastic jobs; update phubd or give no --min-workers"));
      }
      job.membership = welcome.membership();
    }
    if (job.rank != membership.rank) {
      spdlog::info("rank {}: phubd gave this worker rank {} (its own was taken)", membership.rank,
                   job.rank);
    }
  } else if (job.resumed) {
    spdlog::info("rank {}: phubd resumes this worker at iteration {}", membership.rank,
                 job.resume_iteration);
  }
  for (const proto::CoreEndpoint& endpoint : welcome.cores()) {
    if (endpoint.core() != job.cores.size() || endpoint.port() == 0 || endpoint.port() > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "phubd's Welcome lists core ", endpoint.core(), " (port ", endpoint.port(),
          ") in place ", job.cores.size(), ": the cores must come in order, each with a port"));
    }
    job.cores.push_back(
        {endpoint.host(), static_cast<std::uint16_t>(endpoint.port()), endpoint.nic()});
  }
  return job;
}

}  // namespace phub::client
