// Every message a worker may not send to a Shard (shard_harness.h) closes that connection, and
// only that one, with a reason the shard reports through its EventSink: before ATTACH, a bad
// or second ATTACH, a chunk the core does not own, a wrong size, a wrong iteration, a second
// push, INIT from the wrong rank or twice, ops a worker never sends, anything after BYE.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "phub/server/shard/shard.h"
#include "tests/phub/server/shard/shard_harness.h"

namespace phub::server::shard_test {
namespace {

using ::testing::HasSubstr;
using transport::Op;

using phub::testing::Header;

enum class Stage {
  kAttached,  // every worker attached, no INIT yet
  kRunning,   // INIT done, WEIGHTS(0) read: every chunk expects PUSH of iteration 1
};

struct Refusal {
  std::string name;
  Stage stage;
  // Who sends: an attached rank on its connection, or (-1) a fresh, unattached connection.
  int sender;
  // Messages that are fine, sent first on the sender's connection.
  std::function<std::vector<std::vector<std::byte>>(const keys::KeyTable&)> prelude;
  // The message that must be refused (header and payload, as bytes).
  std::function<std::vector<std::byte>(const keys::KeyTable&)> message;
  std::string reason;    // what the shard's report must say
  bool reported = true;  // false: the shard closes silently (the sender already said BYE)
};

std::ostream& operator<<(std::ostream& out, const Refusal& r) { return out << r.name; }

std::vector<std::byte> Bytes(Op op, std::uint32_t worker, std::uint32_t chunk,
                             std::uint64_t iteration, std::uint32_t payload_bytes) {
  const transport::EncodedHeader header = Header(op, worker, chunk, iteration, payload_bytes);
  std::vector<std::byte> bytes(header.size() + payload_bytes, std::byte{0x3f});
  std::copy(header.begin(), header.end(), bytes.begin());
  return bytes;
}

// A message about core 0's first chunk (its size unless `bytes` says otherwise).
std::vector<std::byte> About(const keys::KeyTable& table, Op op, std::uint32_t worker,
                             std::uint64_t iteration, std::optional<std::uint32_t> bytes = {}) {
  const keys::Chunk& c = table.chunks()[table.chunks_on_core(0).front()];
  return Bytes(op, worker, c.id, iteration, bytes.value_or(static_cast<std::uint32_t>(c.bytes())));
}

std::vector<Refusal> Refusals() {
  using T = const keys::KeyTable&;
  auto none = [](T) { return std::vector<std::vector<std::byte>>{}; };
  return {
      // A connection that has not said who it is.
      {"PushBeforeAttach", Stage::kRunning, -1, none, [](T t) { return About(t, Op::kPush, 1, 1); },
       "first message must be ATTACH, got PUSH"},
      {"AttachWithAnotherSession", Stage::kRunning, -1, none,
       [](T) { return Bytes(Op::kAttach, 1, 0, kSession + 1, 0); },
       "ATTACH with a session that is not the running job's"},
      {"AttachForAnotherCore", Stage::kRunning, -1, none,
       [](T) { return Bytes(Op::kAttach, 1, 1, kSession, 0); }, "ATTACH for core 1 reached core 0"},
      {"AttachOfARankOutsideTheJob", Stage::kRunning, -1, none,
       [](T) { return Bytes(Op::kAttach, kWorld, 0, kSession, 0); },
       "ATTACH from rank 3 in a job of 3"},
      {"AttachWithAPayload", Stage::kRunning, -1, none,
       [](T) { return Bytes(Op::kAttach, 1, 0, kSession, 4); }, "ATTACH carries 4 bytes"},
      {"AttachOfARankAlreadyAttached", Stage::kRunning, -1, none,
       [](T) { return Bytes(Op::kAttach, 1, 0, kSession, 0); },
       "rank 1 is already attached to core 0"},
      // An attached worker (rank 1 unless said otherwise) on its own connection.
      {"SecondAttachOnOneConnection", Stage::kRunning, 1, none,
       [](T) { return Bytes(Op::kAttach, 1, 0, kSession, 0); },
       "unexpected ATTACH from rank 1 (already attached)"},
      {"PushOfAChunkOfAnotherCore", Stage::kRunning, 1, none,
       [](T t) {
         const keys::Chunk& c = t.chunks()[t.chunks_on_core(1).front()];
         return Bytes(Op::kPush, 1, c.id, 1, static_cast<std::uint32_t>(c.bytes()));
       },
       "which core 0 does not own (the job has 6 chunks)"},
      {"PushOfAChunkPastTheTable", Stage::kRunning, 1, none,
       [](T) { return Bytes(Op::kPush, 1, 1000, 1, 64); },
       "PUSH for chunk 1000 which core 0 does not own"},
      {"PushShorterThanTheChunk", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 1, 60); }, "carries 60 bytes; the chunk has 64"},
      {"PushLongerThanTheChunk", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 1, 68); }, "carries 68 bytes; the chunk has 64"},
      {"PushWithoutPayload", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 1, 0); }, "carries 0 bytes; the chunk has 64"},
      {"PushOfAFutureIteration", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 2); },
       "for iteration 2; the chunk expects iteration 1"},
      {"PushOfIterationZero", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 0); },
       "for iteration 0; the chunk expects iteration 1"},
      {"SecondPushInOneIteration", Stage::kRunning, 1,
       [](T t) { return std::vector<std::vector<std::byte>>{About(t, Op::kPush, 1, 1)}; },
       [](T t) { return About(t, Op::kPush, 1, 1); }, "second PUSH of chunk"},
      {"PushNamingAnotherWorker", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kPush, 2, 1); },
       "PUSH names worker 2 on the connection of rank 1"},
      {"PushBeforeTheInitialWeights", Stage::kAttached, 1, none,
       [](T t) { return About(t, Op::kPush, 1, 1); },
       "before its initial weights arrived from rank 0"},
      {"InitFromARankOtherThanZero", Stage::kAttached, 1, none,
       [](T t) { return About(t, Op::kInit, 1, 0); },
       "INIT from rank 1: only rank 0 sends initial weights"},
      {"InitOfIterationOne", Stage::kAttached, 0, none,
       [](T t) { return About(t, Op::kInit, 0, 1); },
       "for iteration 1; initial weights are iteration 0"},
      {"InitOfAChunkThatHasWeights", Stage::kRunning, 0, none,
       [](T t) { return About(t, Op::kInit, 0, 0); }, "which already has weights"},
      {"WeightsFromAWorker", Stage::kRunning, 1, none,
       [](T t) { return About(t, Op::kWeights, 1, 1); }, "unexpected WEIGHTS from rank 1"},
      {"ErrorFromAWorker", Stage::kRunning, 1, none,
       [](T) { return Bytes(Op::kError, 1, 0, 0, 5); }, "unexpected ERROR from rank 1"},
      {"ByeWithAPayload", Stage::kRunning, 1, none, [](T) { return Bytes(Op::kBye, 1, 0, 0, 4); },
       "BYE from rank 1 carries 4 bytes"},
      // After its BYE a worker has left: anything more closes the connection, and that is not
      // a lost worker.
      {"PushAfterBye", Stage::kRunning, 1,
       [](T) { return std::vector<std::vector<std::byte>>{Bytes(Op::kBye, 1, 0, 0, 0)}; },
       [](T t) { return About(t, Op::kPush, 1, 1); }, "", /*reported=*/false},
  };
}

