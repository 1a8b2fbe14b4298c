#include "phub/server/core/server_core.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::server {

ServerCore::ServerCore(keys::CoreIndex index, const CorePlace& place,
                       std::shared_ptr<transport::Device> device, const CoreLimits& limits,
                       const CorePorts& ports, const CoreMetrics& metrics)
    : index_(index),
      place_(place),
      device_(std::move(device)),
      limits_(limits),
      ports_(ports),
      metrics_(metrics),
      slot_taken_(std::max<std::uint32_t>(ports.slots, 1), false) {}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(
    keys::CoreIndex index, const CorePlace& place, std::shared_ptr<transport::Device> device,
    const CoreLimits& limits, const CorePorts& ports, const CoreMetrics& metrics,
    double pace_bytes_per_s, double top_weight) {
  if (ports.stride == 0 || ports.slots == 0) {
    return absl::InvalidArgumentError("a core's data ports need a stride and a slot");
  }
  const std::uint64_t last =
      std::uint64_t{place.port} + std::uint64_t{ports.slots - 1} * ports.stride;
  if (place.port != 0 && last > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("core ", index, ": its data ports run from ", place.port, " to ", last,
                     " (--data-port-base + core + k x --cores, k < --max-jobs), past 65535: lower "
                     "--data-port-base or --max-jobs"));
  }
  std::unique_ptr<ServerCore> core(
      new ServerCore(index, place, std::move(device), limits, ports, metrics));
  core->top_weight_ = std::max(1.0, top_weight);
  if (pace_bytes_per_s > 0) {
    // The queue's wake-ups run on a thread of their own: no job's lane may be kept waiting for
    // another's timer, and a lane may end while a wake-up is armed.
    core->pacing_loop_ = std::make_unique<transport::EventLoop>(
        absl::StrCat("core ", index, " pacing"), place.pin_core);
    core->pacing_loop_->Run([c = core.get()] {
      c->pace_timer_ = std::make_unique<boost::asio::steady_timer>(c->pacing_loop_->context());
    });
    core->sends_ = std::make_unique<SharedSendQueue>(
        FairPacing{.bytes_per_s = pace_bytes_per_s},
        [c = core.get()](std::chrono::nanoseconds delay) { c->ArmPacing(delay); });
  }
  return core;
}

void ServerCore::ArmPacing(std::chrono::nanoseconds delay) {
  // Called under the queue's lock, from any lane: only posts. One wake-up is armed at a time.
  pacing_loop_->Post([this, delay] {
    pace_timer_->expires_after(delay);
    pace_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (!ec) sends_->Wake();
    });
  });
}

ServerCore::~ServerCore() {
  std::map<std::uint64_t, std::unique_ptr<CoreLane>> lanes;
  {
    std::lock_guard lock(mu_);
    lanes.swap(lanes_);
  }
  lanes.clear();  // each lane closes its port and connections, frees its shard, joins
  if (pacing_loop_) pacing_loop_->Run([this] { pace_timer_.reset(); });
  pacing_loop_.reset();
}

std::uint16_t ServerCore::port(std::uint64_t session) const {
  std::lock_guard lock(mu_);
  CoreLane* lane = Find(session);
  return lane ? lane->port() : 0;
}

std::string ServerCore::DescribePorts() const {
  if (place_.port == 0) return "any free port";
  return absl::StrCat(place_.port, "+", ports_.stride, "k, k < ", ports_.slots);
}

CoreLane* ServerCore::Find(std::uint64_t session) const {
  auto it = lanes_.find(session);
  return it == lanes_.end() ? nullptr : it->second.get();
}

Status ServerCore::InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink,
                                double weight) {
  const std::uint64_t session = job->session;
  const LaneSite site{.index = index_,
                      .place = &place_,
                      .device = device_.get(),
                      .limits = limits_,
                      .metrics = &metrics_,
                      .sends = sends_.get(),
                      .top_weight = top_weight_};
  Status last = absl::OkStatus();
  for (std::uint32_t slot = 0; slot < slot_taken_.size(); ++slot) {
    {
      std::lock_guard lock(mu_);
      if (slot_taken_[slot]) continue;
      slot_taken_[slot] = true;
    }
    const std::uint16_t port =
        place_.port == 0 ? 0 : static_cast<std::uint16_t>(place_.port + slot * ports_.stride);
    // Built unlocked: a lane starts its thread and waits for it; Post may come meanwhile.
    auto lane = CoreLane::Create(site, slot, port, job, sink, weight);
    std::lock_guard lock(mu_);
    if (lane.ok()) {
      lanes_[session] = std::move(*lane);
      return absl::OkStatus();
    }
    slot_taken_[slot] = false;
    last = lane.status();
    // A port another program holds: the next one. Anything else refuses the job.
    if (port == 0 || !absl::IsUnavailable(last)) return last;
    spdlog::warn("{}; trying the core's next data port", last.message());
  }
  if (!last.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "core ", index_, ": no data port free for the job among ", DescribePorts(),
        " (the last: ", last.message(), "); free them, or choose another --data-port-base"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("core ", index_, ": every data port (", DescribePorts(),
                   ") serves a job already: --max-jobs is reached"));
}

ShardStats ServerCore::RemoveShard(std::uint64_t session) {
  std::unique_ptr<CoreLane> lane;
  {
    std::lock_guard lock(mu_);
    auto it = lanes_.find(session);
    if (it == lanes_.end()) return ShardStats{};
    lane = std::move(it->second);
    lanes_.erase(it);
  }
  ShardStats stats = lane->Remove();
  const std::uint32_t slot = lane->slot();
  lane.reset();  // its thread joined: its port is free again
  std::lock_guard lock(mu_);
  slot_taken_[slot] = false;
  return stats;
}

// The control plane is the only thread that removes lanes, and it is the one calling these:
// the lane found stays while the call runs.
RejoinPoint ServerCore::ForgetWorker(std::uint64_t session, std::uint32_t rank) {
  CoreLane* lane = nullptr;
  {
    std::lock_guard lock(mu_);
    lane = Find(session);
  }
  return lane ? lane->ForgetWorker(rank) : RejoinPoint{};
}

void ServerCore::ExpectRejoin(std::uint64_t session, std::uint32_t rank, std::uint64_t iteration) {
  CoreLane* lane = nullptr;
  {
    std::lock_guard lock(mu_);
    lane = Find(session);
  }
  if (lane) lane->ExpectRejoin(rank, iteration);
}

std::vector<ChunkSnapshot> ServerCore::StopAndSnapshot(std::uint64_t session) {
  CoreLane* lane = nullptr;
  {
    std::lock_guard lock(mu_);
    lane = Find(session);
  }
  return lane ? lane->StopAndSnapshot() : std::vector<ChunkSnapshot>{};
}

void ServerCore::RunOnShard(std::uint64_t session, const std::function<void(Shard&)>& fn) {
  CoreLane* lane = nullptr;
  {
    std::lock_guard lock(mu_);
    lane = Find(session);
  }
  if (lane) lane->RunOnShard(fn);
}

void ServerCore::Post(std::uint64_t session, std::function<void(Shard&)> fn) {
  // Under the lock: a lane being removed is either found (and posted to before it ends, where
  // the shard may be gone: then nothing runs) or not.
  std::lock_guard lock(mu_);
  if (CoreLane* lane = Find(session)) lane->Post(std::move(fn));
}

}  // namespace phub::server
