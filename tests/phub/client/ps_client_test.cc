// PsClient's data path against a forged phubd (ps_client_fixture.h), the positive path that
// tests/integration/hostile_server_test.cc (hostile WEIGHTS) does not walk: rank 0's Init sends
// its weights to each chunk's owner byte-exact, a Push sends each chunk of the gradient to its
// owner for the right iteration, Wait returns once the WEIGHTS that answer it are in the weight
// buffer; declared gradients; calls refused without touching the wire.
#include "phub/client/ps_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tests/phub/client/ps_client_fixture.h"

namespace phub::testing::ps_client_test {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Rank 0 sends its own weights as INIT(k, 0), each chunk on its owner's connection and exactly
// its bytes; Init returns only once phubd's WEIGHTS(k, 0) of every chunk are in, and the buffers
// then hold phubd's values (not the ones rank 0 sent).
TEST_F(PsClientTest, RankZeroInitSendsItsWeightsToEachChunksOwnerByteExact) {
  const Tensors mine = RandomTensors(1);
  const Tensors server = RandomTensors(2);
  ASSERT_NO_FATAL_FAILURE(Start(0, mine));
  const Call init = client_->Run([](client::PsClient& c) { return c.Init(); });
  EXPECT_TRUE(ExpectChunks(Op::kInit, 0, {kW, kB}, mine));
  EXPECT_FALSE(PsClientThread::Done(init, Millis(0))) << "Init returned before any WEIGHTS";
  ASSERT_TRUE(SendWeights(kW, 0, server));
  ASSERT_TRUE(SendWeights(kB, 0, server));
  ASSERT_TRUE(PsClientThread::Done(init)) << "Init still blocked after every chunk's WEIGHTS";
  ASSERT_TRUE(init.get().ok()) << init.get();
  EXPECT_EQ(client_->weights(), server);
  ExpectCleanLeave(client_->Destroy(), 0);
}

// What Connect learned from the Welcome: the chunking with phubd's placement, the rank, and
// whether phubd holds the initial weights.
TEST_F(PsClientTest, ConnectAdoptsTheWelcomesChunkingAndPlacement) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  std::vector<keys::CoreIndex> owners;
  std::size_t chunks = 0;
  std::uint32_t rank = 99;
  bool from_server = true;
  const Call read = client_->Run([&](client::PsClient& c) {
    owners = c.key_table().owners();
    chunks = c.key_table().chunks().size();
    rank = c.rank();
    from_server = c.weights_from_server();
    return Status();
  });
  ASSERT_TRUE(PsClientThread::Done(read));
  EXPECT_THAT(owners, ElementsAreArray(kOwners));
  EXPECT_EQ(chunks, kChunks);
  EXPECT_EQ(rank, 1u);
  EXPECT_FALSE(from_server);
}

// A rank other than 0 sends no INIT: its Init only waits for the weights. The first message on
// each data connection after it is the BYE of Close.
TEST_F(PsClientTest, InitOfAnotherRankSendsNothingAndWaitsForTheWeights) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ExpectCleanLeave(client_->Destroy(), 0);
}

// When phubd loaded the initial weights (weights_from_server), rank 0 sends no INIT either.
TEST_F(PsClientTest, RankZeroSendsNoInitWhenPhubdHoldsTheWeights) {
  ASSERT_NO_FATAL_FAILURE(Start(0, RandomTensors(1), /*weights_from_server=*/true));
  bool from_server = false;
  ASSERT_TRUE(PsClientThread::Done(client_->Run([&](client::PsClient& c) {
    from_server = c.weights_from_server();
    return Status();
  })));
  EXPECT_TRUE(from_server);
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ExpectCleanLeave(client_->Destroy(), 0);
}

