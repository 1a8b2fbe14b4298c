// A forged phubd against a real PsClient: a plain TCP server in the test answers the Hello with
// a Welcome of its making, takes the data connections, and then sends WEIGHTS no phubd would (a
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

#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "phub/client/ps_client.h"
#include "phub/common/version.h"
#include "phub/keys/key_table.h"
#include "phub/transport/wire_header.h"
#include "proto/phub.pb.h"
#include "spdlog/spdlog.h"
#include "tests/integration/forged_client.h"
#include "tests/integration/test_data.h"

namespace phub::testing {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;
using ::testing::HasSubstr;
using transport::Op;
using transport::WireHeader;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Each wait of the forged phubd, and of the test on PsClient: ample on a loaded 2-core machine
// under ASan, short enough that a regression fails the test instead of hanging it.
constexpr Millis kStep{5000};
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

// A control message from the forged phubd's side, as an AssertionResult.
AssertionResult ReadControl(RawSocket& socket, proto::ControlMessage& out) {
  const RawSocket::Read read = socket.ReadMessage(out, kStep);
  if (read != RawSocket::Read::kOk) return AssertionFailure() << "no control message: " << read;
  return AssertionSuccess();
}

// ---- The forged phubd ----

// phubd as the test plays it, on the test's thread: a control listener and one data listener
// per core on 127.0.0.1. Handshake takes PsClient through Hello, Welcome and ATTACH as phubd
// would; after that the test sends on the data connections whatever it likes.
class ForgedPhubd {
 public:
  ForgedPhubd() : control_listener_(RawListener::Listen()), data_(kCores) {
    for (std::uint32_t c = 0; c < kCores; ++c) data_listeners_.push_back(RawListener::Listen());
  }

  bool listening() const {
    bool all = control_listener_.listening();
    for (const RawListener& l : data_listeners_) all = all && l.listening();
    return all;
  }
  std::uint16_t port() const { return control_listener_.port(); }

  // Accepts the control connection, checks the Hello, answers with the Welcome phubd's
  // ControlPlane::StartJob would build (placement kOwners), then accepts each core's data
  // connection and checks its ATTACH.
  AssertionResult Handshake() {
    control_ = control_listener_.Accept(kStep);
    if (!control_.connected()) return AssertionFailure() << "PsClient did not connect within 5 s";
    proto::ControlMessage hello_message;
    if (AssertionResult read = ReadControl(control_, hello_message); !read) return read;
    const proto::Hello& hello = hello_message.hello();
    bool as_expected = hello_message.has_hello() &&
                       hello.protocol_version() == kProtocolVersion && hello.rank() == kRank &&
                       hello.world_size() == kWorld &&
                       hello.tensors_size() == static_cast<int>(kModel.size());
    for (int t = 0; as_expected && t < hello.tensors_size(); ++t) {
      as_expected = hello.tensors(t).name() == kModel[t].name &&
                    hello.tensors(t).elements() == kModel[t].elements;
    }
    if (!as_expected) {
      return AssertionFailure() << "not the Hello PsClient should send: "
                                << hello_message.ShortDebugString();
    }

    proto::ControlMessage welcome_message;
    proto::Welcome& welcome = *welcome_message.mutable_welcome();
    welcome.set_protocol_version(kProtocolVersion);
    welcome.set_chunk_bytes(kChunkBytes);
    for (keys::CoreIndex owner : kOwners) welcome.add_chunk_owner(owner);
    for (std::uint32_t c = 0; c < kCores; ++c) {
      proto::CoreEndpoint& core = *welcome.add_cores();
      core.set_server(0);
      core.set_core(c);
      core.set_host("127.0.0.1");
      core.set_port(data_listeners_[c].port());
    }
    welcome.set_session(kSession);
    welcome.set_weights_from_server(false);
    welcome.set_optimizer("forged");
    welcome.set_transport("tcp");
    if (!control_.SendMessage(welcome_message)) {
      return AssertionFailure() << "could not send the Welcome";
    }

    for (std::uint32_t c = 0; c < kCores; ++c) {
      data_[c] = data_listeners_[c].Accept(kStep);
      if (!data_[c].connected()) {
        return AssertionFailure() << "PsClient did not open core " << c << "'s data connection";
      }
      transport::EncodedHeader bytes;
      const RawSocket::Read got = data_[c].ReadExact(bytes, kStep);
      if (got != RawSocket::Read::kOk) return AssertionFailure() << "no ATTACH on core " << c << ": " << got;
      auto attach = transport::DecodeWireHeader(bytes);
      if (!attach.ok()) return AssertionFailure() << "core " << c << ": " << attach.status();
      if (attach->op != Op::kAttach || attach->worker != kRank || attach->chunk != c ||
          attach->iteration != kSession || attach->payload_bytes != 0) {
        return AssertionFailure() << "core " << c << " got " << OpName(attach->op) << " worker "
                                  << attach->worker << " chunk " << attach->chunk
                                  << " iteration " << attach->iteration << ", not the ATTACH";
      }
    }
    return AssertionSuccess();
  }

