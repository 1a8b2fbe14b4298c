#include "worker/train/reconnect.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "spdlog/spdlog.h"

namespace phub::worker {

StatusOr<Reconnector> Reconnector::Create(Model& model, Backend& backend, std::uint32_t rank,
                                          int timeout_ms, bool keep_initial, MakeTrainer make) {
  Reconnector r(model, backend);
  r.rank_ = rank;
  r.timeout_ms_ = timeout_ms;
  r.make_ = std::move(make);
  if (keep_initial && timeout_ms > 0) {
    for (Parameter* p : model.parameters()) {
      PHUB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(p->value.shape()));
      PHUB_RETURN_IF_ERROR(backend.CopyToHost(p->value, host));
      r.initial_.push_back(std::move(host));
    }
  }
  return r;
}

StatusOr<std::int64_t> Reconnector::Reconnect(const Status& lost, std::int64_t step,
                                              std::unique_ptr<Trainer>& trainer) {
  if (timeout_ms_ <= 0 || !absl::IsUnavailable(lost)) return lost;
  spdlog::warn("rank {} at step {}: {}; reconnecting for up to {} ms (--reconnect-timeout-ms)",
               rank_, step, lost.message(), timeout_ms_);
  trainer.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (int attempt = 1;; ++attempt) {
    // Rank 0 holds its initial weights again: a resumed job overwrites them at Init, a job
    // started over gets them from it.
    const auto params = model_->parameters();
    for (std::size_t i = 0; i < initial_.size(); ++i) {
      PHUB_RETURN_IF_ERROR(backend_->CopyFromHost(initial_[i], params[i]->value));
    }
    Status joined = [&]() -> Status {
      PHUB_ASSIGN_OR_RETURN(trainer, make_(deadline));
      return trainer->Init();
    }();
    if (joined.ok()) break;
    trainer.reset();
    // A phubd still going down, or not up yet, answers and drops us: try again until the
    // deadline. Anything else (a refusal) is final.
    if (!absl::IsUnavailable(joined) || std::chrono::steady_clock::now() >= deadline) {
      return joined;
    }
    spdlog::info("rank {}: reconnect attempt {} failed ({}); retrying", rank_, attempt,
                 joined.message());
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(250), deadline - std::chrono::steady_clock::now()));
  }
  const auto resumed = static_cast<std::int64_t>(trainer->start_iteration());
  spdlog::info("rank {} reconnected ({} so far): going on from step {}", rank_, ++reconnects_,
               resumed);
  return resumed;
}

}  // namespace phub::worker
