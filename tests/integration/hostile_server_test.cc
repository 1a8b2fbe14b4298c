// A forged phubd against a real PsClient: a plain TCP server in the test
// (tests/support/forged_phubd.h) answers the Hello with a Welcome of its making, takes the data connections, and then sends WEIGHTS no phubd would (a
// chunk out of range or of another core, a wrong size, the same chunk twice, another rank's).
// The client's one validation point (PsClient::Impl::ResolveSlot) must refuse each: the waiting
// call (Init) fails within seconds with a Status naming what was wrong, the connection that
// carried it is dropped, and not one hostile byte lands in the weights. A positive control
// proves the forged phubd itself speaks the protocol right.
//
// Nothing here may hang: every accept and read of the forged phubd has a deadline, PsClient runs
// on its own thread and is awaited with a deadline, and closing the forged phubd's sockets ends
// any PsClient call still blocked on it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "phub/client/ps_client.h"
#include "phub/keys/key_table.h"
#include "phub/transport/wire_header.h"
#include "tests/support/forged_client.h"
#include "tests/support/forged_phubd.h"
#include "tests/support/ps_client_thread.h"
#include "tests/integration/test_data.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using transport::Op;
using transport::WireHeader;
using Millis = std::chrono::milliseconds;

// Each wait of the test on PsClient (and, inside ForgedPhubd, of the forged phubd).
constexpr Millis kStep = kForgedStep;
// A refused message must cost its connection within this.
constexpr Millis kDropPromptly{2000};

// The model: with 64-byte chunks (16 floats), a = chunks 0..2 (16, 16, 8 floats) and b = chunks
// 3..4 (16, 4). The Welcome places a's first and last chunk on core 0 and the rest (all of b) on
// core 1, so both of b's chunks share a connection.
const std::vector<keys::TensorSpec> kModel = {{"a", 40}, {"b", 20}};
constexpr std::uint64_t kChunkBytes = 64;
constexpr std::uint32_t kChunks = 5;
const std::vector<keys::CoreIndex> kOwners = {0, 1, 0, 1, 1};
constexpr std::uint32_t kCores = 2;
// The client is rank 1 of 2: its Init only waits for the weights (rank 0 would send INIT first).
constexpr std::uint32_t kRank = 1;
constexpr std::uint32_t kWorld = 2;
constexpr std::uint64_t kSession = 0x5e55'1011'2233'4455ull;

// What the client's buffers hold before any WEIGHTS, and what hostile WEIGHTS carry; correct
// WEIGHTS carry ServerValue. No buffer can mistake one for another.
constexpr float kUntouched = 0.25f;
constexpr float kHostile = 666.0f;
float ServerValue(std::uint32_t tensor, std::uint64_t index) {
  return TestValue(7, kInitRank, 0, tensor, index);
}

// The job's chunking as the forged Welcome announces it (the client rebuilds the same).
const keys::KeyTable& Table() {
  static const keys::KeyTable table =
      *keys::KeyTable::WithPlacement(kModel, kChunkBytes, kCores, kOwners);
  return table;
}

// The client's weights once the correct WEIGHTS of `landed` (and nothing else) are in.
std::vector<std::vector<float>> ExpectedWeights(const std::vector<std::uint32_t>& landed) {
  std::vector<std::vector<float>> weights;
  for (const auto& t : kModel) weights.emplace_back(t.elements, kUntouched);
  for (std::uint32_t k : landed) {
    const keys::Chunk& c = Table().chunks()[k];
    for (std::uint64_t i = c.offset; i < c.offset + c.elements; ++i) {
      weights[c.tensor][i] = ServerValue(c.tensor, i);
    }
  }
  return weights;
}

// The job as the forged phubd announces it.
ForgedJob HostileJob() {
  ForgedJob job;
  job.model = kModel;
  job.chunk_bytes = kChunkBytes;
  job.owners = kOwners;
  job.cores = kCores;
  job.rank = kRank;
  job.world = kWorld;
  job.session = kSession;
  return job;
}

