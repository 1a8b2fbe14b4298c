// What phub-worker's run is made of, from its flags (phub_worker_flags.h): the compute
// backend, this worker's membership, the trainer with its exchange, and an elastic joiner's
// warm-up. phub_worker_main.cc runs the training loop with them.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "phub/common/membership.h"
#include "phub/common/status.h"
#include "worker/backend/backend.h"
#include "worker/nn/model.h"
#include "worker/phub_worker_flags.h"
#include "worker/train/trainer.h"

namespace phub::worker {

// --device: cpu (oneDNN) or cuda (cuDNN on GPU 0).
StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device, bool tf32);
// This worker's rank and world size: --rank/--world, else the --topology file's, else the
// launcher's environment (mpirun, srun), else rank 0 of 1; an elastic job's world is its
// --max-workers.
StatusOr<Membership> DecideMembership(const WorkerFlags& f);
// The trainer for --comm (none: alone). `deadline`: a reconnect's, which the whole connect must
// keep (none for the first connect).
StatusOr<std::unique_ptr<Trainer>> MakeTrainer(
    const WorkerFlags& f, Membership me, Model& model, Backend& backend,
    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
// A worker joining a running job holds the others for its first iteration (they wait for its
// copy): the backend's first step (oneDNN's or cuDNN's primitives, first touches) is taken
// before it joins, on a synthetic batch and a local optimizer. Its weights are replaced by the
// job's afterwards. Not for rank 0, whose weights start the job.
Status WarmUpBeforeJoining(const WorkerFlags& f, Model& model, Backend& backend);

}  // namespace phub::worker
