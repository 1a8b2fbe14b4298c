#include "tests/phub/server/shard/shard_harness.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "phub/transport/open_device.h"

namespace phub::server::shard_test {

using transport::Op;
using transport::WireHeader;
using Clock = std::chrono::steady_clock;

std::shared_ptr<JobSpec> MakeJob(kernels::OptimizerConfig optimizer) {
  auto table = keys::KeyTable::Build(kModel, kChunkBytes, kCores);
  EXPECT_TRUE(table.ok()) << table.status();
  return std::make_shared<JobSpec>(JobSpec{.table = *std::move(table),
                                           .world_size = kWorld,
                                           .optimizer = optimizer,
                                           .session = kSession,
                                           .initial_weights = {},
                                           .keep_previous = false,
                                           .checkpoint_every = 0,
                                           .resume = nullptr,
                                           .resume_iteration = 0});
}

Tensors RandomTensors(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensors out;
  for (const keys::TensorSpec& t : kModel) {
    std::vector<float>& v = out.emplace_back(t.elements);
    for (float& x : v) x = dist(rng);
  }
  return out;
}

std::span<const float> ChunkOf(const Tensors& values, const keys::Chunk& c) {
  return std::span<const float>(values[c.tensor]).subspan(c.offset, c.elements);
}

// ---- ShardOnLoop ----

ShardOnLoop::ShardOnLoop(std::shared_ptr<const JobSpec> job, keys::CoreIndex core)
    : core_(core), loop_("shard test core " + std::to_string(core), /*pin_core=*/-1) {
  auto device = transport::OpenDevice({transport::TransportKind::kTcp, {}, {}});
  EXPECT_TRUE(device.ok()) << device.status();
  Status status;
  loop_.Run([&] {
    auto transport = (*device)->Bind(loop_);
    if (!transport.ok()) {
      status = transport.status();
      return;
    }
    transport_ = *std::move(transport);
    // On the loop's thread, as ServerCore::InstallShard creates it.
    shard_ = std::make_unique<Shard>(std::move(job), core_,
                                     [this](ShardEvent event) { Record(std::move(event)); });
    transport::AcceptHooks hooks;
    hooks.admit = [](std::size_t) -> std::optional<transport::ConnectionSizing> {
      return transport::ConnectionSizing{};
    };
    hooks.handler_now = [this]() -> transport::ConnectionHandler* { return shard_.get(); };
    hooks.ready = [this](std::shared_ptr<transport::Connection> c) { shard_->Adopt(c); };
    auto acceptor = transport_->Listen("127.0.0.1", 0, std::move(hooks));
    if (!acceptor.ok()) {
      status = acceptor.status();
      return;
    }
    acceptor_ = *std::move(acceptor);
  });
  EXPECT_TRUE(status.ok()) << status;
}

ShardOnLoop::~ShardOnLoop() {
  loop_.Run([this] {
    acceptor_.reset();
    shard_.reset();
    transport_.reset();
  });
}

void ShardOnLoop::OnLoop(const std::function<void(Shard&)>& fn) {
  loop_.Run([&] { fn(*shard_); });
}

ShardStats ShardOnLoop::stats() {
  ShardStats stats;
  OnLoop([&](Shard& s) { stats = s.stats(); });
  return stats;
}

std::size_t ShardOnLoop::unattached() {
  std::size_t n = 0;
  OnLoop([&](Shard& s) { n = s.unattached(); });
  return n;
}

bool ShardOnLoop::Eventually(const std::function<bool(Shard&)>& done) {
  const auto deadline = Clock::now() + kStep;
  while (true) {
    bool held = false;
    OnLoop([&](Shard& s) { held = done(s); });
    if (held) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(2));
  }
}

void ShardOnLoop::Drain() {
  loop_.Run([] {});
}

std::vector<ShardEvent> ShardOnLoop::events() {
  std::lock_guard lock(mu_);
  return events_;
}

std::optional<ShardEvent> ShardOnLoop::AwaitEvent(ShardEvent::Kind kind) {
  std::unique_lock lock(mu_);
  std::optional<ShardEvent> found;
  cv_.wait_for(lock, kStep, [&] {
    for (const ShardEvent& e : events_) {
      if (e.kind == kind) {
        found = e;
        return true;
      }
    }
    return false;
  });
  return found;
}