// Correct WEIGHTS of iteration 0 for `chunk` (ServerValue), on its owner's connection.
bool SendCorrectWeights(ForgedPhubd& phubd, std::uint32_t chunk) {
  const keys::Chunk& c = Table().chunks()[chunk];
  std::vector<float> values;
  for (std::uint64_t i = c.offset; i < c.offset + c.elements; ++i) {
    values.push_back(ServerValue(c.tensor, i));
  }
  return phubd.SendWeights(chunk, 0, values);
}

// ---- The real PsClient ----

// PsClient as every test here meets it, on its own thread (ps_client_thread.h): rank 1 of 2,
// every buffer kUntouched, Connect, Init and Close (then destroyed) queued at once. Destroying
// this closes every socket of `phubd` first, which ends any call still blocked on it.
struct HostileClient {
  explicit HostileClient(ForgedPhubd& phubd)
      : thread(Options(phubd.port()), {kRank, kWorld}, kModel, ExpectedWeights({}),
               [&phubd] { phubd.CloseAll(); }),
        connect(thread.Connect()),
        init(thread.Run([](client::PsClient& c) { return c.Init(); })),
        close(thread.Destroy()) {}

  static client::PsClientOptions Options(std::uint16_t port) {
    client::PsClientOptions options;
    options.port = port;
    options.connect_timeout_ms = 2000;
    return options;
  }

  PsClientThread thread;
  PsClientThread::Call connect, init, close;  // close: done once the client is destroyed
};

// ---- The attacks ----

struct WeightsAttack {
  std::string name;
  std::vector<std::uint32_t> correct_first;  // correct WEIGHTS of these chunks go first
  std::uint32_t core = 0;                    // the connection the hostile message goes on
  WireHeader header;                         // followed by header.payload_bytes of kHostile
  std::string reason;                        // what the client's error must say
};

std::ostream& operator<<(std::ostream& out, const WeightsAttack& a) { return out << a.name; }

WireHeader Weights(std::uint32_t worker, std::uint32_t chunk, std::uint64_t iteration,
                   std::uint32_t payload_bytes) {
  return {Op::kWeights, worker, chunk, iteration, payload_bytes};
}

// `bytes` bytes of kHostile floats (the last one cut short when bytes is not a multiple of 4).
std::vector<std::byte> HostileBytes(std::uint32_t bytes) {
  std::vector<float> floats((bytes + 3) / 4, kHostile);
  auto all = std::as_bytes(std::span(floats));
  return {all.begin(), all.begin() + bytes};
}

