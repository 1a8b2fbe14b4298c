// PsClient's side of recovery against a forged phubd (ps_client_fixture.h): a Welcome that
// resumes the job (no INIT, the weights of the resume iteration, pushes counted on from there),
// heartbeats both ways (the client's on the control connection; a phubd that says nothing for
// its liveness timeout fails the waiting call instead of hanging it), phubd's JOB_STALLED
// (Aborted: nobody reconnects to a stalled job) and its Notices (logged, never an error).
//
// Every wait is bounded (kForgedStep, or the 3 s a silent phubd is given): the deadlines turn a
// hang into a failure; nothing measures how long anything took.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "phub/client/ps_client.h"
#include "proto/phub.pb.h"
#include "tests/phub/client/ps_client_fixture.h"

namespace phub::testing::ps_client_test {
namespace {

using ::testing::HasSubstr;

class PsClientRecoveryTest : public PsClientTest {
 protected:
  // Start(), but the Welcome is MakeWelcome() edited by `edit`.
  void StartWith(std::uint32_t rank, Tensors weights,
                 const std::function<void(proto::Welcome&)>& edit) {
    phubd_ = std::make_unique<ForgedPhubd>(Job(rank));
    ASSERT_TRUE(phubd_->listening());
    client_ =
        std::make_unique<PsClientThread>(Options(phubd_->port()), Membership{rank, 2}, kModel,
                                         std::move(weights),
                                         [phubd = phubd_.get()] { phubd->CloseAll(); });
    const Call connect = client_->Connect();
    proto::Welcome welcome = phubd_->MakeWelcome();
    edit(welcome);
    ASSERT_TRUE(phubd_->Handshake(welcome));
    ASSERT_TRUE(PsClientThread::Done(connect)) << "Connect still blocked after the handshake";
    ASSERT_TRUE(connect.get().ok()) << connect.get();
  }

  // The next control message from the client is a Heartbeat; its iteration.
  AssertionResult ReadHeartbeat(std::uint64_t& iteration) {
    proto::ControlMessage message;
    if (AssertionResult r = phubd_->ReadControl(message); !r) return r;
    if (!message.has_heartbeat()) {
      return AssertionFailure() << "not a Heartbeat: " << message.ShortDebugString();
    }
    iteration = message.heartbeat().iteration();
    return AssertionSuccess();
  }

  AssertionResult SendControl(const std::function<void(proto::ControlMessage&)>& fill) {
    proto::ControlMessage message;
    fill(message);
    return phubd_->Reply(message);
  }

