// A job's checkpoints (docs/operations.md "Checkpoints"): its writer thread and directory, the
// chunks' copies gathered from the cores every --checkpoint-every iterations and handed to the
// writer, and the checkpoint written on SIGTERM before phubd stops. --resume is loaded by the
// control plane; the job's start hands the shards what they resume from (job_start.cc).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/checkpoint/snapshot_buffers.h"
#include "phub/server/job/job.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;

std::unique_ptr<CheckpointWriter> Job::MakeCheckpointWriter() {
  // The job named "default" (single-tenant phubd) writes where phubd always did.
  std::filesystem::path dir = options().checkpoint.dir;
  if (name_ != "default") dir /= name_;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    ++host_.counters.checkpoint_failures;
    spdlog::error("{}: cannot create checkpoint directory {}: {}; the job is refused (give "
                  "phubd a writable --checkpoint-dir)",
                  log_name_, dir.string(), ec.message());
    return nullptr;
  }
  return std::make_unique<CheckpointWriter>(
      dir.string(), [io = &host_.io, alive = alive_](std::function<void()> done) {
        asio::post(*io, [alive, done = std::move(done)] {
          if (*alive) done();
        });
      });
}

// A job that would start afresh under --resume although a checkpoint of its model waits in
// another job's folder (the workers' job name changed: a new Slurm or torchrun id, --job given
// or dropped) must not silently lose the progress: it is refused, naming the folder.
std::optional<proto::Error> Job::CheckNotResumedElsewhere(const proto::Hello& hello) const {
  const std::string& dir = options().checkpoint.resume_dir;
  if (dir.empty()) return std::nullopt;
  for (const auto& [job, state] : host_.resumes) {
    if (!state.snapshot || job == name_) continue;
    const JobSnapshot& s = *state.snapshot;
    if (s.world_size != hello.world_size() ||
        s.tensors.size() != static_cast<std::size_t>(hello.tensors_size())) {
      continue;
    }
    bool same = true;
    for (int t = 0; t < hello.tensors_size() && same; ++t) {
      same = s.tensors[t].name == hello.tensors(t).name() &&
             s.tensors[t].elements == hello.tensors(t).elements();
    }
    if (!same) continue;
    const std::string own = name_ == "default" ? dir : (std::filesystem::path(dir) / name_).string();
    return MakeError(
        proto::Error::BAD_REQUEST,
        absl::StrCat(log_name_, " has no checkpoint in ", own, " and would start afresh, but ",
                     state.path, " (job '", job, "', iteration ", state.iteration,
                     ") is of its model"),
        absl::StrCat("run the workers as job '", job, "' (phub-worker --job), or move that "
                     "folder to ", own, "; to start afresh, remove it or drop --resume"));
  }
  return std::nullopt;
}

std::shared_ptr<JobSnapshot> Job::SnapshotHeader(std::uint64_t iteration) const {
  auto snapshot = std::make_shared<JobSnapshot>();
  snapshot->tensors = spec_->table.tensors();
  snapshot->chunk_bytes = spec_->table.chunk_bytes();
  snapshot->world_size = spec_->world_size;
  snapshot->optimizer = OptimizerOf(iteration);
  snapshot->chunks.resize(spec_->table.chunks().size());
  return snapshot;
}

void Job::OnSnapshot(const ShardEvent& event) {
  if (!checkpoints_ || !spec_) return;
  if (event.iteration != gathering_.iteration) {
    if (gathering_.iteration != 0) {
      spdlog::warn("{}: checkpoint of iteration {} abandoned: a core copied iteration {} first",
                   log_name_, gathering_.iteration, event.iteration);
    }
    // The chunks' buffers go back to the job's pool when the writer is done with them.
    gathering_.snapshot =
        SnapshotBuffers::Recycling(spec_->snapshot_buffers,
                                   std::move(*SnapshotHeader(event.iteration)));
    gathering_.snapshot->batches_before = event.batches_before;
    gathering_.iteration = event.iteration;
    gathering_.cores = 0;
    gathering_.pause_ms = 0;
  }
  for (ChunkSnapshot& chunk : *event.chunks) {
    gathering_.snapshot->chunks[chunk.chunk] = std::move(chunk);
  }
  // The cores copy in parallel: the longest any of them paused is the job's pause.
  gathering_.pause_ms = std::max(gathering_.pause_ms, event.pause_ms);
  std::uint32_t cores_with_chunks = 0;
  for (auto& core : host_.cores) {
    if (!spec_->table.chunks_on_core(core->index()).empty()) ++cores_with_chunks;
  }
  if (++gathering_.cores < cores_with_chunks) return;
  std::shared_ptr<const JobSnapshot> snapshot = std::move(gathering_.snapshot);
  const std::uint64_t iteration = gathering_.iteration;
  const double pause_ms = gathering_.pause_ms;
  gathering_.iteration = 0;
  SubmitCheckpoint(std::move(snapshot), iteration, pause_ms);
}