std::vector<WeightsAttack> Attacks() {
  return {
      // 1. A chunk id past the table (5 chunks): it must not index the client's chunk table.
      {"ChunkOutOfRange", {}, 0, Weights(kRank, kChunks, 0, 64), "WEIGHTS for chunk 5 of 5"},
      {"ChunkIdUint32Max", {}, 0, Weights(kRank, 0xFFFFFFFFu, 0, 64),
       "WEIGHTS for chunk 4294967295 of 5"},
      // 2. Chunk 1 belongs to core 1: core 0's connection must not be able to write it.
      {"ChunkOfAnotherCore", {}, 0, Weights(kRank, 1, 0, 64),
       "WEIGHTS of chunk 1 from core 0; the chunk belongs to core 1"},
      // 3. No payload for a 64-byte chunk: it must not count as landed.
      {"ZeroLength", {}, 0, Weights(kRank, 0, 0, 0), "WEIGHTS of chunk 0 carry 0 bytes, expected 64"},
      // 4. A payload of another size: chunk 2 is a's 8-float tail, a full chunk would overrun
      //    it; a short one would leave part of chunk 3 stale.
      {"PayloadLongerThanTheChunk", {}, 0, Weights(kRank, 2, 0, 64),
       "WEIGHTS of chunk 2 carry 64 bytes, expected 32"},
      {"PayloadShorterThanTheChunk", {}, 1, Weights(kRank, 3, 0, 60),
       "WEIGHTS of chunk 3 carry 60 bytes, expected 64"},
      // 5. The same chunk and iteration twice: while its tensor awaits other chunks (counted
      //    twice, a chunk would let a complete with another missing), and once its tensor is
      //    complete (b's 'pending' counter underflowed there, and Wait(b) never returned again).
      {"SameChunkAndIterationTwice", {0}, 0, Weights(kRank, 0, 0, 64),
       "unexpected WEIGHTS for chunk 0 of iteration 0"},
      {"SameChunkTwiceAfterItsTensorCompleted", {3, 4}, 1, Weights(kRank, 4, 0, 16),
       "unexpected WEIGHTS for chunk 4 of iteration 0 (tensor 1 awaits nothing"},
      // 6. Rank 0's weights, misrouted to rank 1.
      {"AddressedToAnotherRank", {}, 0, Weights(0, 0, 0, 64),
       "WEIGHTS addressed to worker 0 reached rank 1"},
      // Beyond the six: weights of an iteration not in flight, and an op no worker receives.
      {"IterationNotInFlight", {}, 0, Weights(kRank, 0, 1, 64),
       "unexpected WEIGHTS for chunk 0 of iteration 1"},
      {"PushFromTheServer", {}, 0, {Op::kPush, kRank, 0, 0, 64},
       "phubd sent PUSH; a worker only receives WEIGHTS"},
  };
}

class HostileWeights : public ::testing::TestWithParam<WeightsAttack> {};

// The forged phubd welcomes PsClient (rank 1 of 2, 2 cores), sends the correct WEIGHTS the
// attack builds on, then the hostile message on the attack's connection. Bounds: PsClient drops
// that connection within 2 s; Init returns within 5 s, non-OK, its message naming the fault;
// the client closes within 5 s more; its weights hold exactly the correct WEIGHTS sent and not
// one hostile byte.
TEST_P(HostileWeights, InitFailsNamingTheFaultAndNothingLands) {
  const WeightsAttack& attack = GetParam();
  ForgedPhubd phubd(HostileJob());
  ASSERT_TRUE(phubd.listening());
  HostileClient client(phubd);
  ASSERT_TRUE(phubd.Handshake());
  for (std::uint32_t k : attack.correct_first) ASSERT_TRUE(SendCorrectWeights(phubd, k));
  ASSERT_TRUE(phubd.Send(attack.core, attack.header, HostileBytes(attack.header.payload_bytes)));

  EXPECT_TRUE(phubd.DroppedByClient(attack.core, kDropPromptly))
      << "PsClient kept the connection that carried the attack for 2 s";
  ASSERT_TRUE(PsClientThread::Done(client.init, kStep)) << "Init still blocked 5 s after the attack";
  ASSERT_TRUE(client.connect.get().ok()) << client.connect.get();
  EXPECT_FALSE(client.init.get().ok()) << "Init accepted the attack";
  EXPECT_THAT(std::string(client.init.get().message()), HasSubstr(attack.reason));
  phubd.CloseAll();
  ASSERT_TRUE(PsClientThread::Done(client.close, kStep)) << "PsClient did not close within 5 s";
  EXPECT_EQ(client.thread.weights(), ExpectedWeights(attack.correct_first))
      << "the weights are not exactly the correct WEIGHTS sent before the attack";
}

INSTANTIATE_TEST_SUITE_P(Attacks, HostileWeights, ::testing::ValuesIn(Attacks()),
                         [](const auto& info) { return info.param.name; });

