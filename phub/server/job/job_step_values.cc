// A job's hyper-parameters per iteration (docs/design.md "Hyper-parameters per iteration"): the
// ranks' StepValues checked and agreed (step_values_ledger.h), each agreed iteration's values
// posted to every core's shard, the job's wait on ranks that never send theirs, and what
// Welcomes and checkpoints say of them.
#include "absl/strings/str_cat.h"
#include "phub/client/step_values_wire.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using client::StepValuesFromProto;
using client::StepValuesToProto;

void Job::OnStepValues(const SessionPtr& session, const proto::StepValues& message) {
  if (!values_) {
    return Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                                     absl::StrCat("rank ", session->rank, " of ", log_name_,
                                                  " sent hyper-parameters for iteration ",
                                                  message.iteration(),
                                                  ", but its job steps with fixed ones"),
                                     "ask for per_iteration_values in every worker's Hello "
                                     "(PsClientOptions::per_iteration_values)"));
  }
  if (stalled_) return;  // the job cannot go on; its members are being told
  const StepValuesLedger::Outcome outcome =
      values_->Give(session->rank, message.iteration(), StepValuesFromProto(message));
  using Kind = StepValuesLedger::Outcome::Kind;
  switch (outcome.kind) {
    case Kind::kWaiting:
      return ValuesMembersChanged(std::nullopt);  // it may have agreed an earlier iteration
    case Kind::kRefused:
      spdlog::warn("{}: {}", log_name_, outcome.why);
      return Refuse(session, MakeError(proto::Error::BAD_REQUEST, outcome.why,
                                       "send each iteration's values once, before its first "
                                       "push (PsClient::StepWith)"));
    case Kind::kDisagreed:
      return Stall(absl::StrCat(outcome.why,
                                "; every worker must step with the same schedule"));
    case Kind::kAgreed:
      ValuesMembersChanged(std::nullopt);  // an earlier iteration it agreed too goes first
      return StepWithAgreed(outcome);
  }
}

void Job::StepWithAgreed(const StepValuesLedger::Outcome& outcome) {
  for (auto& core : host_.cores) {
    core->Post(spec_->session, [iteration = outcome.iteration,
                                values = outcome.values](Shard& shard) {
      shard.StepWith(iteration, values);
    });
  }
  if (awaited_ != 0 && outcome.iteration >= awaited_) {
    awaited_ = 0;
    values_timer_.cancel();
  }
  spdlog::debug("{}: iteration {} steps with {}", log_name_, outcome.iteration,
                kernels::Describe(spec_->optimizer.kind, outcome.values));
}

void Job::ValuesMembersChanged(std::optional<std::uint32_t> left) {
  if (!values_ || stalled_) return;
  for (const StepValuesLedger::Outcome& outcome :
       left ? values_->Leave(*left) : values_->Settle()) {
    StepWithAgreed(outcome);
  }
}

void Job::AwaitValues(std::uint64_t iteration) {
  if (!values_ || stalled_ || iteration <= values_->last_agreed() || awaited_ != 0) return;
  awaited_ = iteration;
  // The values usually come a moment after the pushes (another connection, another thread);
  // a rank that pushes and never sends them would hold the job for good.
  const int timeout_ms =
      deadlines().liveness_timeout_ms > 0 ? deadlines().liveness_timeout_ms : 10000;
  values_timer_.expires_after(std::chrono::milliseconds(timeout_ms));
  values_timer_.async_wait([this, alive = alive_, timeout_ms](const boost::system::error_code& ec) {
    if (ec || !*alive || ended_ || awaited_ == 0) return;
    const std::uint64_t waited = awaited_;
    awaited_ = 0;
    if (waited <= values_->last_agreed()) return;
    // Ranks still lost give theirs when they rejoin: the rejoin deadline covers them.
    if (missing_count_ > 0) return;
    Stall(absl::StrCat("iteration ", waited, "'s pushes are in, but rank(s) ",
                       values_->Missing(waited), " sent no hyper-parameters for it within ",
                       timeout_ms, " ms (a worker of a job with per-iteration values calls "
                       "StepWith before each iteration's first push)"));
  });
}

kernels::OptimizerConfig Job::OptimizerOf(std::uint64_t iteration) const {
  if (!values_) return spec_->optimizer;
  if (auto values = values_->AgreedAtOrBefore(iteration)) {
    return kernels::WithValues(spec_->optimizer, *values);
  }
  return spec_->optimizer;
}

void Job::DescribeValues(proto::Welcome& welcome, bool resumed, std::uint64_t iteration) const {
  welcome.set_per_iteration_values(values_.has_value());
  if (!values_ || !resumed) return;
  if (auto values = values_->Agreed(iteration)) {
    StepValuesToProto(iteration, *values, *welcome.mutable_resume_values());
  }
}

}  // namespace phub::server
