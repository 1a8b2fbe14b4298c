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
  done_ = std::move(done);
  result_.reset();
  const std::uint64_t generation = ++generation_;
  thread_ = std::thread([this, generation, snapshot = std::move(snapshot)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<std::string> path = WriteCheckpoint(dir_, *snapshot);
    snapshot.reset();  // its buffers go back before the completion runs
    result_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    result_ = std::move(path);
    // busy_ clears on the control thread, with the completion: a Submit there never races
    // the end of this thread's work.
    post_([this, generation] { Finish(generation); });
  });
  return true;
}

void CheckpointWriter::Finish(std::uint64_t generation) {
  // A drained write's post, maybe while a later write runs: touch nothing of it.
  if (generation != generation_ || !result_) return;
  StatusOr<std::string> path = std::move(*result_);
  result_.reset();
  busy_ = false;
  Done done = std::move(done_);
  done_ = nullptr;
  done(path, result_ms_);
}

void CheckpointWriter::Drain() {
  Join();
  Finish(generation_);
}

StatusOr<std::string> CheckpointWriter::WriteNow(const JobSnapshot& snapshot) {
  Join();
  return WriteCheckpoint(dir_, snapshot);
}

}  // namespace phub::server
