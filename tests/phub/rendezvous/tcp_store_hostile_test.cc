// The TCP rendezvous server against hostile clients (raw sockets, forged_client.h): garbage,
// lengths over the limit, frames that never finish, silence, more connections than allowed,
// requests sent without reading the replies. None of them may crash or wedge the server: each
// is cut off within its deadline, and the real ranks still complete.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/frame.h"
#include "phub/rendezvous/tcp_store.h"
#include "phub/rendezvous/tcp_store_server.h"
#include "tests/support/forged_client.h"

namespace phub::rendezvous {
namespace {

using phub::testing::Millis;
using phub::testing::RawSocket;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kWorld = 3;
constexpr char kJob[] = "hostile-test";

// Short deadlines, so that a test sees them act; room for kWorld + 2 connections.
TcpStoreServerOptions Options() {
  TcpStoreServerOptions options;
  options.bind_host = "127.0.0.1";
  options.world_size = kWorld;
  options.job = kJob;
  options.lifetime_ms = 30000;
  options.hello_timeout_ms = 300;
  options.frame_timeout_ms = 300;
  options.extra_connections = 2;
  return options;
}

std::string Frame(const Message& m) { return *EncodeFrame(m); }

Message Hello(std::uint32_t rank) {
  Message hello{.type = MessageType::kHello};
  hello.rank = rank;
  hello.world_size = kWorld;
  hello.job = kJob;
  return hello;
}

std::optional<Message> ReadReply(RawSocket& socket, Millis timeout = Millis(3000)) {
  std::array<std::byte, kFramePrefixBytes> prefix;
  if (socket.ReadExact(prefix, timeout) != RawSocket::Read::kOk) return std::nullopt;
  std::uint32_t length = 0;
  std::memcpy(&length, prefix.data(), prefix.size());
  if (length > kMaxFrameBytes) return std::nullopt;
  std::vector<std::byte> body(length);
  if (socket.ReadExact(body, timeout) != RawSocket::Read::kOk) return std::nullopt;
  auto message = DecodeBody(body);
  if (!message.ok()) return std::nullopt;
  return *message;
}

// The real job: every rank connects as a client, publishes, reads every rank's entry, finishes.
std::vector<Status> RunRealRanks(std::uint16_t port) {
  TcpAddress address{"127.0.0.1", port, kJob};
  std::vector<Status> status(kWorld);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> Status {
        PHUB_ASSIGN_OR_RETURN(auto store, TcpStore::Connect(address, r, kWorld, 10000));
        PHUB_RETURN_IF_ERROR(store->Publish(absl::StrCat("rank", r, ".addr"), absl::StrCat(r)));
        for (std::uint32_t q = 0; q < kWorld; ++q) {
          PHUB_ASSIGN_OR_RETURN(std::string v,
                                store->Lookup(absl::StrCat("rank", q, ".addr"), 10000));
          if (v != absl::StrCat(q)) return absl::InternalError("wrong value");
        }
        return store->Finish();
      }();
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

void ExpectRealRanksComplete(TcpStoreServer& server) {
  const auto status = RunRealRanks(server.port());
  for (std::uint32_t r = 0; r < kWorld; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r];
  EXPECT_TRUE(server.WaitStopped().ok());
}

bool ConnectionsDropTo(TcpStoreServer& server, std::size_t n, Millis within) {
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline) {
    if (server.TEST_connections() <= n) return true;
    std::this_thread::sleep_for(Millis(10));
  }
  return false;
}

TEST(TcpStoreHostile, GarbageOversizedAndUnfinishedFramesAreCutOffWhileRanksComplete) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::uint16_t port = (*server)->port();

  RawSocket http = RawSocket::Connect(port);
  ASSERT_TRUE(http.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawSocket oversized = RawSocket::Connect(port);
  ASSERT_TRUE(oversized.Send(std::string("\xff\xff\xff\xff\x03", 5)));
  RawSocket unfinished = RawSocket::Connect(port);  // claims 100 bytes, sends 10
  ASSERT_TRUE(unfinished.Send(std::string("\x64\x00\x00\x00\x03", 5) + std::string(5, 'k')));
  RawSocket silent = RawSocket::Connect(port);
  RawSocket bad_type = RawSocket::Connect(port);
  ASSERT_TRUE(bad_type.Send(std::string("\x01\x00\x00\x00\x63", 5)));

  // The first two are told why.
  auto reply = ReadReply(http);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, MessageType::kError);
  EXPECT_THAT(reply->text, HasSubstr("over the limit"));
  reply = ReadReply(oversized);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, MessageType::kError);
  reply = ReadReply(bad_type);
  ASSERT_TRUE(reply.has_value());
  EXPECT_THAT(reply->text, HasSubstr("unknown type 99"));

  ExpectRealRanksComplete(**server);
  for (RawSocket* s : {&http, &oversized, &unfinished, &silent, &bad_type}) {
    EXPECT_TRUE(s->WaitClosed(Millis(3000)));
  }
}