// Three iterations of both tensors: each Push sends PUSH(k, t) of every chunk to its owner with
// exactly the gradient's bytes; Wait(t) returns once that tensor's WEIGHTS(k, t) are all in (and
// not while one of them is missing), the buffer then holds them, and iteration() counts the
// pushes. Close then says Goodbye after 3 iterations.
TEST_F(PsClientTest, PushGoesToEachChunksOwnerAndWaitReturnsTheWeightsThatAnswerIt) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  constexpr std::uint64_t kIterations = 3;
  for (std::uint64_t it = 1; it <= kIterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    Tensors grads = RandomTensors(100 + static_cast<std::uint32_t>(it));
    const Tensors fresh = RandomTensors(200 + static_cast<std::uint32_t>(it));
    const Call push_w = Push(kW, client_->Hold(grads[kW]));
    const Call push_b = Push(kB, client_->Hold(grads[kB]));
    EXPECT_TRUE(ExpectChunks(Op::kPush, it, {kW, kB}, grads));
    ASSERT_TRUE(PsClientThread::Done(push_w) && PsClientThread::Done(push_b));
    ASSERT_TRUE(push_w.get().ok()) << push_w.get();
    ASSERT_TRUE(push_b.get().ok()) << push_b.get();

    // w's weights arrive; b's all but one chunk.
    ASSERT_TRUE(SendWeights(kW, it, fresh));
    const Call wait_w = Wait(kW);
    ASSERT_TRUE(PsClientThread::Done(wait_w)) << "Wait(w) still blocked after its WEIGHTS";
    ASSERT_TRUE(wait_w.get().ok()) << wait_w.get();
    const keys::Chunk& b_last = phubd_->table().chunks_of_tensor(kB).back();
    for (const keys::Chunk& c : phubd_->table().chunks_of_tensor(kB)) {
      if (c.id == b_last.id) continue;
      ASSERT_TRUE(phubd_->SendWeights(
          c.id, it, std::span<const float>(fresh[kB]).subspan(c.offset, c.elements)));
    }
    const Call wait_b = Wait(kB);
    EXPECT_FALSE(PsClientThread::Done(wait_b, Millis(0)))
        << "Wait(b) returned with chunk " << b_last.id << " missing";
    ASSERT_TRUE(phubd_->SendWeights(
        b_last.id, it, std::span<const float>(fresh[kB]).subspan(b_last.offset, b_last.elements)));
    ASSERT_TRUE(PsClientThread::Done(wait_b)) << "Wait(b) still blocked after its WEIGHTS";
    ASSERT_TRUE(wait_b.get().ok()) << wait_b.get();
    EXPECT_EQ(client_->weights(), fresh);

    std::uint64_t iteration_w = 0, iteration_b = 0;
    ASSERT_TRUE(PsClientThread::Done(client_->Run([&](client::PsClient& c) {
      iteration_w = c.iteration(kW);
      iteration_b = c.iteration(kB);
      return Status();
    })));
    EXPECT_EQ(iteration_w, it);
    EXPECT_EQ(iteration_b, it);
  }
  ExpectCleanLeave(client_->Destroy(), kIterations);
}

// Declared gradient buffers: accepted when there is one per tensor of its size (on TCP they
// change nothing on the wire: the pushes from them carry their bytes); any other shape is
// refused with InvalidArgument naming the mismatch.
TEST_F(PsClientTest, DeclaredGradientsArePushedFromAndMisshapenOnesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  const Tensors grads = RandomTensors(3);
  const std::vector<std::span<const float>> declared = {client_->Hold(grads[kW]),
                                                        client_->Hold(grads[kB])};
  const std::span<const float> short_w = declared[kW].first(declared[kW].size() - 1);

  const Call too_few =
      client_->Run([&](client::PsClient& c) { return c.DeclareGradients({declared[kW]}); });
  const Call wrong_size = client_->Run([&](client::PsClient& c) {
    return c.DeclareGradients({short_w, declared[kB]});
  });
  const Call ok = client_->Run([&](client::PsClient& c) { return c.DeclareGradients(declared); });
  ASSERT_TRUE(PsClientThread::Done(ok));
  EXPECT_EQ(too_few.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_few.get().message()), HasSubstr("1 buffers for 2 tensors"));
  EXPECT_EQ(wrong_size.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong_size.get().message()), HasSubstr("tensor 0's buffer has 39"));
  EXPECT_TRUE(ok.get().ok()) << ok.get();

  const Call push_w = Push(kW, declared[kW]);
  const Call push_b = Push(kB, declared[kB]);
  EXPECT_TRUE(ExpectChunks(Op::kPush, 1, {kW, kB}, grads));
  const Tensors fresh = RandomTensors(4);
  ASSERT_TRUE(SendWeights(kW, 1, fresh));
  ASSERT_TRUE(SendWeights(kB, 1, fresh));
  const Call wait = client_->Run([](client::PsClient& c) { return c.WaitAll(); });
  ASSERT_TRUE(PsClientThread::Done(wait));
  EXPECT_TRUE(push_w.get().ok() && push_b.get().ok());
  EXPECT_TRUE(wait.get().ok()) << wait.get();
  EXPECT_EQ(client_->weights(), fresh);
}

// Calls the client refuses without touching the wire: a push of a tensor the model lacks or of
// the wrong size (InvalidArgument), a second push of a tensor whose first is unanswered
// (FailedPrecondition), a Wait for a tensor the model lacks.
TEST_F(PsClientTest, MisusedPushAndWaitAreRefusedWithAReason) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  const Tensors grads = RandomTensors(3);
  const std::span<const float> w = client_->Hold(grads[kW]);
  const Call no_such_tensor = Push(2, w);
  const Call wrong_size = Push(kW, w.first(10));
  const Call first = Push(kW, w);
  const Call again = Push(kW, w);
  const Call wait_no_such = Wait(7);
  ASSERT_TRUE(PsClientThread::Done(wait_no_such));
  EXPECT_EQ(no_such_tensor.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_such_tensor.get().message()),
              HasSubstr("Push of tensor 2; the model has 2"));
  EXPECT_EQ(wrong_size.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong_size.get().message()), HasSubstr("with 10 floats; it has 40"));
  EXPECT_TRUE(first.get().ok()) << first.get();
  EXPECT_EQ(again.get().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.get().message()), HasSubstr("call Wait(0) first"));
  EXPECT_EQ(wait_no_such.get().code(), absl::StatusCode::kInvalidArgument);
  // Only the one good push went out.
  EXPECT_TRUE(ExpectChunks(Op::kPush, 1, {kW}, grads));
}

}  // namespace
}  // namespace phub::testing::ps_client_test
