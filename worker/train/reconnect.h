// A worker that loses phubd (gone, silent past its --liveness-timeout-ms, or this worker
// dropped) connects again for up to a bounded time and goes on from the step phubd resumes it
// at: the same step after a rejoin, the checkpoint's after phubd restarted with --resume (at
// most --checkpoint-every - 1 steps back), step 0 if phubd came back without a checkpoint (the
// job starts over: rank 0 keeps its initial weights to send them again). docs/design.md
// "Recovery".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "phub/common/status.h"
#include "worker/train/trainer.h"

namespace phub::worker {

class Reconnector {
 public:
  // Connects a new trainer; its connect (control connection, Welcome, data connections)
  // must end by `deadline`, the reconnect's overall limit.
  using MakeTrainer =
      std::function<StatusOr<std::unique_ptr<Trainer>>(std::chrono::steady_clock::time_point)>;
  // `timeout_ms` <= 0: never reconnect. `keep_initial` (rank 0 of a PS job): copy the model's
  // weights now, before training changes them.
  static StatusOr<Reconnector> Create(Model& model, Backend& backend, std::uint32_t rank,
                                      int timeout_ms, bool keep_initial, MakeTrainer make);

  // `lost` ended a step. Unless it is Unavailable (and reconnecting is on), returns it as it
  // is. Otherwise replaces `trainer` by one connected and initialized again and returns the
  // step to go on from; gives up (returning the last error) after the timeout, or at once on a
  // refusal. The timeout bounds every attempt (each connect and wait for the Welcome gets
  // only what is left of it), so the whole reconnect ends within it.
  StatusOr<std::int64_t> Reconnect(const Status& lost, std::int64_t step,
                                   std::unique_ptr<Trainer>& trainer);

 private:
  Reconnector(Model& model, Backend& backend) : model_(&model), backend_(&backend) {}

  Model* model_;
  Backend* backend_;
  std::uint32_t rank_ = 0;
  int timeout_ms_ = 0;
  MakeTrainer make_;
  std::vector<Tensor> initial_;
  int reconnects_ = 0;
};

}  // namespace phub::worker