  // After Init: a Push of tensor b for `iteration` in flight, its PUSH messages read.
  void PushB(std::uint64_t iteration, std::uint32_t seed) {
    const Tensors grads = RandomTensors(seed);
    const Call push = Push(kB, client_->Hold(grads[kB]));
    ASSERT_TRUE(ExpectChunks(Op::kPush, iteration, {kB}, grads));
    ASSERT_TRUE(PsClientThread::Done(push));
    ASSERT_TRUE(push.get().ok()) << push.get();
  }
};

// ---- A resumed job ----

// Welcome{resumed, resume_iteration 7} to rank 0 (the rank that sends INIT in a fresh job):
// resume_iteration() is 7; Init sends nothing and returns only once WEIGHTS labelled 7 of every
// chunk are in, which the buffers then hold; iteration() counts from 7; the next Push goes out
// as iteration 8 (and is the first message on every data connection: no INIT came before it);
// its Wait takes WEIGHTS labelled 8.
TEST_F(PsClientRecoveryTest, AResumedWelcomeSkipsInitAndCountsOnFromTheResumeIteration) {
  ASSERT_NO_FATAL_FAILURE(StartWith(0, RandomTensors(1), [](proto::Welcome& w) {
    w.set_resumed(true);
    w.set_resume_iteration(7);
  }));
  std::uint64_t resume = 0;
  ASSERT_TRUE(PsClientThread::Done(client_->Run([&](client::PsClient& c) {
    resume = c.resume_iteration();
    return Status();
  })));
  EXPECT_EQ(resume, 7u);

  const Tensors server = RandomTensors(2);
  const Call init = client_->Run([](client::PsClient& c) { return c.Init(); });
  // All but the last chunk of b: Init must still wait.
  ASSERT_TRUE(SendWeights(kW, 7, server));
  const keys::Chunk& b_last = phubd_->table().chunks_of_tensor(kB).back();
  for (const keys::Chunk& c : phubd_->table().chunks_of_tensor(kB)) {
    if (c.id == b_last.id) continue;
    ASSERT_TRUE(phubd_->SendWeights(
        c.id, 7, std::span<const float>(server[kB]).subspan(c.offset, c.elements)));
  }
  EXPECT_FALSE(PsClientThread::Done(init, Millis(0)))
      << "Init returned with chunk " << b_last.id << " missing";
  ASSERT_TRUE(phubd_->SendWeights(
      b_last.id, 7, std::span<const float>(server[kB]).subspan(b_last.offset, b_last.elements)));
  ASSERT_TRUE(PsClientThread::Done(init)) << "Init still blocked after every chunk's WEIGHTS(7)";
  ASSERT_TRUE(init.get().ok()) << init.get();
  EXPECT_EQ(client_->weights(), server);
  std::uint64_t iteration_w = 0, iteration_b = 0;
  ASSERT_TRUE(PsClientThread::Done(client_->Run([&](client::PsClient& c) {
    iteration_w = c.iteration(kW);
    iteration_b = c.iteration(kB);
    return Status();
  })));
  EXPECT_EQ(iteration_w, 7u);
  EXPECT_EQ(iteration_b, 7u);

  // ExpectChunks reads the first message on each core: an INIT would be read (and refused) here.
  const Tensors grads = RandomTensors(3);
  const Call push_w = Push(kW, client_->Hold(grads[kW]));
  const Call push_b = Push(kB, client_->Hold(grads[kB]));
  EXPECT_TRUE(ExpectChunks(Op::kPush, 8, {kW, kB}, grads));
  ASSERT_TRUE(PsClientThread::Done(push_w) && PsClientThread::Done(push_b));
  ASSERT_TRUE(push_w.get().ok()) << push_w.get();
  ASSERT_TRUE(push_b.get().ok()) << push_b.get();
  const Tensors fresh = RandomTensors(4);
  ASSERT_TRUE(SendWeights(kW, 8, fresh));
  ASSERT_TRUE(SendWeights(kB, 8, fresh));
  const Call wait = client_->Run([](client::PsClient& c) { return c.WaitAll(); });
  ASSERT_TRUE(PsClientThread::Done(wait)) << "WaitAll still blocked after WEIGHTS(8)";
  ASSERT_TRUE(wait.get().ok()) << wait.get();
  EXPECT_EQ(client_->weights(), fresh);
  ExpectCleanLeave(client_->Destroy(), 8);
}

// In a resumed job, weights of the iteration a fresh job would start from (0) are not the
// resume point's: Init fails instead of taking them.
TEST_F(PsClientRecoveryTest, AResumedInitRefusesWeightsOfAnotherIteration) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome& w) {
    w.set_resumed(true);
    w.set_resume_iteration(7);
  }));
  const Call init = client_->Run([](client::PsClient& c) { return c.Init(); });
  const keys::Chunk& c = phubd_->table().chunks_of_tensor(kW).front();
  const Tensors server = RandomTensors(2);
  ASSERT_TRUE(phubd_->SendWeights(
      c.id, 0, std::span<const float>(server[kW]).subspan(c.offset, c.elements)));
  ASSERT_TRUE(PsClientThread::Done(init)) << "Init still blocked after refused WEIGHTS";
  EXPECT_FALSE(init.get().ok());
  EXPECT_THAT(std::string(init.get().message()), HasSubstr("of iteration 0"));
}