void ShardOnLoop::Record(ShardEvent event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

std::size_t CountEvents(const std::vector<ShardEvent>& events, ShardEvent::Kind kind) {
  return static_cast<std::size_t>(std::count_if(
      events.begin(), events.end(), [&](const ShardEvent& e) { return e.kind == kind; }));
}

// ---- The forged workers ----

RawSocket Connect(const ShardOnLoop& shard) {
  RawSocket socket = RawSocket::Connect(shard.port());
  EXPECT_TRUE(socket.connected()) << "could not reach core " << shard.core();
  return socket;
}

RawSocket Attached(const ShardOnLoop& shard, std::uint32_t rank) {
  RawSocket socket = Connect(shard);
  EXPECT_TRUE(socket.SendWire(phub::testing::AttachHeader(rank, shard.core(), kSession)));
  return socket;
}

bool SendChunk(RawSocket& socket, Op op, std::uint32_t rank, const keys::Chunk& c,
               std::uint64_t iteration, std::span<const float> values) {
  const auto bytes = std::as_bytes(values);
  return socket.SendWire(
      phub::testing::Header(op, rank, c.id, iteration, static_cast<std::uint32_t>(bytes.size())),
      bytes);
}

std::map<std::uint32_t, std::vector<float>> ReadWeights(RawSocket& socket, std::uint32_t rank,
                                                        const std::vector<std::uint32_t>& chunks,
                                                        std::uint64_t iteration,
                                                        const keys::KeyTable& table) {
  std::map<std::uint32_t, std::vector<float>> got;
  while (got.size() < chunks.size()) {
    WireHeader header;
    std::vector<std::byte> payload;
    const RawSocket::Read read = socket.ReadWire(header, payload, kStep);
    if (read != RawSocket::Read::kOk) {
      ADD_FAILURE() << "rank " << rank << ": no WEIGHTS of iteration " << iteration << " ("
                    << got.size() << " of " << chunks.size() << " in): " << read;
      return got;
    }
    const bool ours = std::find(chunks.begin(), chunks.end(), header.chunk) != chunks.end();
    if (header.op != Op::kWeights || header.worker != rank || header.iteration != iteration ||
        !ours || got.count(header.chunk) ||
        header.payload_bytes != table.chunks()[header.chunk].bytes()) {
      ADD_FAILURE() << "rank " << rank << " got " << OpName(header.op) << " for worker "
                    << header.worker << " chunk " << header.chunk << " iteration "
                    << header.iteration << " of " << header.payload_bytes
                    << " bytes; expected WEIGHTS of iteration " << iteration;
      return got;
    }
    std::vector<float>& values = got[header.chunk];
    values.resize(payload.size() / sizeof(float));
    std::memcpy(values.data(), payload.data(), payload.size());
  }
  return got;
}

// ---- ShardTest ----

ShardTest::ShardTest()
    : job_(MakeJob()), table_(job_->table), shard_(job_, 0), mine_(table_.chunks_on_core(0)) {
  std::mt19937 rng(7);
  initial_ = RandomTensors(rng, -1.0f, 1.0f);
}

void ShardTest::AttachAll() {
  for (std::uint32_t r = 0; r < kWorld; ++r) workers_.push_back(Attached(shard_, r));
  ASSERT_TRUE(shard_.AwaitEvent(ShardEvent::Kind::kAllAttached)) << "no kAllAttached";
}

void ShardTest::Run() {
  ASSERT_NO_FATAL_FAILURE(AttachAll());
  for (std::uint32_t k : mine_) {
    ASSERT_TRUE(SendChunk(workers_[0], Op::kInit, 0, table_.chunks()[k], 0,
                          ChunkOf(initial_, table_.chunks()[k])));
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(ReadWeights(workers_[r], r, mine_, 0, table_).size(), mine_.size());
  }
}

void ShardTest::Iterate(std::uint64_t iteration) {
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    for (std::uint32_t k : mine_) {
      ASSERT_TRUE(SendChunk(workers_[r], Op::kPush, r, table_.chunks()[k], iteration,
                            ChunkOf(initial_, table_.chunks()[k])));
    }
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(ReadWeights(workers_[r], r, mine_, iteration, table_).size(), mine_.size());
  }
}

}  // namespace phub::server::shard_test
