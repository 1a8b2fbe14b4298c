// Writes phubd's checkpoints off the control plane's thread, one at a time: the cores copy
// their chunks (the only pause they see) and go on; the file is written, fsynced and renamed
// here (checkpoint_file.h). One write at a time: Submit refuses while one is in progress. The
// Job keeps a checkpoint that falls due meanwhile and submits it when this one is done (a newer
// one replaces it; the job's end writes it with WriteNow), so none is silently lost and memory
// stays bounded at two snapshots: job_checkpoints.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "phub/common/status.h"
#include "phub/server/checkpoint/checkpoint_file.h"

namespace phub::server {

class CheckpointWriter {
 public:
  // `post` runs a completion on the caller's thread (the control plane's io_context).
  using Done = std::function<void(const StatusOr<std::string>& path, double write_ms)>;
  CheckpointWriter(std::string dir, std::function<void(std::function<void()>)> post);
  ~CheckpointWriter();  // waits for a write in progress

  const std::string& dir() const { return dir_; }
  bool busy() const { return busy_; }
  // Starts writing `snapshot`; `done` is posted when it is on disk (or failed). False, and
  // nothing done, while another write is in progress.
  bool Submit(std::shared_ptr<const JobSnapshot> snapshot, Done done);
  // Waits for a write in progress to finish and runs its `done` now (on the calling thread,
  // the control plane's), if it has not run yet: the job's end, so that nothing about its
  // last checkpoint is left to a posted completion.
  void Drain();
  // Waits for a write in progress, then writes `snapshot` on the calling thread.
  StatusOr<std::string> WriteNow(const JobSnapshot& snapshot);

 private:
  void Join();
  // Runs write `generation`'s `done` once (posted by the writer thread, or from Drain); a
  // post of an earlier write, already drained, does nothing.
  void Finish(std::uint64_t generation);

  std::string dir_;
  std::function<void(std::function<void()>)> post_;
  std::atomic<bool> busy_{false};
  std::thread thread_;
  // The write's outcome, set by the writer thread before it posts Finish (read after the post
  // or a join) and consumed on the control thread.
  std::optional<StatusOr<std::string>> result_;
  double result_ms_ = 0;
  Done done_;
  std::uint64_t generation_ = 0;  // of the last Submit; control thread only
};

}  // namespace phub::server
