// Writes phubd's checkpoints off the control plane's thread, one at a time: the cores copy
// their chunks (the only pause they see) and go on; the file is written, fsynced and renamed
// here (checkpoint_file.h). A checkpoint due while the previous one is still being written is
// skipped, not queued: memory stays bounded at one snapshot in flight.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
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
  // Waits for a write in progress, then writes `snapshot` on the calling thread.
  StatusOr<std::string> WriteNow(const JobSnapshot& snapshot);

 private:
  void Join();

  std::string dir_;
  std::function<void(std::function<void()>)> post_;
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

}  // namespace phub::server