  // One data-plane message on core `core`'s connection: the header, then `payload`.
  bool Send(std::uint32_t core, const WireHeader& header, std::span<const std::byte> payload) {
    const transport::EncodedHeader encoded = transport::EncodeWireHeader(header);
    std::vector<std::byte> bytes(encoded.begin(), encoded.end());
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    return data_[core].Send(bytes);
  }

  // Correct WEIGHTS of iteration 0 for `chunk` (ServerValue), on its owner's connection.
  bool SendCorrectWeights(std::uint32_t chunk) {
    const keys::Chunk& c = Table().chunks()[chunk];
    std::vector<float> values;
    for (std::uint64_t i = c.offset; i < c.offset + c.elements; ++i) {
      values.push_back(ServerValue(c.tensor, i));
    }
    return Send(Table().owner(chunk),
                {Op::kWeights, kRank, chunk, 0, static_cast<std::uint32_t>(c.bytes())},
                std::as_bytes(std::span(values)));
  }

  // Whether PsClient closed core `core`'s data connection within `timeout`.
  bool DroppedByClient(std::uint32_t core, Millis timeout) {
    return data_[core].WaitClosed(timeout);
  }

  // The next message on core `core`'s connection is the client's BYE.
  AssertionResult ExpectBye(std::uint32_t core) {
    transport::EncodedHeader bytes;
    const RawSocket::Read got = data_[core].ReadExact(bytes, kStep);
    if (got != RawSocket::Read::kOk) return AssertionFailure() << "no BYE on core " << core << ": " << got;
    auto bye = transport::DecodeWireHeader(bytes);
    if (!bye.ok()) return AssertionFailure() << "core " << core << ": " << bye.status();
    if (bye->op != Op::kBye || bye->worker != kRank || bye->payload_bytes != 0) {
      return AssertionFailure() << "core " << core << " got " << OpName(bye->op) << ", not BYE";
    }
    return AssertionSuccess();
  }

  // The next control message is a Goodbye after `iterations` pushes.
  AssertionResult ExpectGoodbye(std::uint64_t iterations) {
    proto::ControlMessage message;
    if (AssertionResult read = ReadControl(control_, message); !read) return read;
    if (!message.has_goodbye() || message.goodbye().iterations() != iterations) {
      return AssertionFailure() << "not a Goodbye after " << iterations
                                << " pushes: " << message.ShortDebugString();
    }
    return AssertionSuccess();
  }

  // Closes every socket: any PsClient call still blocked on this phubd returns.
  void CloseAll() {
    control_.Close();
    for (RawSocket& d : data_) d.Close();
    control_listener_.Close();
    for (RawListener& l : data_listeners_) l.Close();
  }

 private:
  RawListener control_listener_;
  std::vector<RawListener> data_listeners_;
  RawSocket control_;
  std::vector<RawSocket> data_;  // by core
};

// ---- The real PsClient ----

// PsClient on its own thread: Connect, Init, Close, then destroyed there. Everything it writes
// lives in State, shared with the thread, so a client still hung past every deadline is
// abandoned (the test has failed) rather than freed under it.
class ClientThread {
 public:
  // Starts connecting to `phubd`, whose CloseAll the destructor calls first.
  explicit ClientThread(ForgedPhubd& phubd) : phubd_(phubd), state_(std::make_shared<State>()) {
    for (const auto& t : kModel) state_->weights.emplace_back(t.elements, kUntouched);
    init_returned_ = state_->init_returned.get_future().share();
    finished_ = state_->finished.get_future().share();
    spdlog::default_logger_raw();  // spdlog's registry exists before the client thread logs
    thread_ = std::thread([state = state_, port = phubd.port()] { Run(*state, port); });
  }
  ~ClientThread() {
    phubd_.CloseAll();
    if (finished_.wait_for(kStep) == std::future_status::ready) {
      thread_.join();
      return;
    }
    ADD_FAILURE() << "PsClient still blocked 5 s after the forged phubd closed every socket";
    thread_.detach();
  }
  ClientThread(const ClientThread&) = delete;
  ClientThread& operator=(const ClientThread&) = delete;

