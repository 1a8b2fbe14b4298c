// A member of a running job sends data-plane messages no PsClient would (zero-length PUSH/INIT
// naming any chunk, malformed headers, forged fields): phubd closes that connection, stays up,
// tells the job's honest worker (JOB_STALLED) without ever sending it weights the attacker
// made, and serves the next job. Plus ATTACH forgeries and data connections with no job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <thread>
#include <functional>

#include "tests/integration/hostile_fixture.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using transport::Op;
using Bytes = std::vector<std::byte>;

constexpr auto kClosePromptly = std::chrono::seconds(2);

Bytes Raw(const transport::EncodedHeader& header, std::size_t payload_bytes = 0) {
  Bytes bytes(header.begin(), header.end());
  bytes.resize(bytes.size() + payload_bytes, std::byte{0x3f});
  return bytes;
}

// Chunks of the job as the forged member sees them (the Welcome's placement).
std::uint32_t ChunkOn(const ForgedMember& m, std::uint32_t core) {
  return m.table->chunks_on_core(core).front();
}
std::uint32_t ChunkBytes(const ForgedMember& m, std::uint32_t chunk) {
  return static_cast<std::uint32_t>(m.table->chunks()[chunk].bytes());
}

struct DataAttack {
  std::string name;
  std::uint32_t forged_rank = 1;  // the honest worker is the other rank
  bool after_init = true;         // sent once rank 0's initial weights are in phubd (rank 0
                                  // is the honest worker, or the forged one sending them right)
  // Sent on the forged member's connection to core 0.
  std::function<Bytes(const ForgedMember&)> bytes;
  bool includes_a_valid_push = false;  // weights may then legitimately move
};

std::ostream& operator<<(std::ostream& out, const DataAttack& a) { return out << a.name; }

Bytes ZeroLength(Op op, std::uint32_t worker, std::uint32_t chunk, std::uint64_t iteration) {
  return Raw(Header(op, worker, chunk, iteration, 0));
}

std::vector<DataAttack> Attacks() {
  std::vector<DataAttack> attacks;
  // Zero-length messages: a header that needs no slot must be checked like one that does.
  attacks.push_back({"ZeroLengthPushOfTheFirstChunkOutOfRange", 1, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kPush, 1, kHostileChunks, 1);
                     }});
  attacks.push_back({"ZeroLengthPushOfChunkUint32Max", 1, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kPush, 1, 0xFFFFFFFFu, 1);
                     }});
  attacks.push_back({"ZeroLengthPushOfAnotherCoresChunk", 1, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kPush, 1, ChunkOn(m, 1), 1);
                     }});
  attacks.push_back({"ZeroLengthPushOfItsOwnChunkIsNotAPush", 1, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kPush, 1, ChunkOn(m, 0), 1);
                     }});
  attacks.push_back({"ZeroLengthPushNamingAnotherRank", 1, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kPush, 0, ChunkOn(m, 0), 1);
                     }});
  attacks.push_back({"ZeroLengthInitFromRank1", 1, false, [](const ForgedMember& m) {
                       return ZeroLength(Op::kInit, 1, ChunkOn(m, 0), 0);
                     }});
  attacks.push_back({"ZeroLengthInitOfAChunkOutOfRange", 0, false, [](const ForgedMember& m) {
                       return ZeroLength(Op::kInit, 0, kHostileChunks, 0);
                     }});
  attacks.push_back({"ZeroLengthInitOfAnotherCoresChunk", 0, false, [](const ForgedMember& m) {
                       return ZeroLength(Op::kInit, 0, ChunkOn(m, 1), 0);
                     }});
  // Headers that do not decode.
  attacks.push_back({"BadMagic", 1, true, [](const ForgedMember& m) {
                       Bytes b = Raw(
                           Header(Op::kPush, 1, ChunkOn(m, 0), 1, ChunkBytes(m, ChunkOn(m, 0))));
                       b[0] = std::byte{'X'};
                       return b;
                     }});
  attacks.push_back({"UnknownOp", 1, true, [](const ForgedMember& m) {
                       Bytes b = Raw(Header(Op::kPush, 1, ChunkOn(m, 0), 1, 0));
                       b[6] = std::byte{99};
                       return b;
                     }});
  attacks.push_back({"OtherProtocolVersion", 1, true, [](const ForgedMember& m) {
                       Bytes b = Raw(Header(Op::kPush, 1, ChunkOn(m, 0), 1, 0));
                       b[4] = std::byte{7};
                       return b;
                     }});
  // Headers that decode but lie.
  attacks.push_back({"PayloadClaimAtTheOneGibLimit", 1, true, [](const ForgedMember& m) {
                       return Raw(
                           Header(Op::kPush, 1, ChunkOn(m, 0), 1, transport::kMaxPayloadBytes));
                     }});
  attacks.push_back({"PayloadClaimOfFourGib", 1, true, [](const ForgedMember& m) {
                       return Raw(Header(Op::kPush, 1, ChunkOn(m, 0), 1, 0xFFFFFFFFu));
                     }});
  attacks.push_back({"ErrorClaimingAOneGibReason", 1, true, [](const ForgedMember& m) {
                       return Raw(Header(Op::kError, 1, 0, 0, transport::kMaxPayloadBytes));
                     }});
  attacks.push_back({"PushNamingAnotherRank", 1, true, [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       return Raw(Header(Op::kPush, 0, k, 1, ChunkBytes(m, k)), ChunkBytes(m, k));
                     }});
  attacks.push_back({"PushFarAheadOfTheIteration", 1, true, [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       return Raw(Header(Op::kPush, 1, k, 1000, ChunkBytes(m, k)),
                                  ChunkBytes(m, k));
                     }});
  attacks.push_back({"PushBeforeTheInitialWeights", 1, false, [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       return Raw(Header(Op::kPush, 1, k, 1, ChunkBytes(m, k)), ChunkBytes(m, k));
                     }});
  attacks.push_back({"SecondPushOfAChunkInOneIteration", 1, true,
                     [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       Bytes b =
                           Raw(Header(Op::kPush, 1, k, 1, ChunkBytes(m, k)), ChunkBytes(m, k));
                       Bytes twice = b;
                       twice.insert(twice.end(), b.begin(), b.end());
                       return twice;
                     },
                     /*includes_a_valid_push=*/true});
  attacks.push_back({"WeightsFromAWorker", 1, true, [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       return Raw(Header(Op::kWeights, 1, k, 1, ChunkBytes(m, k)),
                                  ChunkBytes(m, k));
                     }});
  // Forged rank 0 sent the initial weights itself; then it sends INIT again.
  attacks.push_back({"SecondInitOfAChunk", 0, true, [](const ForgedMember& m) {
                       auto k = ChunkOn(m, 0);
                       return Raw(Header(Op::kInit, 0, k, 0, ChunkBytes(m, k)), ChunkBytes(m, k));
                     }});
  attacks.push_back({"ZeroLengthSecondInitOfAChunk", 0, true, [](const ForgedMember& m) {
                       return ZeroLength(Op::kInit, 0, ChunkOn(m, 0), 0);
                     }});
  attacks.push_back({"SecondAttachOnAnAttachedConnection", 1, true, [](const ForgedMember& m) {
                       return Raw(AttachHeader(1, 0, m.welcome.session()));
                     }});
  return attacks;
}

