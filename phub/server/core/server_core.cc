#include "phub/server/core/server_core.h"

#include <sched.h>

#include <ctime>

#include <boost/asio/steady_timer.hpp>
#include <new>

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

ServerCore::ServerCore(keys::CoreIndex index, int pin_core, double pace_bytes_per_s)
    : index_(index),
      fair_(FairSendQueue::Pacing{.bytes_per_s = pace_bytes_per_s},
            [this](std::chrono::nanoseconds delay) {
              // On the core's thread (the queue runs there); one wake-up armed at a time.
              AssertOnLoop();
              pace_timer_->expires_after(delay);
              pace_timer_->async_wait([this](const boost::system::error_code& ec) {
                AssertOnLoop();
                if (!ec) fair_.Wake();
              });
            }),
      loop_(absl::StrCat("core ", index), pin_core) {}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(keys::CoreIndex index,
                                                         const CorePlace& place,
                                                         transport::Device& device,
                                                         const CoreLimits& limits,
                                                         const CoreMetrics& metrics,
                                                         double pace_bytes_per_s) {
  std::unique_ptr<ServerCore> core(new ServerCore(index, place.pin_core, pace_bytes_per_s));
  core->address_ = place.address;
  core->nic_ = place.nic;
  core->limits_ = limits;
  core->metrics_ = metrics;
  Status status;
  core->loop_.Run([&] {
    core->AssertOnLoop();
    core->pace_timer_ = std::make_unique<boost::asio::steady_timer>(core->loop_.context());
    auto transport = device.Bind(core->loop_, place.queue);
    if (!transport.ok()) {
      status = transport.status();
      return;
    }
    core->transport_ = std::move(*transport);
    auto acceptor = core->transport_->Listen(place.address, place.port, core->Hooks());
    if (!acceptor.ok()) {
      status = acceptor.status();
      return;
    }
    core->acceptor_ = std::move(*acceptor);
    core->port_ = core->acceptor_->port();
  });
  if (!status.ok()) return status;
  return core;
}

transport::AcceptHooks ServerCore::Hooks() {
  transport::AcceptHooks hooks;
  hooks.admit = [this](std::size_t setting_up) -> std::optional<transport::ConnectionSizing> {
    AssertOnLoop();
    if (router_.empty()) {
      // Between jobs nobody may attach; the worker's handshake would have said so. A peer
      // may open thousands of these a second: at most 10 lines per 10 s, the rest counted.
      if (auto suppressed = no_job_log_.Allow()) {
        spdlog::warn("core {}: refusing a data connection: no job is running{}", index_,
                     LogLimiter::Note(*suppressed));
      }
      return std::nullopt;
    }
    // Connections still in their set-up have not attached either: they count too.
    const std::size_t unattached = router_.unattached() + setting_up;
    if (unattached >= limits_.max_connections) {
      // Counted, not logged one by one.
      if (refused_++ % 1000 == 0) {
        spdlog::warn("core {}: refusing data connections: {} have not attached yet, the limit "
                     "is {} (--max-connections); {} refused so far",
                     index_, unattached, limits_.max_connections, refused_);
      }
      return std::nullopt;
    }
    return ShardSizing(job_chunk_bytes_);
  };
  // The router holds a connection until its ATTACH names a job, then hands it to that job's
  // shard; a job that ends meanwhile is simply not found.
  hooks.handler_now = [this]() -> transport::ConnectionHandler* {
    AssertOnLoop();
    return &router_;
  };
  hooks.ready = [this](std::shared_ptr<transport::Connection> connection) {
    AssertOnLoop();
    router_.Adopt(connection);
    WatchAttach(connection);
    SampleSteering(connection);
  };
  hooks.setup_timeout_ms = limits_.attach_timeout_ms;
  return hooks;
}

void ServerCore::WatchAttach(const std::shared_ptr<transport::Connection>& connection) {
  AssertOnLoop();
  // Where the ATTACH travels in the set-up it came under the same deadline and the tag is set.
  auto timer = std::make_shared<boost::asio::steady_timer>(loop_.context());
  timer->expires_after(std::chrono::milliseconds(limits_.attach_timeout_ms));
  timer->async_wait([timer, weak = std::weak_ptr<transport::Connection>(connection),
                     timeout = limits_.attach_timeout_ms](const boost::system::error_code& ec) {
    if (ec) return;
    auto c = weak.lock();
    if (!c || c->closed() || c->tag() >= 0) return;
    c->Close(absl::DeadlineExceededError(absl::StrCat(
        "no ATTACH from ", c->peer(), " within ", timeout, " ms (--attach-timeout-ms)")));
  });
}

