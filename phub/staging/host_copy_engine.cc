#include "phub/staging/host_copy_engine.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/common/aligned_buffer.h"

namespace phub::staging {
namespace {

// One copy's completion; waited for by HostWait and by later copies.
struct HostFence {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;

  void Finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      status = std::move(s);
    }
    cv.notify_all();
  }
  // Waits until done or `deadline`; nullopt on timeout.
  std::optional<Status> WaitUntil(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_until(lock, deadline, [this] { return done; })) return std::nullopt;
    return status;
  }
};

HostFence* StateOf(const Fence& fence) { return static_cast<HostFence*>(fence.state()); }

// One direction: copies run in enqueue order on one thread.
class Lane {
 public:
  Lane(const char* name, std::size_t limit) : name_(name), limit_(limit) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Lane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  StatusOr<Fence> Enqueue(const float* from, float* to, std::size_t n, const Fence& after) {
    if (n > 0 && (from == nullptr || to == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("copy ", name_, " of ", n,
                                                     " floats with a null ",
                                                     from == nullptr ? "source" : "destination"));
    }
    auto fence = std::make_shared<HostFence>();
    std::unique_lock<std::mutex> lock(mu_);
    // Back-pressure: the caller waits for room rather than the queue growing without bound.
    cv_.wait(lock, [this] { return stopping_ || queue_.size() < limit_; });
    if (stopping_)
      return absl::CancelledError(absl::StrCat("copy ", name_, ": the engine is closing"));
    queue_.push_back({from, to, n, after, fence});
    lock.unlock();
    cv_.notify_all();
    return Fence(fence);
  }

 private:
  struct Copy {
    const float* from;
    float* to;
    std::size_t n;
    Fence after;
    std::shared_ptr<HostFence> done;
  };

  void Run() {
    while (true) {
      Copy copy;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        copy = std::move(queue_.front());
        queue_.pop_front();
      }
      cv_.notify_all();  // room for a blocked Enqueue
      Status status;
      if (HostFence* after = StateOf(copy.after); after != nullptr) {
        // An earlier copy of this engine: it finishes, since lanes never wait on later work.
        status = *after->WaitUntil(std::chrono::steady_clock::time_point::max());
      }
      if (status.ok() && copy.n > 0 && copy.from != copy.to) {
        std::memcpy(copy.to, copy.from, copy.n * sizeof(float));
      }
      copy.done->Finish(std::move(status));  // a failed predecessor fails this copy too
    }
  }

  const char* name_;
  const std::size_t limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

class HostCopyEngine final : public CopyEngine {
 public:
  explicit HostCopyEngine(const HostCopyEngineOptions& o)
      : separate_(o.separate_device),
        to_host_("to host", o.max_in_flight),
        to_device_("to device", o.max_in_flight) {}

  std::string Describe() const override {
    return separate_ ? "host memcpy (staged)" : "host memcpy";
  }
  bool DeviceIsHost() const override { return !separate_; }

  StatusOr<StagingBuffer> AllocateStaging(std::size_t floats) override {
    auto buffer = std::make_shared<AlignedBuffer>(floats);
    return StagingBuffer(buffer->span(), buffer);
  }
  StatusOr<Fence> Record(Stream) override { return Fence(); }  // the caller's work is done
  StatusOr<Fence> ToHost(const float* device, float* host, std::size_t n,
                         const Fence& after) override {
    return to_host_.Enqueue(device, host, n, after);
  }
  StatusOr<Fence> ToDevice(const float* host, float* device, std::size_t n,
                           const Fence& after) override {
    return to_device_.Enqueue(host, device, n, after);
  }
  Status HostWait(const Fence& fence, std::chrono::milliseconds timeout) override {
    HostFence* state = StateOf(fence);
    if (state == nullptr) return absl::OkStatus();
    auto result = state->WaitUntil(std::chrono::steady_clock::now() + timeout);
    if (!result) {
      return absl::DeadlineExceededError(
          absl::StrCat("a host copy did not finish in ", timeout.count(), " ms"));
    }
    return *result;
  }
  // The host has no streams: a consumer that calls after HostWait has what it waited for.
  Status StreamWait(Stream, const Fence& fence) override {
    HostFence* state = StateOf(fence);
    return state == nullptr ? absl::OkStatus()
                            : *state->WaitUntil(std::chrono::steady_clock::time_point::max());
  }

 private:
  const bool separate_;
  Lane to_host_, to_device_;
};

}  // namespace

StatusOr<std::unique_ptr<CopyEngine>> MakeHostCopyEngine(HostCopyEngineOptions options) {
  if (options.max_in_flight == 0) {
    return absl::InvalidArgumentError("host copy engine: max_in_flight is 0; it must be >= 1");
  }
  return std::unique_ptr<CopyEngine>(new HostCopyEngine(options));
}

}  // namespace phub::staging