TEST(TcpStoreHostile, SilentAndUnfinishedConnectionsAreClosedAtTheirDeadlines) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  const auto start = Clock::now();
  RawSocket silent = RawSocket::Connect((*server)->port());
  RawSocket joined_then_stalls = RawSocket::Connect((*server)->port());
  ASSERT_TRUE(joined_then_stalls.Send(Frame(Hello(1))));
  auto welcome = ReadReply(joined_then_stalls);
  ASSERT_TRUE(welcome.has_value());
  EXPECT_EQ(welcome->type, MessageType::kWelcome);
  // Joined: idling between requests is allowed, half a frame is not.
  std::this_thread::sleep_for(Millis(500));
  EXPECT_EQ((*server)->TEST_connections(), 1u);  // the silent one is gone
  ASSERT_TRUE(joined_then_stalls.Send(Frame(Message{.type = MessageType::kDone}).substr(0, 3)));
  EXPECT_TRUE(joined_then_stalls.WaitClosed(Millis(3000)));
  EXPECT_TRUE(silent.WaitClosed(Millis(100)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  EXPECT_TRUE(ConnectionsDropTo(**server, 0, Millis(1000)));
  // Rank 1's slot is free again.
  ExpectRealRanksComplete(**server);
}

TEST(TcpStoreHostile, TooManyConnectionsCannotLockTheRanksOut) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::uint16_t port = (*server)->port();
  // Twice the limit of kWorld + 2, all silent: the first five hold a slot until their Hello
  // deadline, the rest are told to retry and closed at once.
  std::vector<RawSocket> crowd;
  for (int i = 0; i < 10; ++i) crowd.push_back(RawSocket::Connect(port));
  EXPECT_TRUE(ConnectionsDropTo(**server, kWorld + 2, Millis(2000)));
  EXPECT_LE((*server)->TEST_connections(), kWorld + 2);
  auto refusal = ReadReply(crowd.back());
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->type, MessageType::kError);
  EXPECT_TRUE(refusal->retryable);
  EXPECT_THAT(refusal->text, HasSubstr("limit of 5 connections"));
  // The ranks arrive while the crowd still holds every slot: they retry until it is cut off.
  ExpectRealRanksComplete(**server);
}

TEST(TcpStoreHostile, AClientThatSendsWithoutReadingIsCutOff) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  RawSocket greedy = RawSocket::Connect((*server)->port());
  Message publish{.type = MessageType::kPublish};
  publish.key = "big";
  publish.value = std::string(kMaxValueBytes, 'v');
  std::string requests = Frame(Hello(2)) + Frame(publish);
  Message lookup{.type = MessageType::kLookup};
  lookup.key = "big";
  // 4,000 lookups of 4 KiB: 16 MiB of replies, more than the socket buffers hold.
  for (int i = 0; i < 4000; ++i) requests += Frame(lookup);
  ASSERT_TRUE(greedy.Send(requests));
  // Never read: the server's write stalls, and it gives up at the reply deadline.
  EXPECT_TRUE(ConnectionsDropTo(**server, 0, Millis(5000)));
  greedy.Close();
  ExpectRealRanksComplete(**server);
}

TEST(TcpStoreHostile, ARequestWhileALookupWaitsIsRefused) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  RawSocket client = RawSocket::Connect((*server)->port());
  Message lookup{.type = MessageType::kLookup};
  lookup.key = "absent";
  lookup.wait_ms = 60000;
  ASSERT_TRUE(client.Send(Frame(Hello(0)) + Frame(lookup)));
  auto welcome = ReadReply(client);
  ASSERT_TRUE(welcome.has_value());
  EXPECT_EQ(welcome->type, MessageType::kWelcome);
  ASSERT_TRUE(client.Send(Frame(Message{.type = MessageType::kDone})));
  auto error = ReadReply(client);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->type, MessageType::kError);
  EXPECT_THAT(error->text, HasSubstr("one request at a time"));
  EXPECT_TRUE(client.WaitClosed(Millis(2000)));
  ExpectRealRanksComplete(**server);
}

TEST(TcpStoreHostile, AClientGoneWhileItsLookupWaitsIsForgotten) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  {
    RawSocket client = RawSocket::Connect((*server)->port());
    Message lookup{.type = MessageType::kLookup};
    lookup.key = "rank0.addr";
    lookup.wait_ms = 60000;
    ASSERT_TRUE(client.Send(Frame(Hello(0)) + Frame(lookup)));
    ASSERT_TRUE(ReadReply(client).has_value());
  }
  EXPECT_TRUE(ConnectionsDropTo(**server, 0, Millis(2000)));
  ExpectRealRanksComplete(**server);  // rank 0's publish offers to no dead connection
}

TEST(TcpStoreHostile, HellosOfAnotherProtocolAreRefusedSayingWhy) {
  auto server = TcpStoreServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  Message future = Hello(1);
  future.version = 7;
  RawSocket client = RawSocket::Connect((*server)->port());
  ASSERT_TRUE(client.Send(Frame(future)));
  auto error = ReadReply(client);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->type, MessageType::kError);
  EXPECT_THAT(error->text, HasSubstr("protocol version 7"));

  RawSocket before_hello = RawSocket::Connect((*server)->port());
  Message publish{.type = MessageType::kPublish};
  publish.key = "rank0.addr";
  publish.value = "forged";
  ASSERT_TRUE(before_hello.Send(Frame(publish)));
  error = ReadReply(before_hello);
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(error->text, HasSubstr("before Hello"));
  ExpectRealRanksComplete(**server);  // the forged entry was never stored
}

}  // namespace
}  // namespace phub::rendezvous
