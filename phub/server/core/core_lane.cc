#include "phub/server/core/core_lane.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace {
// CPU seconds (user + system) the calling thread has used.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A worker sends the shard only pushes and INIT (into landing zones), ATTACH and BYE: messages
// outside a zone are header-sized, so what a transport prepares for them stays small however
// many workers there are. The shard sends only its chunks' weights, from its own (registered)
// memory: few copies.
transport::ConnectionSizing ShardSizing(std::uint64_t chunk_bytes) {
  transport::ConnectionSizing sizing;
  sizing.max_send_bytes = chunk_bytes;
  sizing.max_unplaced_bytes = 1024;
  sizing.send_copies = 4;
  return sizing;
}
}  // namespace

int LaneNiceLevels(double weight, double top_weight) {
  if (!(weight > 0) || weight >= top_weight) return 0;
  const double levels = std::log(top_weight / weight) / std::log(1.25);
  return static_cast<int>(std::clamp(std::lround(levels), 0L, 19L));
}

CoreLane::CoreLane(const LaneSite& site, std::uint32_t slot, std::uint64_t session)
    : site_(site),
      slot_(slot),
      session_(session),
      router_(site.index),
      loop_(absl::StrCat("core ", site.index, " lane ", slot), site.place->pin_core) {}

StatusOr<std::unique_ptr<CoreLane>> CoreLane::Create(const LaneSite& site, std::uint32_t slot,
                                                     std::uint16_t port,
                                                     std::shared_ptr<const JobSpec> job,
                                                     Shard::EventSink sink, double weight) {
  std::unique_ptr<CoreLane> lane(new CoreLane(site, slot, job->session));
  Status status;
  lane->loop_.Run([&] {
    status = lane->Build(port, std::move(job), std::move(sink), weight);
    if (!status.ok()) lane->Teardown(status);
  });
  if (!status.ok()) {
    return Status(status.code(), absl::StrCat("core ", site.index, ": ", status.message()));
  }
  return lane;
}

Status CoreLane::Build(std::uint16_t port, std::shared_ptr<const JobSpec> job,
                       Shard::EventSink sink, double weight) {
  AssertOnLoop();  // the shard is made here: it is bound to this thread (Shard's REQUIRES)
  const keys::CoreIndex index = site_.index;
  if (const int levels = LaneNiceLevels(weight, site_.top_weight); levels > 0) {
    // This thread only (Linux: nice is per thread). Lower priority needs no privilege.
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);
    if (errno != 0 || setpriority(PRIO_PROCESS, tid, std::min(19, now + levels)) != 0) {
      spdlog::warn(
          "core {}: cannot lower a job's lane by {} nice levels for its weight {} ({}): "
          "the CPU is shared equally between jobs",
          index, levels, weight, std::strerror(errno));
    }
  }
  PHUB_ASSIGN_OR_RETURN(transport_, site_.device->Bind(loop_, site_.place->queue));
  const std::uint64_t weight_bytes = job->table.bytes_on_core(index);
  chunk_bytes_ = job->table.chunk_bytes();
  std::unique_ptr<Shard> shard;
  try {
    shard = std::make_unique<Shard>(
        std::move(job), index, std::move(sink),
        site_.metrics && site_.metrics->received_bytes ? site_.metrics : nullptr, site_.sends);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory allocating the job's slots, weights and optimizer state (",
                     weight_bytes, " bytes of weights on this core)"));
  }
  // Registered for this job's life: other jobs' registrations are not touched.
  std::uint64_t bytes = 0;
  for (std::span<std::byte> buffer : shard->Buffers()) {
    if (Status s = transport_->Register(buffer); !s.ok()) {
      for (std::span<std::byte> b : shard->Buffers()) transport_->Unregister(b);
      return s;
    }
    bytes += buffer.size();
  }
  spdlog::debug("core {}: {} bytes of shard memory registered with {}", index, bytes,
                transport_->Describe());
  router_.Add(session_, std::move(shard));
  if (site_.sends != nullptr) {
    site_.sends->AddFlow(session_, weight,
                         {.here = [this] { return loop_.on_loop_thread(); },
                          .post = [this](std::function<void()> fn) { loop_.Post(std::move(fn)); }});
    flow_added_ = true;
  }
  // Last: nobody connects before the shard is there to take them.
  PHUB_ASSIGN_OR_RETURN(acceptor_, transport_->Listen(site_.place->address, port, Hooks()));
  port_ = acceptor_->port();
  return absl::OkStatus();
}

void CoreLane::Teardown(const Status& why) {
  AssertOnLoop();
  // Its turns in the queue go first: none may start on a shard being freed.
  if (flow_added_) site_.sends->RemoveFlow(session_);
  flow_added_ = false;
  if (acceptor_) acceptor_->CloseSettingUp(absl::CancelledError("the job's data port closes"));
  acceptor_.reset();
  if (std::unique_ptr<Shard> shard = router_.Remove(session_, why)) {
    for (std::span<std::byte> buffer : shard->Buffers()) transport_->Unregister(buffer);
  }
  router_.CloseAll(why);
  transport_.reset();
}

CoreLane::~CoreLane() {
  loop_.Run([this] { Teardown(absl::CancelledError("phubd is stopping")); });
}