// A checkpoint due while the previous one is still being written is not dropped ("recovery
// without holes": the job's last checkpoint in particular must reach the disk, or a restart
// replays more than --checkpoint-every, and PBoxes over racks may disagree on the iteration).
void Job::SubmitCheckpoint(std::shared_ptr<const JobSnapshot> snapshot, std::uint64_t iteration,
                           double pause_ms) {
  if (checkpoints_->busy()) {
    if (pending_checkpoint_.snapshot) {
      spdlog::warn("{}: checkpoint of iteration {} replaced by iteration {} before the writer "
                   "was free (writing is slower than --checkpoint-every; raise it)",
                   log_name_, pending_checkpoint_.iteration, iteration);
    }
    pending_checkpoint_ = {std::move(snapshot), iteration, pause_ms};
    return;
  }
  const bool started = checkpoints_->Submit(
      // Posted to this thread only while the job lives (the writer's `post`).
      snapshot, [this, iteration, pause_ms](const StatusOr<std::string>& path, double write_ms) {
        if (!path.ok()) {
          ++host_.counters.checkpoint_failures;
          spdlog::error("{}: checkpoint of iteration {} in {} failed: {}; the previous one is "
                        "kept (phub_checkpoint_failures_total counts these)",
                        log_name_, iteration, checkpoints_ ? checkpoints_->dir() : "?",
                        path.status().message());
        } else {
          ++host_.counters.checkpoints_written;
          spdlog::info("{}: checkpoint of iteration {} written to {} in {:.0f} ms; the cores "
                       "paused {:.2f} ms for it",
                       log_name_, iteration, *path, write_ms, pause_ms);
        }
        // The one that fell due meanwhile, now.
        if (pending_checkpoint_.snapshot && checkpoints_) {
          PendingCheckpoint next = std::move(pending_checkpoint_);
          pending_checkpoint_ = {};
          SubmitCheckpoint(std::move(next.snapshot), next.iteration, next.pause_ms);
        }
      });
  (void)started;  // not busy: it started
}

void Job::FlushPendingCheckpoint() {
  if (!checkpoints_) return;
  // The write in progress finishes first, and is logged now (its posted completion might run
  // after the job is gone). Its completion submits a checkpoint waiting: written at once, and
  // drained too.
  checkpoints_->Drain();
  checkpoints_->Drain();
  if (!pending_checkpoint_.snapshot) return;
  PendingCheckpoint last = std::move(pending_checkpoint_);
  pending_checkpoint_ = {};
  // Waits for the write in progress, then writes on this thread: the job is ending.
  StatusOr<std::string> path = checkpoints_->WriteNow(*last.snapshot);
  if (!path.ok()) {
    ++host_.counters.checkpoint_failures;
    spdlog::error("{}: checkpoint of iteration {} in {} failed: {}; the previous one is kept "
                  "(phub_checkpoint_failures_total counts these)",
                  log_name_, last.iteration, checkpoints_->dir(), path.status().message());
    return;
  }
  ++host_.counters.checkpoints_written;
  spdlog::info("{}: checkpoint of iteration {} written to {} as the job ended; the cores "
               "paused {:.2f} ms for it",
               log_name_, last.iteration, *path, last.pause_ms);
}

Status Job::CheckpointNow() {
  if (!checkpoints_ || !running_ || !spec_) return absl::OkStatus();
  pending_checkpoint_ = {};  // this one is newer
  std::shared_ptr<JobSnapshot> snapshot = SnapshotHeader(0);  // its iteration is known below
  // The data plane stops first, so that no chunk moves on while the others are copied.
  for (auto& core : host_.cores) {
    for (ChunkSnapshot& chunk : core->StopAndSnapshot(spec_->session)) {
      snapshot->chunks[chunk.chunk] = std::move(chunk);
    }
  }
  std::uint64_t low = UINT64_MAX;
  for (const ChunkSnapshot& chunk : snapshot->chunks) low = std::min(low, chunk.iteration);
  if (snapshot->chunks.empty() || low == 0) {
    spdlog::info("{}: no checkpoint on stop: the job has not completed an iteration", log_name_);
    return absl::OkStatus();
  }
  const std::uint64_t iteration = low - std::min(low, steps_offset_);  // the job's
  snapshot->optimizer = OptimizerOf(iteration);
  if (!elastic_.enabled) {
    snapshot->batches_before = iteration * world_size_;
  } else if (elastic_.schedule.At(iteration + 1) != nullptr) {
    snapshot->batches_before = elastic_.schedule.MemberIterationsBefore(iteration + 1);
  }
  StatusOr<std::string> path = checkpoints_->WriteNow(*snapshot);
  if (!path.ok()) {
    ++host_.counters.checkpoint_failures;
    const std::string what =
        absl::StrCat(log_name_, ": checkpoint on stop (iteration ", low, ") in ",
                     checkpoints_->dir(), " failed: ", path.status().message());
    spdlog::error("{}; phubd will exit 1: restart it with --resume on an older checkpoint, or "
                  "the job starts afresh",
                  what);
    return absl::DataLossError(what);
  }
  ++host_.counters.checkpoints_written;
  spdlog::info("{}: checkpoint on stop written to {} (iteration {})", log_name_, *path, low);
  return absl::OkStatus();
}

}  // namespace phub::server