void ServerCore::SampleSteering(const std::shared_ptr<transport::Connection>& connection) {
  AssertOnLoop();
  if (metrics_.rx_on_core == nullptr) return;
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
    (rx == mine ? metrics_.rx_on_core : metrics_.rx_elsewhere)->Add();
    spdlog::debug("core {}: packets from {} handled on CPU {}{}", index_, c->peer(), rx,
                  rx == mine ? ", the core's own" : absl::StrCat(", not the core's (", mine, ")"));
  });
}

ServerCore::~ServerCore() {
  loop_.Run([this] {
    AssertOnLoop();
    if (acceptor_) acceptor_->CloseSettingUp(absl::CancelledError("phubd is stopping"));
    for (Shard* shard : router_.shards()) {
      fair_.RemoveFlow(shard->session());
      router_.Remove(shard->session(), absl::OkStatus());
    }
    router_.CloseAll(absl::CancelledError("phubd is stopping"));
    acceptor_.reset();
    transport_.reset();
    pace_timer_.reset();
  });
}

Status ServerCore::InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink,
                                double weight) {
  Status status;
  const std::uint64_t session = job->session;
  loop_.Run([&] {
    AssertOnLoop();  // the shard is made here: it is bound to this thread (Shard's REQUIRES)
    const std::uint64_t weight_bytes = job->table.bytes_on_core(index_);
    job_chunk_bytes_ = std::max(job_chunk_bytes_, job->table.chunk_bytes());
    std::unique_ptr<Shard> shard;
    try {
      shard = std::make_unique<Shard>(std::move(job), index_, std::move(sink),
                                      metrics_.received_bytes ? &metrics_ : nullptr, &fair_);
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "out of memory allocating the job's slots, weights and optimizer state (",
          weight_bytes, " bytes of weights on this core)"));
      return;
    }
    // Registered for this job's life: other jobs' registrations are not touched.
    std::uint64_t bytes = 0;
    for (std::span<std::byte> buffer : shard->Buffers()) {
      status = transport_->Register(buffer);
      if (!status.ok()) {
        for (std::span<std::byte> b : shard->Buffers()) transport_->Unregister(b);
        return;
      }
      bytes += buffer.size();
    }
    spdlog::debug("core {}: {} bytes of shard memory registered with {}", index_, bytes,
                  transport_->Describe());
    fair_.AddFlow(session, weight);
    shard_cpu_start_[session] = ThreadCpuSeconds();
    router_.Add(session, std::move(shard));
  });
  if (!status.ok()) {
    return Status(status.code(), absl::StrCat("core ", index_, ": ", status.message()));
  }
  return absl::OkStatus();
}

ShardStats ServerCore::RemoveShard(std::uint64_t session) {
  ShardStats stats;
  loop_.Run([&] {
    AssertOnLoop();
    // Its turns in the queue go first: none may start on a shard being freed.
    fair_.RemoveFlow(session);
    std::unique_ptr<Shard> shard = router_.Remove(session, absl::OkStatus());
    if (!shard) return;
    stats = shard->stats();
    // The core's CPU while the job ran, shared with the jobs that ran beside it.
    stats.cpu_seconds = ThreadCpuSeconds() - shard_cpu_start_[session];
    shard_cpu_start_.erase(session);
    for (std::span<std::byte> buffer : shard->Buffers()) transport_->Unregister(buffer);
    shard.reset();
  });
  return stats;
}

RejoinPoint ServerCore::ForgetWorker(std::uint64_t session, std::uint32_t rank) {
  RejoinPoint point;
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session)) point = shard->ForgetWorker(rank);
  });
  return point;
}

void ServerCore::ExpectRejoin(std::uint64_t session, std::uint32_t rank,
                              std::uint64_t iteration) {
  loop_.Run([&] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session)) shard->ExpectRejoin(rank, iteration);
  });
}

std::vector<ChunkSnapshot> ServerCore::StopAndSnapshot(std::uint64_t session) {
  std::vector<ChunkSnapshot> chunks;
  loop_.Run([&] {
    AssertOnLoop();
    Shard* shard = router_.Find(session);
    if (!shard) return;
    fair_.RemoveFlow(session);  // the shard sends nothing more
    shard->CloseAll(absl::CancelledError("phubd is stopping"));
    chunks = shard->SnapshotNow();
  });
  return chunks;
}

void ServerCore::Post(std::uint64_t session, std::function<void(Shard&)> fn) {
  loop_.Post([this, session, fn = std::move(fn)] {
    AssertOnLoop();
    if (Shard* shard = router_.Find(session)) fn(*shard);
  });
}

}  // namespace phub::server