// ---- Heartbeats ----

// With liveness_timeout_ms = 400 the client sends Heartbeats on the control connection (one
// every 100 ms; three are read here, each answered with one of phubd's so that the client never
// finds it silent), carrying its completed pushes: 0 before any.
TEST_F(PsClientRecoveryTest, TheClientSendsHeartbeatsOnTheControlConnection) {
  ASSERT_NO_FATAL_FAILURE(
      StartWith(1, RandomTensors(1), [](proto::Welcome& w) { w.set_liveness_timeout_ms(400); }));
  for (int i = 0; i < 3; ++i) {
    std::uint64_t iteration = 99;
    ASSERT_TRUE(ReadHeartbeat(iteration)) << "heartbeat " << i;
    EXPECT_EQ(iteration, 0u);
    ASSERT_TRUE(SendControl([](proto::ControlMessage& m) { m.mutable_heartbeat(); }));
  }
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
}

// A Heartbeat's iteration is the client's completed pushes: 1 once a push was answered (a
// longer timeout here, 2 s, so that the client's Init and push between two answers of the
// forged phubd cannot pass for silence on a loaded machine).
TEST_F(PsClientRecoveryTest, HeartbeatsCountTheCompletedPushes) {
  ASSERT_NO_FATAL_FAILURE(
      StartWith(1, RandomTensors(1), [](proto::Welcome& w) { w.set_liveness_timeout_ms(2000); }));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  ASSERT_TRUE(SendWeights(kB, 1, RandomTensors(4)));
  const Call wait = Wait(kB);
  ASSERT_TRUE(PsClientThread::Done(wait));
  ASSERT_TRUE(wait.get().ok()) << wait.get();
  // Heartbeats written before the push was answered say 0; within a few, they say 1.
  std::uint64_t iteration = 0;
  for (int i = 0; i < 20 && iteration != 1; ++i) {
    ASSERT_TRUE(ReadHeartbeat(iteration)) << "heartbeat " << i << " after the push";
    ASSERT_TRUE(SendControl([](proto::ControlMessage& m) { m.mutable_heartbeat(); }));
  }
  EXPECT_EQ(iteration, 1u) << "the Heartbeats do not count the completed push";
}

// A phubd that says nothing on the control connection for liveness_timeout_ms (400 ms), its
// sockets open, fails a Wait for an unanswered push with Unavailable naming the silence; the
// Wait returns within 3 s (bounded: a hang fails the test). Later calls return the same error.
TEST_F(PsClientRecoveryTest, ASilentPhubdFailsTheWaitInsteadOfHangingIt) {
  ASSERT_NO_FATAL_FAILURE(
      StartWith(1, RandomTensors(1), [](proto::Welcome& w) { w.set_liveness_timeout_ms(400); }));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  const Call wait = Wait(kB);
  ASSERT_TRUE(PsClientThread::Done(wait, Millis(3000)))
      << "Wait still blocked 3 s into phubd's silence (liveness timeout 400 ms)";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kUnavailable) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("nothing heard from phubd"));
  const Call push = Push(kW, client_->Hold(RandomTensors(5)[kW]));
  ASSERT_TRUE(PsClientThread::Done(push));
  EXPECT_EQ(push.get().code(), absl::StatusCode::kUnavailable) << push.get();
}

// Without a liveness timeout (0, as a phubd with heartbeats off announces) a silent phubd is not
// declared lost: the Wait stays blocked until the WEIGHTS come.
TEST_F(PsClientRecoveryTest, WithoutALivenessTimeoutSilenceIsNotAnError) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome&) {}));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  const Call wait = Wait(kB);
  EXPECT_FALSE(PsClientThread::Done(wait, Millis(800)))
      << "Wait returned with no WEIGHTS: " << wait.get();
  ASSERT_TRUE(SendWeights(kB, 1, RandomTensors(4)));
  ASSERT_TRUE(PsClientThread::Done(wait));
  EXPECT_TRUE(wait.get().ok()) << wait.get();
}