  // Whether Init (or Connect, when it failed) returned within `timeout`.
  bool InitReturned(Millis timeout) const {
    return init_returned_.wait_for(timeout) == std::future_status::ready;
  }
  // Whether the client closed and was destroyed within `timeout`.
  bool Finished(Millis timeout) const {
    return finished_.wait_for(timeout) == std::future_status::ready;
  }
  // REQUIRES: InitReturned.
  const Status& connect_status() const { return state_->connect; }
  const Status& init_status() const { return state_->init; }
  // REQUIRES: Finished (the client's event loop, which writes the weights, is gone).
  const Status& close_status() const { return state_->close; }
  const std::vector<std::vector<float>>& weights() const { return state_->weights; }

 private:
  struct State {
    std::vector<std::vector<float>> weights;
    Status connect, init, close;
    std::promise<void> init_returned, finished;
  };

  static void Run(State& state, std::uint16_t port) {
    std::vector<std::span<float>> spans;
    for (auto& w : state.weights) spans.emplace_back(w);
    client::PsClientOptions options;
    options.port = port;
    options.rank = kRank;
    options.world_size = kWorld;
    options.connect_timeout_ms = 2000;
    auto client = client::PsClient::Connect(options, kModel, spans);
    if (!client.ok()) {
      state.connect = client.status();
      state.init = absl::FailedPreconditionError("Init not called: Connect failed");
      state.init_returned.set_value();
      state.finished.set_value();
      return;
    }
    state.init = (*client)->Init();
    state.init_returned.set_value();
    state.close = (*client)->Close();
    client->reset();
    state.finished.set_value();
  }

  ForgedPhubd& phubd_;
  std::shared_ptr<State> state_;
  std::shared_future<void> init_returned_;
  std::shared_future<void> finished_;
  std::thread thread_;
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
  ForgedPhubd phubd;
  ASSERT_TRUE(phubd.listening());
  ClientThread client(phubd);
  ASSERT_TRUE(phubd.Handshake());
  for (std::uint32_t k : attack.correct_first) ASSERT_TRUE(phubd.SendCorrectWeights(k));
  ASSERT_TRUE(phubd.Send(attack.core, attack.header, HostileBytes(attack.header.payload_bytes)));

  EXPECT_TRUE(phubd.DroppedByClient(attack.core, kDropPromptly))
      << "PsClient kept the connection that carried the attack for 2 s";
  ASSERT_TRUE(client.InitReturned(kStep)) << "Init still blocked 5 s after the attack";
  ASSERT_TRUE(client.connect_status().ok()) << client.connect_status();
  EXPECT_FALSE(client.init_status().ok()) << "Init accepted the attack";
  EXPECT_THAT(std::string(client.init_status().message()), HasSubstr(attack.reason));
  phubd.CloseAll();
  ASSERT_TRUE(client.Finished(kStep)) << "PsClient did not close within 5 s";
  EXPECT_EQ(client.weights(), ExpectedWeights(attack.correct_first))
      << "the weights are not exactly the correct WEIGHTS sent before the attack";
}

INSTANTIATE_TEST_SUITE_P(Attacks, HostileWeights, ::testing::ValuesIn(Attacks()),
                         [](const auto& info) { return info.param.name; });

// Positive control, proving the forged phubd speaks the protocol: correct WEIGHTS of iteration 0
// for every chunk, each on its owner's connection and last chunk first, complete Init within
// 5 s with exactly those values in every buffer; Close then says BYE on each data connection
// and Goodbye (0 pushes) on the control connection, and returns OK within 5 s.
TEST(HostileServerControl, CorrectWeightsOfEveryChunkCompleteInitWithExactlyThoseValues) {
  ForgedPhubd phubd;
  ASSERT_TRUE(phubd.listening());
  ClientThread client(phubd);
  ASSERT_TRUE(phubd.Handshake());
  std::vector<std::uint32_t> sent;
  for (std::uint32_t k = kChunks; k-- > 0;) {
    ASSERT_TRUE(phubd.SendCorrectWeights(k));
    sent.push_back(k);
  }

  ASSERT_TRUE(client.InitReturned(kStep)) << "Init still blocked 5 s after every chunk was sent";
  ASSERT_TRUE(client.connect_status().ok()) << client.connect_status();
  EXPECT_TRUE(client.init_status().ok()) << client.init_status();
  for (std::uint32_t core = 0; core < kCores; ++core) EXPECT_TRUE(phubd.ExpectBye(core));
  EXPECT_TRUE(phubd.ExpectGoodbye(0));
  ASSERT_TRUE(client.Finished(kStep)) << "PsClient did not close within 5 s";
  EXPECT_TRUE(client.close_status().ok()) << client.close_status();
  EXPECT_EQ(client.weights(), ExpectedWeights(sent));
}

}  // namespace
}  // namespace phub::testing