transport::AcceptHooks CoreLane::Hooks() {
  transport::AcceptHooks hooks;
  hooks.admit = [this](std::size_t setting_up) -> std::optional<transport::ConnectionSizing> {
    AssertOnLoop();
    if (router_.empty()) return std::nullopt;  // the job is going: its port closes
    // Set-ups in progress (verbs) hold resources before anyone can tell who they are: they are
    // bounded here; connections set up wait for their ATTACH under the quotas of `ready`.
    if (setting_up >= site_.limits.max_connections) {
      // Counted, not logged one by one.
      if (refused_++ % 1000 == 0) {
        spdlog::warn(
            "core {}: refusing data connections: {} have not attached yet, the limit "
            "is {} (--max-connections); {} refused so far",
            site_.index, setting_up, site_.limits.max_connections, refused_);
      }
      return std::nullopt;
    }
    return ShardSizing(chunk_bytes_);
  };
  // The router holds a connection until its ATTACH names the job, then hands it to the shard.
  hooks.handler_now = [this]() -> transport::ConnectionHandler* {
    AssertOnLoop();
    return &router_;
  };
  hooks.ready = [this](std::shared_ptr<transport::Connection> connection) {
    AssertOnLoop();
    // Before its ATTACH a connection is anyone's: a few per address, and at the total the
    // oldest gives way (PendingConnections' rule, over the router's own list).
    const CoreLimits& limits = site_.limits;
    const std::string address = AddressOf(connection->peer());
    if (router_.unattached_from(address) >= limits.max_per_source) {
      if (auto suppressed = pending_log_.Allow()) {
        spdlog::warn(
            "core {}: closed a data connection from {}: {} from that address have not "
            "attached yet (--max-data-pending-per-source){}",
            site_.index, connection->peer(), limits.max_per_source, LogLimiter::Note(*suppressed));
      }
      connection->Close(absl::ResourceExhaustedError("over its address's quota"));
      return;
    }
    if (router_.unattached() >= limits.max_connections) {
      if (auto suppressed = pending_log_.Allow()) {
        spdlog::warn(
            "core {}: {} data connections have not attached (--max-connections): "
            "closing the oldest for a new one{}",
            site_.index, router_.unattached(), LogLimiter::Note(*suppressed));
      }
      router_.CloseOldestUnattached(absl::ResourceExhaustedError(
          "the oldest connection without an ATTACH, closed for a newer one (--max-connections)"));
    }
    router_.Adopt(connection);
    WatchAttach(connection);
    SampleSteering(connection);
  };
  hooks.setup_timeout_ms = site_.limits.attach_timeout_ms;
  return hooks;
}

void CoreLane::WatchAttach(const std::shared_ptr<transport::Connection>& connection) {
  AssertOnLoop();
  // Where the ATTACH travels in the set-up it came under the same deadline and the tag is set.
  const int timeout = site_.limits.attach_timeout_ms;
  auto timer = std::make_shared<boost::asio::steady_timer>(loop_.context());
  timer->expires_after(std::chrono::milliseconds(timeout));
  timer->async_wait([timer, weak = std::weak_ptr<transport::Connection>(connection),
                     timeout](const boost::system::error_code& ec) {
    if (ec) return;
    auto c = weak.lock();
    if (!c || c->closed() || c->tag() >= 0) return;
    c->Close(absl::DeadlineExceededError(absl::StrCat("no ATTACH from ", c->peer(), " within ",
                                                      timeout, " ms (--attach-timeout-ms)")));
  });
}

void CoreLane::SampleSteering(const std::shared_ptr<transport::Connection>& connection) {
  AssertOnLoop();
  if (site_.metrics == nullptr || site_.metrics->rx_on_core == nullptr) return;
  // Once its ATTACH and first pushes are in, so the kernel has handled some of its packets.
  auto timer = std::make_shared<boost::asio::steady_timer>(loop_.context());
  timer->expires_after(std::chrono::seconds(2));
  timer->async_wait([this, timer, weak = std::weak_ptr<transport::Connection>(connection)](
                        const boost::system::error_code& ec) {
    AssertOnLoop();
    if (ec) return;
    auto c = weak.lock();
    if (!c || c->closed()) return;
    const int rx = c->receive_cpu();
    if (rx < 0) return;  // the transport cannot tell (verbs)
    const int mine = sched_getcpu();
    (rx == mine ? site_.metrics->rx_on_core : site_.metrics->rx_elsewhere)->Add();
    spdlog::debug("core {}: packets from {} handled on CPU {}{}", site_.index, c->peer(), rx,
                  rx == mine ? ", the core's own" : absl::StrCat(", not the core's (", mine, ")"));
  });
}

ShardStats CoreLane::Remove() {
  ShardStats stats;
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session_)) stats = shard->stats();
    // The lane's thread ran this job's data path and nothing else.
    stats.cpu_seconds = ThreadCpuSeconds();
    Teardown(absl::OkStatus());
  });
  return stats;
}

RejoinPoint CoreLane::ForgetWorker(std::uint32_t rank) {
  RejoinPoint point;
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session_)) point = shard->ForgetWorker(rank);
  });
  return point;
}

void CoreLane::ExpectRejoin(std::uint32_t rank, std::uint64_t iteration) {
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session_)) shard->ExpectRejoin(rank, iteration);
  });
}

std::vector<ChunkSnapshot> CoreLane::StopAndSnapshot() {
  std::vector<ChunkSnapshot> chunks;
  loop_.Run([&] {
    AssertOnLoop();
    Shard* shard = router_.Find(session_);
    if (!shard) return;
    if (flow_added_) site_.sends->RemoveFlow(session_);  // the shard sends nothing more
    flow_added_ = false;
    shard->CloseAll(absl::CancelledError("phubd is stopping"));
    chunks = shard->SnapshotNow();
  });
  return chunks;
}

void CoreLane::RunOnShard(const std::function<void(Shard&)>& fn) {
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session_)) fn(*shard);
  });
}

void CoreLane::Post(std::function<void(Shard&)> fn) {
  loop_.Post([this, fn = std::move(fn)] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session_)) fn(*shard);
  });
}

}  // namespace phub::server