// ---- phubd's Errors and Notices mid-job ----

// JOB_STALLED on the control connection fails the waiting call with Aborted (a stalled job is
// not to be rejoined) carrying phubd's message and fix.
TEST_F(PsClientRecoveryTest, JobStalledFailsTheWaitWithAborted) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome&) {}));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  const Call wait = Wait(kB);
  ASSERT_TRUE(SendControl([](proto::ControlMessage& m) {
    m.mutable_error()->set_code(proto::Error::JOB_STALLED);
    m.mutable_error()->set_message("rank 0 did not rejoin");
    m.mutable_error()->set_fix("restart the job from its checkpoint");
  }));
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait still blocked after JOB_STALLED";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kAborted) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("rank 0 did not rejoin"));
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("restart the job from its checkpoint"));
}

// Any other Error mid-job (this worker dropped as silent) is Unavailable: the worker may rejoin.
TEST_F(PsClientRecoveryTest, PeerSilentFailsTheWaitWithUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome&) {}));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  const Call wait = Wait(kB);
  ASSERT_TRUE(SendControl([](proto::ControlMessage& m) {
    m.mutable_error()->set_code(proto::Error::PEER_SILENT);
    m.mutable_error()->set_message("nothing heard from rank 1");
  }));
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait still blocked after PEER_SILENT";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kUnavailable) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("nothing heard from rank 1"));
}

// Notices (a member lost, a member back) are only logged: with Notices before and after the
// WEIGHTS, the Wait returns OK and the next iteration runs as usual.
TEST_F(PsClientRecoveryTest, NoticesFailNothing) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome&) {}));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  auto notice = [](const std::string& text) {
    return [text](proto::ControlMessage& m) { m.mutable_notice()->set_text(text); };
  };
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  ASSERT_TRUE(SendControl(notice("rank 0 was lost; the job waits for it")));
  ASSERT_TRUE(SendWeights(kB, 1, RandomTensors(4)));
  ASSERT_TRUE(SendControl(notice("rank 0 rejoined; it replays from iteration 1")));
  const Call wait = Wait(kB);
  ASSERT_TRUE(PsClientThread::Done(wait));
  ASSERT_TRUE(wait.get().ok()) << wait.get();
  ASSERT_NO_FATAL_FAILURE(PushB(2, 5));
  ASSERT_TRUE(SendWeights(kB, 2, RandomTensors(6)));
  const Call again = Wait(kB);
  ASSERT_TRUE(PsClientThread::Done(again));
  EXPECT_TRUE(again.get().ok()) << again.get();
  EXPECT_EQ(client_->weights()[kB], RandomTensors(6)[kB]);
}

// The control connection is read in order and only the first error is kept: a Notice followed
// by JOB_STALLED fails the Wait with the JOB_STALLED, so the Notice was read first and recorded
// nothing (whatever the timing, unlike a Notice racing WEIGHTS on another connection).
TEST_F(PsClientRecoveryTest, ANoticeBeforeAnErrorRecordsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartWith(1, RandomTensors(1), [](proto::Welcome&) {}));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  ASSERT_NO_FATAL_FAILURE(PushB(1, 3));
  ASSERT_TRUE(SendControl([](proto::ControlMessage& m) {
    m.mutable_notice()->set_text("rank 0 was lost; the job waits up to 1000 ms");
  }));
  ASSERT_TRUE(SendControl([](proto::ControlMessage& m) {
    m.mutable_error()->set_code(proto::Error::JOB_STALLED);
    m.mutable_error()->set_message("rank 0 did not rejoin within 1000 ms");
  }));
  const Call wait = Wait(kB);
  ASSERT_TRUE(PsClientThread::Done(wait));
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kAborted) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("did not rejoin within 1000 ms"));
}

}  // namespace
}  // namespace phub::testing::ps_client_test
