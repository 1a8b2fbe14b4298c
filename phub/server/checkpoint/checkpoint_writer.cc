#include "phub/server/checkpoint/checkpoint_writer.h"

#include <chrono>

namespace phub::server {

CheckpointWriter::CheckpointWriter(std::string dir,
                                   std::function<void(std::function<void()>)> post)
    : dir_(std::move(dir)), post_(std::move(post)) {}

CheckpointWriter::~CheckpointWriter() { Join(); }

void CheckpointWriter::Join() {
  if (thread_.joinable()) thread_.join();
}

bool CheckpointWriter::Submit(std::shared_ptr<const JobSnapshot> snapshot, Done done) {
  if (busy_) return false;
  Join();  // the previous writer thread has finished (busy_ is false): reap it
  busy_ = true;
  thread_ = std::thread([this, snapshot = std::move(snapshot), done = std::move(done)] {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<std::string> path = WriteCheckpoint(dir_, *snapshot);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    // busy_ clears on the control thread, with the completion: a Submit there never races
    // the end of this thread's work.
    post_([this, path = std::move(path), ms, done] {
      busy_ = false;
      done(path, ms);
    });
  });
  return true;
}

StatusOr<std::string> CheckpointWriter::WriteNow(const JobSnapshot& snapshot) {
  Join();
  return WriteCheckpoint(dir_, snapshot);
}

}  // namespace phub::server
