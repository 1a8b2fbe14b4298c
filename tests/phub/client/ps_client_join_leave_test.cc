// PsClient joining and leaving a job of a forged phubd (ps_client_fixture.h): Close says BYE
// on every data connection and Goodbye on the control connection, once, and ends any Wait it
// abandons; a lost data connection or phubd's JOB_STALLED fails the waiting call; and a
// Welcome the client cannot follow (cores out of order, an unknown transport, a placement that
// does not fit) or an Error in its place fails Connect with InvalidArgument, no core dialled.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <future>
#include <ostream>
#include <string>
#include <vector>

#include "phub/client/ps_client.h"
#include "proto/phub.pb.h"
#include "tests/phub/client/ps_client_fixture.h"

namespace phub::testing::ps_client_test {
namespace {

using ::testing::HasSubstr;

// Close is idempotent: the first leaves (BYE, Goodbye, every connection closed), the second
// just returns OK.
TEST_F(PsClientTest, CloseTwiceLeavesOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
  ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
  const Call first = client_->Run([](client::PsClient& c) { return c.Close(); });
  ExpectCleanLeave(first, 0);
  const Call second = client_->Run([](client::PsClient& c) { return c.Close(); });
  ASSERT_TRUE(PsClientThread::Done(second));
  EXPECT_TRUE(second.get().ok()) << second.get();
}

// Close while a push is unanswered: the client still leaves cleanly (BYE, Goodbye after 0
// completed iterations), and the Wait for that push, which can never be answered now, returns
// FailedPrecondition instead of blocking for good; so does a Push after Close.
TEST_F(PsClientTest, CloseWithAPushInFlightEndsItsWaitAndLaterPushes) {
  ASSERT_NO_FATAL_FAILURE(StartWithAPushInFlight(kW));
  ExpectCleanLeave(client_->Run([](client::PsClient& c) { return c.Close(); }), 0);
  const Call wait = Wait(kW);
  const Call push_b = Push(kB, client_->Hold(RandomTensors(4)[kB]));
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait blocked for a push Close abandoned";
  ASSERT_TRUE(PsClientThread::Done(push_b));
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kFailedPrecondition) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("closed"));
  EXPECT_EQ(push_b.get().code(), absl::StatusCode::kFailedPrecondition) << push_b.get();
}

// The same with the Wait already blocked when another thread calls Close (the header allows
// calls from any thread): Close wakes it.
TEST_F(PsClientTest, CloseOnAnotherThreadWakesABlockedWait) {
  ASSERT_NO_FATAL_FAILURE(StartWithAPushInFlight(kB));
  client::PsClient* client = nullptr;  // lives until Destroy, which is queued after the Wait
  ASSERT_TRUE(PsClientThread::Done(client_->Run([&](client::PsClient& c) {
    client = &c;
    return Status();
  })));
  const Call wait = Wait(kB);
  EXPECT_FALSE(PsClientThread::Done(wait, Millis(0))) << "Wait returned with no WEIGHTS sent";
  auto close = std::async(std::launch::async, [client] { return client->Close(); });
  ExpectCleanLeave(close.share(), 0);
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait still blocked after Close on another thread";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kFailedPrecondition) << wait.get();
}

// A data connection phubd drops while a push is in flight fails the Wait with Unavailable
// naming the lost connection (not a hang).
TEST_F(PsClientTest, ALostDataConnectionFailsTheWaitingCall) {
  ASSERT_NO_FATAL_FAILURE(StartWithAPushInFlight(kW));
  phubd_->CloseAll();
  const Call wait = Wait(kW);
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait still blocked with phubd gone";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kUnavailable) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("lost the"));
}

// An Error on the control connection mid-job (another worker died: JOB_STALLED) fails the
// waiting call with phubd's message and fix, as Aborted (a stalled job is not to be rejoined;
// ps_client_recovery_test.cc has the other codes).
TEST_F(PsClientTest, AJobStalledErrorFailsTheWaitingCallWithPhubdsReason) {
  ASSERT_NO_FATAL_FAILURE(StartWithAPushInFlight(kB));
  const Call wait = Wait(kB);
  proto::ControlMessage stalled;
  stalled.mutable_error()->set_code(proto::Error::JOB_STALLED);
  stalled.mutable_error()->set_message("job stalled: rank 0 lost");
  stalled.mutable_error()->set_fix("restart the job");
  ASSERT_TRUE(phubd_->Reply(stalled));
  ASSERT_TRUE(PsClientThread::Done(wait)) << "Wait still blocked after JOB_STALLED";
  EXPECT_EQ(wait.get().code(), absl::StatusCode::kAborted) << wait.get();
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("job stalled: rank 0 lost"));
  EXPECT_THAT(std::string(wait.get().message()), HasSubstr("restart the job"));
}