// Positive control, proving the forged phubd speaks the protocol: correct WEIGHTS of iteration 0
// for every chunk, each on its owner's connection and last chunk first, complete Init within
// 5 s with exactly those values in every buffer; Close then says BYE on each data connection
// and Goodbye (0 pushes) on the control connection, and returns OK within 5 s.
TEST(HostileServerControl, CorrectWeightsOfEveryChunkCompleteInitWithExactlyThoseValues) {
  ForgedPhubd phubd(HostileJob());
  ASSERT_TRUE(phubd.listening());
  HostileClient client(phubd);
  ASSERT_TRUE(phubd.Handshake());
  std::vector<std::uint32_t> sent;
  for (std::uint32_t k = kChunks; k-- > 0;) {
    ASSERT_TRUE(SendCorrectWeights(phubd, k));
    sent.push_back(k);
  }

  ASSERT_TRUE(PsClientThread::Done(client.init, kStep))
      << "Init still blocked 5 s after every chunk was sent";
  ASSERT_TRUE(client.connect.get().ok()) << client.connect.get();
  EXPECT_TRUE(client.init.get().ok()) << client.init.get();
  for (std::uint32_t core = 0; core < kCores; ++core) EXPECT_TRUE(phubd.ExpectBye(core));
  EXPECT_TRUE(phubd.ExpectGoodbye(0));
  ASSERT_TRUE(PsClientThread::Done(client.close, kStep)) << "PsClient did not close within 5 s";
  EXPECT_TRUE(client.close.get().ok()) << client.close.get();
  EXPECT_EQ(client.thread.weights(), ExpectedWeights(sent));
}

// A Membership no phubd would send (elastic jobs: ps_client_membership.cc's one check) fails
// the client's waiting call, naming what is wrong, and is not kept.
TEST(HostileServerControl, AMembershipNoPhubdWouldSendFailsInitNamingIt) {
  struct Attack {
    std::string name;
    bool elastic;
    std::uint64_t from;
    std::vector<std::uint32_t> ranks;
    std::string reason;
  };
  const std::vector<Attack> attacks = {
      {"InAFixedJob", false, 3, {0, 1}, "this worker's fixed job cannot have"},
      {"FromIterationZero", true, 0, {0, 1}, "starts at iteration 0"},
      {"RanksNotAscending", true, 3, {1, 0}, "lists ranks out of range or not ascending"},
      {"RankPastTheMaximum", true, 3, {0, 5}, "lists ranks out of range or not ascending"},
      {"MoreMembersThanSlots", true, 3, {0, 1, 2}, "lists 3 members (the job has at most 2)"},
  };
  for (const Attack& attack : attacks) {
    SCOPED_TRACE(attack.name);
    ForgedPhubd phubd(HostileJob());
    ASSERT_TRUE(phubd.listening());
    client::PsClientOptions options = HostileClient::Options(phubd.port());
    if (attack.elastic) options.min_workers = 1;
    PsClientThread thread(options, {kRank, kWorld}, kModel, ExpectedWeights({}),
                          [&phubd] { phubd.CloseAll(); });
    PsClientThread::Call connect = thread.Connect();
    PsClientThread::Call init = thread.Run([](client::PsClient& c) { return c.Init(); });
    PsClientThread::Call close = thread.Destroy();
    proto::Welcome welcome = phubd.MakeWelcome();
    if (attack.elastic) {
      welcome.set_rank(kRank);
      proto::Membership& m = *welcome.mutable_membership();
      m.set_from_iteration(1);
      m.add_ranks(0);
      m.add_ranks(1);
    }
    ASSERT_TRUE(phubd.Handshake(welcome));
    proto::ControlMessage message;
    message.mutable_membership()->set_from_iteration(attack.from);
    for (std::uint32_t r : attack.ranks) message.mutable_membership()->add_ranks(r);
    ASSERT_TRUE(phubd.Reply(message));
    ASSERT_TRUE(PsClientThread::Done(init, kStep)) << "Init still blocked 5 s after the Membership";
    ASSERT_TRUE(connect.get().ok()) << connect.get();
    EXPECT_FALSE(init.get().ok());
    EXPECT_THAT(std::string(init.get().message()), HasSubstr(attack.reason));
    ASSERT_TRUE(PsClientThread::Done(close, kStep)) << "PsClient did not close within 5 s";
  }
}

}  // namespace
}  // namespace phub::testing