class HostileDataPlane : public ::testing::TestWithParam<DataAttack> {};

// The attacker (one rank of a 2-worker job on 2 cores, honest PsClient the other) sends the
// attack on its attached connection to core 0. Bounds: the connection closes within 2 s; the
// honest worker fails with "stalled" within 5 s while the attacker's control connection is
// still open; no WEIGHTS the attack could have caused reach anyone; then a real job completes
// within 20 s with the reference's weights, and phubd holds < 200 MiB and < 64 descriptors.
TEST_P(HostileDataPlane, ClosesTheAttackerStallsTheJobAndKeepsServing) {
  const DataAttack& attack = GetParam();
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--cores", "2"});
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, attack.forged_rank, job));
  ForgedMember& forged = job.forged;
  ASSERT_EQ(forged.data.size(), 2u);
  ASSERT_FALSE(forged.table->chunks_on_core(0).empty());
  ASSERT_FALSE(forged.table->chunks_on_core(1).empty());

  Status honest_outcome;
  std::atomic<bool> honest_initialised{false};
  auto honest_run = [&] {
    honest_outcome = job.honest.client->Init();
    honest_initialised = honest_outcome.ok();
    if (honest_outcome.ok()) honest_outcome = RunIteration(job.honest, 1);
  };
  std::optional<BackgroundTask> honest;
  if (attack.after_init) {
    honest.emplace(phubd, honest_run);
    if (attack.forged_rank == 0) {
      ASSERT_TRUE(ForgedInit(forged));
    }
    for (std::uint32_t core = 0; core < 2; ++core) {
      ASSERT_TRUE(ReadInitialWeights(forged, core, std::chrono::seconds(5)))
          << "the initial weights did not reach the forged member from core " << core;
    }
    // "After Init" means after the honest worker's too: phubd sent both copies at once, but
    // the honest one may still be on its way (TSan's CI run attacked first, and the stall cut
    // the honest Init short with half its chunks landed).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!honest_initialised && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(honest_initialised) << "the honest worker's Init did not finish within 5 s";
  }

  ASSERT_TRUE(forged.data[0].Send(attack.bytes(forged)));
  DataPlaneWatch watch = WatchUntilClosed(forged.data[0], kClosePromptly);
  EXPECT_TRUE(watch.closed) << "phubd kept the attacker's connection open for 2 s";
  ASSERT_TRUE(phubd.process.Running())
      << "phubd died: exit " << *phubd.process.Wait(std::chrono::milliseconds(0));
  if (!attack.includes_a_valid_push) {
    // Every WEIGHTS the honest rank 0's Init caused was read before the attack.
    EXPECT_EQ(watch.weights_at_iteration_0, 0) << "phubd sent initial weights after the attack";
    EXPECT_EQ(watch.weights_after_iteration_0, 0) << "phubd broadcast weights after the attack";
  }

  if (!attack.after_init) honest.emplace(phubd, honest_run);
  EXPECT_TRUE(honest->Finish(std::chrono::seconds(5)))
      << "the honest worker neither finished nor failed within 5 s";
  EXPECT_FALSE(honest_outcome.ok());
  EXPECT_THAT(std::string(honest_outcome.message()), HasSubstr("stalled")) << honest_outcome;
  job.honest.client.reset();
  if (!attack.includes_a_valid_push) {
    // Before the attack the honest worker had its start weights, or rank 0's initial ones.
    EXPECT_EQ(job.honest.weights, attack.after_init ? InitialWeights() : job.honest_start)
        << "the honest worker got weights the attack made";
  }
  ForgedVanish(forged);
  ExpectServesAJobAndStaysSmall(phubd);
}