// ---- Answers to the Hello that the client must refuse ----

struct RefusedAnswer {
  std::string name;
  // The answer, built from the Welcome the forged phubd would send.
  std::function<proto::ControlMessage(proto::Welcome)> answer;
  absl::StatusCode code;
  std::string reason;  // what Connect's error must say
};

std::ostream& operator<<(std::ostream& out, const RefusedAnswer& a) { return out << a.name; }

proto::ControlMessage AsMessage(proto::Welcome welcome) {
  proto::ControlMessage message;
  *message.mutable_welcome() = std::move(welcome);
  return message;
}

std::vector<RefusedAnswer> RefusedAnswers() {
  return {
      {"CoresOutOfOrder",
       [](proto::Welcome w) {
         w.mutable_cores()->SwapElements(0, 1);
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument, "phubd's Welcome lists core 1 (port"},
      {"CoreWithoutAPort",
       [](proto::Welcome w) {
         w.mutable_cores(1)->set_port(0);
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument, "lists core 1 (port 0) in place 1"},
      {"CorePortPast65535",
       [](proto::Welcome w) {
         w.mutable_cores(0)->set_port(70000);
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument, "lists core 0 (port 70000) in place 0"},
      {"UnknownTransport",
       [](proto::Welcome w) {
         w.set_transport("carrier-pigeon");
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument,
       "phubd's Welcome names data plane 'carrier-pigeon': unknown transport"},
      {"OwnerListOfTheWrongLength",
       [](proto::Welcome w) {
         w.add_chunk_owner(0);
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument,
       "owners has 6 entries; the tensor table cut into 64-byte chunks has 5 chunks"},
      {"OwnerPastTheCores",
       [](proto::Welcome w) {
         w.set_chunk_owner(2, 5);
         return AsMessage(w);
       },
       absl::StatusCode::kInvalidArgument, "owner of chunk 2 is core 5; cores are 0..1"},
      {"ErrorInsteadOfWelcome",
       [](proto::Welcome) {
         proto::ControlMessage m;
         m.mutable_error()->set_code(proto::Error::BAD_TOKEN);
         m.mutable_error()->set_message("bad job token");
         m.mutable_error()->set_fix("use the job's token file");
         return m;
       },
       absl::StatusCode::kInvalidArgument,
       "phubd refused rank 0: bad job token; fix: use the job's token file"},
      {"NeitherWelcomeNorError",
       [](proto::Welcome) {
         proto::ControlMessage m;
         m.mutable_goodbye()->set_iterations(1);
         return m;
       },
       absl::StatusCode::kInvalidArgument, "neither Welcome nor Error"},
  };
}

class PsClientRefusesTheAnswer : public ::testing::TestWithParam<RefusedAnswer> {};

// Connect fails with the answer's code and a message naming what is wrong; the client opens no
// data connection (it would have dialled before Connect returned) and closes the control
// connection.
TEST_P(PsClientRefusesTheAnswer, ConnectFailsNamingItAndDialsNoCore) {
  const RefusedAnswer& refused = GetParam();
  ForgedPhubd phubd(Job(0));
  ASSERT_TRUE(phubd.listening());
  PsClientThread client(Options(phubd.port()), {0, 2}, kModel, RandomTensors(1),
                        [&phubd] { phubd.CloseAll(); });
  const Call connect = client.Connect();
  ASSERT_TRUE(phubd.AcceptHello());
  ASSERT_TRUE(phubd.Reply(refused.answer(phubd.MakeWelcome())));
  ASSERT_TRUE(PsClientThread::Done(connect)) << "Connect still blocked after the answer";
  EXPECT_EQ(connect.get().code(), refused.code) << connect.get();
  EXPECT_THAT(std::string(connect.get().message()), HasSubstr(refused.reason));
  for (std::uint32_t core = 0; core < kCores; ++core) {
    EXPECT_FALSE(phubd.DataConnectionPending(core)) << "the client dialled core " << core;
  }
  EXPECT_TRUE(phubd.ControlDroppedByClient(kForgedStep));
}

INSTANTIATE_TEST_SUITE_P(Welcome, PsClientRefusesTheAnswer, ::testing::ValuesIn(RefusedAnswers()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace phub::testing::ps_client_test
