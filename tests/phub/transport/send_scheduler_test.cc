// SendScheduler (phub/transport/send_scheduler.h): the order messages leave in, the window,
// barriers, and what happens to held messages when the connection closes. The first tests
// drive the scheduler over a connection whose completions the test releases one by one, so
// the order is exact; the last ones run it over real connections on every transport
// (transport_pair.h), where it must reorder what the peer receives.
#include "phub/transport/send_scheduler.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/phub/transport/recording_handler.h"
#include "tests/phub/transport/transport_pair.h"

namespace phub::transport {
namespace {

// A connection that takes messages and completes them only when the test says: what a link
// that is still busy looks like to the scheduler.
class HeldConnection final : public Connection {
 public:
  struct Taken {
    WireHeader header;
    std::size_t bytes;
    SendDone done;
  };
  void Start() override {}
  void Send(const WireHeader& header, std::span<const std::byte> payload,
            SendDone done) override {
    if (closed_) {
      if (done) done(absl::UnavailableError("closed"));
      return;
    }
    order_.push_back(header);
    taken_.push_back(Taken{header, payload.size(), std::move(done)});
  }
  void Close(const Status& why) override {
    if (closed_) return;
    closed_ = true;
    std::deque<Taken> failed;
    failed.swap(taken_);
    for (Taken& t : failed) {
      if (t.done) t.done(why);
    }
  }
  bool closed() const override { return closed_; }
  std::string peer() const override { return "held"; }

  // Completes the oldest message the connection took.
  void CompleteOldest() {
    ASSERT_FALSE(taken_.empty());
    Taken t = std::move(taken_.front());
    taken_.pop_front();
    if (t.done) t.done(absl::OkStatus());
  }
  std::size_t outstanding() const { return taken_.size(); }
  // Every header in the order the connection took it.
  const std::vector<WireHeader>& order() const { return order_; }