INSTANTIATE_TEST_SUITE_P(Attacks, HostileDataPlane, ::testing::ValuesIn(Attacks()),
                         [](const auto& info) { return info.param.name; });

// ATTACH forgeries on fresh data connections of a running job — a wrong session, a wrong core,
// a rank out of range, the honest worker's rank, its own rank again — are each closed within
// 2 s, and the real connections of both members keep working: a full iteration completes with
// the reference's weights.
TEST(HostileDataPlaneAttach, ForgedAttachesAreClosedAndTheRealOnesKeepWorking) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--cores", "2"});
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  ForgedMember& forged = job.forged;
  const std::uint64_t session = forged.welcome.session();
  {
    BackgroundTask init(phubd, [&] { EXPECT_TRUE(job.honest.client->Init().ok()); });
    for (std::uint32_t core = 0; core < 2; ++core) {
      EXPECT_TRUE(ReadInitialWeights(forged, core, std::chrono::seconds(5)));
    }
    ASSERT_TRUE(init.Finish(std::chrono::seconds(5)));
  }
  struct Forgery {
    const char* what;
    transport::EncodedHeader header;
  };
  const Forgery forgeries[] = {
      {"a wrong session", AttachHeader(1, 0, session + 1)},
      {"another core's index", AttachHeader(1, 1, session)},
      {"a rank out of range", AttachHeader(7, 0, session)},
      {"the honest worker's rank", AttachHeader(0, 0, session)},
      {"its own rank again", AttachHeader(1, 0, session)},
  };
  for (const Forgery& f : forgeries) {
    RawSocket socket = RawSocket::Connect(forged.DataPort(0));
    ASSERT_TRUE(socket.connected());
    ASSERT_TRUE(socket.SendWire(f.header));
    EXPECT_TRUE(socket.WaitClosed(kClosePromptly)) << "an ATTACH with " << f.what << " was kept";
  }
  ASSERT_TRUE(phubd.process.Running());

  Status honest_outcome;
  BackgroundTask honest(phubd, [&] { honest_outcome = RunIteration(job.honest, 1); });
  EXPECT_TRUE(ForgedIteration(forged, 1, std::chrono::seconds(5)))
      << "the forged member's real connections stopped working";
  EXPECT_TRUE(honest.Finish(std::chrono::seconds(5)));
  EXPECT_TRUE(honest_outcome.ok()) << honest_outcome;
  for (std::uint32_t t = 0; t < kHostileModel.size(); ++t) {
    for (std::uint64_t i = 0; i < kHostileModel[t].elements; ++i) {
      const double expected =
          TestValue(1, kInitRank, 0, t, i) -
          kHostileLr * (TestValue(1, 0, 1, t, i) + TestValue(1, 1, 1, t, i)) / 2.0;
      EXPECT_NEAR(job.honest.weights[t][i], expected, 1e-5) << "tensor " << t << " element " << i;
    }
  }
  ForgedLeave(forged);
  EXPECT_TRUE(job.honest.client->Close().ok());
  job.honest.client.reset();
  ExpectServesAJobAndStaysSmall(phubd);
}

// With no job running no data port listens: each job's lane opens its own when the job starts
// (core_lane.h), so a connection before is refused at once by the kernel (50 of them leave
// phubd small).
TEST(HostileDataPlaneAttach, DataPortWithoutAJobAcceptsNothing) {
  TempDir dir;
  std::uint16_t data_port = 0;
  {
    boost::asio::io_context context;  // a free port for core 0's listener
    boost::asio::ip::tcp::acceptor acceptor(
        context, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    data_port = acceptor.local_endpoint().port();
  }
  auto phubd = StartHostilePhubd(dir, {"--data-port-base", std::to_string(data_port)});
  for (int i = 0; i < 50; ++i) {
    RawSocket socket = RawSocket::Connect(data_port, Millis(0));  // one attempt, no retry
    EXPECT_FALSE(socket.connected()) << "connection " << i << " was accepted with no job";
  }
  ExpectServesAJobAndStaysSmall(phubd);
}

}  // namespace
}  // namespace phub::testing