class ShardRefusal : public ShardTest, public ::testing::WithParamInterface<Refusal> {};

// The message closes the sender's connection. An unattached connection is reported as
// kBadPeer and leaves unattached() at 0; an attached worker as kWorkerLost with its rank; both
// with the refusal's reason. Nothing was counted (no aggregation, no payload bytes beyond the
// INIT) and, for a refused stranger, the job goes on: a whole iteration still completes.
TEST_P(ShardRefusal, ClosesTheSendersConnectionAndReportsWhy) {
  const Refusal& refusal = GetParam();
  if (refusal.stage == Stage::kRunning) {
    ASSERT_NO_FATAL_FAILURE(Run());
  } else {
    ASSERT_NO_FATAL_FAILURE(AttachAll());
  }
  const ShardStats before = shard_.stats();
  RawSocket stranger;
  RawSocket& sender = refusal.sender < 0 ? (stranger = Connect(shard_)) : workers_[refusal.sender];
  for (const auto& ok : refusal.prelude(table_)) ASSERT_TRUE(sender.Send(ok));
  const std::vector<std::byte> message = refusal.message(table_);
  sender.Send(message);  // may fail half-way: the shard closes on the header

  ASSERT_TRUE(sender.WaitClosed(kStep)) << "the shard kept the connection";
  shard_.Drain();  // the connection's OnClosed, which reports, has run
  const auto events = shard_.events();
  if (refusal.sender < 0) {
    const auto bad = shard_.AwaitEvent(ShardEvent::Kind::kBadPeer);
    ASSERT_TRUE(bad) << "no kBadPeer";
    EXPECT_THAT(bad->reason, HasSubstr(refusal.reason));
    EXPECT_EQ(bad->core, 0u);
    EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kWorkerLost), 0u);
    EXPECT_EQ(shard_.unattached(), 0u);
  } else if (refusal.reported) {
    const auto lost = shard_.AwaitEvent(ShardEvent::Kind::kWorkerLost);
    ASSERT_TRUE(lost) << "no kWorkerLost";
    EXPECT_EQ(lost->rank, refusal.sender);
    EXPECT_EQ(lost->core, 0u);
    EXPECT_THAT(lost->reason, HasSubstr(refusal.reason));
    EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kWorkerLost), 1u);
  } else {
    EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kWorkerLost), 0u);
    EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kBadPeer), 0u);
  }
  const ShardStats after = shard_.stats();
  EXPECT_EQ(after.aggregations, before.aggregations);
  std::uint64_t prelude_bytes = 0;  // the payloads of the prelude's pushes were taken
  for (const auto& ok : refusal.prelude(table_)) {
    auto header =
        transport::DecodeWireHeader(std::span<const std::byte, transport::kWireHeaderBytes>(
            ok.data(), transport::kWireHeaderBytes));
    ASSERT_TRUE(header.ok()) << header.status();
    if (header->op == Op::kPush) prelude_bytes += header->payload_bytes;
  }
  EXPECT_EQ(after.bytes_in, before.bytes_in + prelude_bytes);
  if (refusal.sender < 0) {
    ASSERT_NO_FATAL_FAILURE(Iterate(1));
  }
}

INSTANTIATE_TEST_SUITE_P(Messages, ShardRefusal, ::testing::ValuesIn(Refusals()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace phub::server::shard_test