 private:
  bool closed_ = false;
  std::deque<Taken> taken_;
  std::vector<WireHeader> order_;
};

constexpr std::size_t kChunk = 1000;

WireHeader Push(std::uint32_t chunk, std::uint64_t iteration = 1) {
  return WireHeader{Op::kPush, 0, chunk, iteration, static_cast<std::uint32_t>(kChunk)};
}

std::vector<std::uint32_t> Chunks(const std::vector<WireHeader>& headers) {
  std::vector<std::uint32_t> chunks;
  for (const WireHeader& h : headers) chunks.push_back(h.chunk);
  return chunks;
}

class SendSchedulerTest : public ::testing::Test {
 protected:
  std::shared_ptr<HeldConnection> connection_ = std::make_shared<HeldConnection>();
  std::vector<std::byte> payload_ = std::vector<std::byte>(kChunk);
  std::vector<Status> done_;
  Connection::SendDone Done() {
    return [this](const Status& s) { done_.push_back(s); };
  }
  // Completes everything, oldest first, until nothing is outstanding or held.
  void Drain(SendScheduler& scheduler) {
    while (connection_->outstanding() > 0) connection_->CompleteOldest();
    EXPECT_EQ(scheduler.held(), 0u);
  }
};

TEST_F(SendSchedulerTest, HeldChunksLeaveLowestChunkFirstWhateverTheOrderQueued) {
  auto scheduler = SendScheduler::Create(connection_, 2 * kChunk);
  // Backward order: the last layer's chunks first.
  for (std::uint32_t chunk : {9u, 8u, 7u, 6u, 5u, 4u, 3u, 2u, 1u, 0u}) {
    scheduler->Send(Push(chunk), payload_, Done());
  }
  // Two fit the window at once; the rest wait, and go lowest chunk first.
  EXPECT_EQ(connection_->outstanding(), 2u);
  EXPECT_EQ(scheduler->held(), 8u);
  EXPECT_EQ(scheduler->in_flight_bytes(), 2 * kChunk);
  Drain(*scheduler);
  EXPECT_EQ(Chunks(connection_->order()),
            (std::vector<std::uint32_t>{9, 8, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(done_.size(), 10u);
  for (const Status& s : done_) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(SendSchedulerTest, AChunkQueuedLaterOvertakesEveryChunkNotYetHandedOver) {
  auto scheduler = SendScheduler::Create(connection_, kChunk);
  for (std::uint32_t chunk = 10; chunk < 20; ++chunk) scheduler->Send(Push(chunk), payload_, Done());
  connection_->CompleteOldest();  // 10 done, 11 handed over
  connection_->CompleteOldest();  // 11 done, 12 handed over
  scheduler->Send(Push(3), payload_, Done());  // a first layer's gradient, produced last
  connection_->CompleteOldest();  // 12 done: 3 goes next, not 13
  Drain(*scheduler);
  EXPECT_EQ(Chunks(connection_->order()),
            (std::vector<std::uint32_t>{10, 11, 12, 3, 13, 14, 15, 16, 17, 18, 19}));
}

TEST_F(SendSchedulerTest, AnEarlierIterationGoesBeforeALowerChunkOfALaterOne) {
  auto scheduler = SendScheduler::Create(connection_, kChunk);
  scheduler->Send(Push(0, 1), payload_, Done());  // handed over at once
  scheduler->Send(Push(5, 2), payload_, Done());
  scheduler->Send(Push(1, 3), payload_, Done());
  scheduler->Send(Push(7, 1), payload_, Done());
  Drain(*scheduler);
  std::vector<std::uint64_t> iterations;
  for (const WireHeader& h : connection_->order()) iterations.push_back(h.iteration);
  EXPECT_EQ(Chunks(connection_->order()), (std::vector<std::uint32_t>{0, 7, 5, 1}));
  EXPECT_EQ(iterations, (std::vector<std::uint64_t>{1, 1, 2, 3}));
}

TEST_F(SendSchedulerTest, ABarrierGoesAfterEverythingBeforeItAndBeforeEverythingAfter) {
  auto scheduler = SendScheduler::Create(connection_, kChunk);
  scheduler->Send(Push(4), payload_, Done());
  scheduler->Send(Push(3), payload_, Done());
  scheduler->Send(WireHeader{Op::kBye, 0, 0, 0, 0}, {}, Done());
  scheduler->Send(Push(1), payload_, Done());  // lower chunk and iteration, yet after the BYE
  scheduler->Send(Push(2), payload_, Done());
  Drain(*scheduler);
  const std::vector<WireHeader>& order = connection_->order();
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order[0].chunk, 4u);
  EXPECT_EQ(order[1].chunk, 3u);
  EXPECT_EQ(order[2].op, Op::kBye);
  EXPECT_EQ(order[3].chunk, 1u);
  EXPECT_EQ(order[4].chunk, 2u);
}

TEST_F(SendSchedulerTest, AMessageLargerThanTheWindowStillGoesAloneAndOthersWaitForIt) {
  auto scheduler = SendScheduler::Create(connection_, kChunk / 2);
  scheduler->Send(Push(2), payload_, Done());
  scheduler->Send(Push(1), payload_, Done());
  EXPECT_EQ(connection_->outstanding(), 1u);  // the window is full with one
  connection_->CompleteOldest();
  EXPECT_EQ(connection_->outstanding(), 1u);
  Drain(*scheduler);
  EXPECT_EQ(done_.size(), 2u);
}

TEST_F(SendSchedulerTest, WindowZeroHandsEverythingOverAtOnceInTheOrderQueued) {
  auto scheduler = SendScheduler::Create(connection_, 0);
  for (std::uint32_t chunk : {5u, 1u, 3u}) scheduler->Send(Push(chunk), payload_, Done());
  EXPECT_EQ(connection_->outstanding(), 3u);
  EXPECT_EQ(scheduler->held(), 0u);
  EXPECT_EQ(Chunks(connection_->order()), (std::vector<std::uint32_t>{5, 1, 3}));
  Drain(*scheduler);
}

TEST_F(SendSchedulerTest, ClosingTheConnectionFailsEveryHeldMessageWithItsError) {
  auto scheduler = SendScheduler::Create(connection_, kChunk);
  for (std::uint32_t chunk = 0; chunk < 6; ++chunk) scheduler->Send(Push(chunk), payload_, Done());
  ASSERT_EQ(scheduler->held(), 5u);
  connection_->Close(absl::UnavailableError("peer gone"));
  EXPECT_EQ(scheduler->held(), 0u);
  EXPECT_EQ(scheduler->in_flight_bytes(), 0u);
  ASSERT_EQ(done_.size(), 6u);  // each exactly once
  for (const Status& s : done_) EXPECT_FALSE(s.ok());
  // And later sends fail at once.
  scheduler->Send(Push(9), payload_, Done());
  ASSERT_EQ(done_.size(), 7u);
  EXPECT_FALSE(done_.back().ok());
}

TEST_F(SendSchedulerTest, ACompletionAfterTheSchedulerIsGoneStillReachesItsCaller) {
  auto scheduler = SendScheduler::Create(connection_, kChunk);
  scheduler->Send(Push(1), payload_, Done());
  scheduler.reset();
  connection_->CompleteOldest();
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_TRUE(done_[0].ok());
}

// Over real connections: chunks queued in backward order with a one-chunk window reach the
// peer first-layer-first (after the one already handed over), with every payload intact.
class SendSchedulerOverTransportTest : public TransportPairTest {};

TEST_P(SendSchedulerOverTransportTest, ThePeerReceivesHeldChunksLowestFirstAndIntact) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  constexpr std::uint32_t kChunks = 24;
  constexpr std::uint32_t kBytes = 64 * 1024;
  std::vector<std::vector<std::byte>> payloads;
  for (std::uint32_t i = 0; i < kChunks; ++i) payloads.push_back(Pattern(kBytes, i));
  SendResults sent;
  std::shared_ptr<SendScheduler> scheduler;
  dial_loop_.Run([&] {
    scheduler = SendScheduler::Create(dialed_, kBytes);
    for (std::uint32_t i = kChunks; i-- > 0;) {
      scheduler->Send(WireHeader{Op::kPush, 2, i, 1, kBytes}, payloads[i], sent.Callback());
    }
  });
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(1 + kChunks));
  ASSERT_TRUE(sent.WaitFor(kChunks));
  DrainLoops();
  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 1 + kChunks);
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 1; i < got.size(); ++i) {
    const std::uint32_t chunk = got[i].header.chunk;
    order.push_back(chunk);
    ASSERT_LT(chunk, kChunks);
    EXPECT_TRUE(std::equal(got[i].slot.begin(), got[i].slot.end(), payloads[chunk].begin(),
                           payloads[chunk].end()))
        << "chunk " << chunk;
  }
  std::vector<std::uint32_t> expected{kChunks - 1};
  for (std::uint32_t i = 0; i + 1 < kChunks; ++i) expected.push_back(i);
  EXPECT_EQ(order, expected);
  for (const Status& s : sent.statuses()) EXPECT_TRUE(s.ok()) << s;
  dial_loop_.Run([&] { scheduler.reset(); });
}

INSTANTIATE_TEST_SUITE_P(Transports, SendSchedulerOverTransportTest,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kVerbs,
                                           TransportKind::kShm),
                         [](const auto& info) { return TransportName(info.param); });

}  // namespace
}  // namespace phub::transport
