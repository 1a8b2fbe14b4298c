// What only VerbsConnection does, on a real RDMA device (soft-RoCE in tests/verbs/'s guest, or
// an HCA): a dialer and an acceptor on two event loops of one process, set up over a loopback
// TCP side channel exactly as phubd and its workers are. Staged messages arrive whole and in
// order with credits recycled (many more messages than slots); direct writes land in the
// receiver's published zone with the header rebuilt, zero copy from registered memory and by
// copy from unregistered; a zone's iterations must follow in order; a stale ATTACH is refused
// before any zone is published; set-ups have a deadline; sizing limits fail with a message
// saying what; device memory is never copied from or into (GPUDirect). What every transport's
// Connection must do (the ATTACH first, placement, order, close, a peer that goes, refusals,
// accept hooks) is tested once for all of them in ../connection_conformance_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "phub/transport/control_channel.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/socket_options.h"
#include "phub/transport/socket_listener.h"
#include "phub/transport/verbs/verbs_connection.h"
#include "spdlog/spdlog.h"

namespace phub::transport::verbs {
namespace {

using ::testing::HasSubstr;

constexpr char kSkip[] =
    "no RDMA device here: tests/verbs/run_in_guest.sh runs these in a QEMU guest with soft-RoCE";

struct Received {
  WireHeader header;
  std::vector<std::byte> payload;
  bool in_zone = false;
};

// Records what arrives; payloads of published zones land in `zone_memory`, others in buffers
// of their own.
class RecordingHandler : public ConnectionHandler {
 public:
  std::vector<LandingZone> zones;

  StatusOr<std::span<std::byte>> ResolveSlot(Connection&, const WireHeader& header) override {
    for (const LandingZone& z : zones) {
      if (z.op == header.op && z.worker == header.worker && z.chunk == header.chunk) {
        in_zone_ = true;
        return z.bytes;
      }
    }
    in_zone_ = false;
    if (!staged_slot.empty()) return staged_slot;
    staging_.assign(header.payload_bytes, std::byte{0});
    return std::span<std::byte>(staging_);
  }
  Status OnReceived(Connection&, const WireHeader& header) override {
    Received r{header, {}, header.payload_bytes > 0 && in_zone_};
    if (header.payload_bytes > 0 && !in_zone_) r.payload = staging_;
    if (r.in_zone) {
      for (const LandingZone& z : zones) {
        if (z.op == header.op && z.worker == header.worker && z.chunk == header.chunk) {
          r.payload.assign(z.bytes.begin(), z.bytes.end());
        }
      }
    }
    std::lock_guard lock(mu_);
    received_.push_back(std::move(r));
    cv_.notify_all();
    return absl::OkStatus();
  }
  void OnClosed(Connection&, const Status& why) override {
    std::lock_guard lock(mu_);
    closed_ = true;
    why_ = why;
    cv_.notify_all();
  }
  StatusOr<std::vector<LandingZone>> LandingZones(const Connection&,
                                                  const WireHeader* attach) override {
    if (attach != nullptr && attach->iteration != expected_session) {
      return absl::PermissionDeniedError("ATTACH with a stale session");
    }
    return zones;
  }
  std::uint64_t expected_session = 0;
  std::span<std::byte> staged_slot;  // where messages outside the zones go, if set

  std::vector<Received> WaitFor(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return received_.size() >= n || closed_; });
    return received_;
  }
  Status WaitClosed() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return closed_; });
    return closed_ ? why_ : absl::DeadlineExceededError("not closed within 60 s");
  }

 private:
  std::vector<std::byte> staging_;
  bool in_zone_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Received> received_;
  bool closed_ = false;
  Status why_;
};

class VerbsConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ListDevices().empty()) GTEST_SKIP() << kSkip;
    // spdlog's registry exists before both loops log at once: its lazy creation in the
    // (uninstrumented) library is a race TSan reports (seen once, the two loops' Close).
    spdlog::default_logger_raw();
    auto device = VerbsDevice::Open({});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    Status status;
    accept_loop_.Run([&] {
      auto verbs = OpenVerbsLoop(device_, accept_loop_.context());
      if (!verbs.ok()) return void(status = verbs.status());
      accept_verbs_ = *verbs;
    });
    ASSERT_TRUE(status.ok()) << status;
    dial_loop_.Run([&] {
      auto verbs = OpenVerbsLoop(device_, dial_loop_.context());
      if (!verbs.ok()) return void(status = verbs.status());
      dial_verbs_ = *verbs;
    });
    ASSERT_TRUE(status.ok()) << status;
  }

  void TearDown() override {
    accept_loop_.Run([&] {
      if (acceptor_) acceptor_->Close(absl::OkStatus());
      acceptor_.reset();
      listener_.reset();
      accept_verbs_ = {};
    });
    dial_loop_.Run([&] {
      if (dialer_) dialer_->Close(absl::OkStatus());
      dialer_.reset();
      dial_verbs_ = {};
    });
  }

  // Sets up a dialer -> acceptor connection with the handlers' zones; both started.
  void Connect(const VerbsLimits& limits = {}, std::optional<WireHeader> attach = std::nullopt) {
    std::mutex mu;
    std::condition_variable cv;
    Status accept_status;
    bool accepted = false;
    accept_loop_.Run([&] {
      auto listener = SocketListener::Bind(accept_loop_.context(), "127.0.0.1", 0);
      ASSERT_TRUE(listener.ok()) << listener.status();
      listener_ = std::move(*listener);
      listener_->Start([&, limits](boost::asio::ip::tcp::socket socket) {
        VerbsConnection::Accept(std::move(socket), accept_verbs_, [&] { return &acceptor_handler_; },
                                limits, [&](StatusOr<std::shared_ptr<VerbsConnection>> c) {
                                  std::lock_guard lock(mu);
                                  accepted = true;
                                  cv.notify_all();
                                  if (!c.ok()) return void(accept_status = c.status());
                                  acceptor_ = *c;
                                  acceptor_->Start();
                                });
      });
    });
    auto socket = ConnectWithRetry(dial_loop_.context(), "127.0.0.1", listener_->port(), 5000);
    ASSERT_TRUE(socket.ok()) << socket.status();
    auto dialer =
        VerbsConnection::Dial(std::move(*socket), dial_verbs_, &dialer_handler_, limits, attach);
    if (dialer.ok()) {
      dialer_ = *dialer;
      dial_loop_.Run([&] { dialer_->Start(); });
    }
    std::unique_lock lock(mu);  // the acceptor's callback uses this frame: wait for it either way
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return accepted; });
    if (expect_refusal_) {
      ASSERT_FALSE(dialer.ok());
      dial_status_ = dialer.status();
      EXPECT_FALSE(accept_status.ok());
      return;
    }
    ASSERT_TRUE(dialer.ok()) << dialer.status();
    ASSERT_TRUE(accepted);
    ASSERT_TRUE(accept_status.ok()) << accept_status;
  }

  std::shared_ptr<const VerbsDevice> device_;
  EventLoop accept_loop_{"acceptor", -1};
  EventLoop dial_loop_{"dialer", -1};
  VerbsLoop accept_verbs_, dial_verbs_;
  std::unique_ptr<SocketListener> listener_;
  RecordingHandler acceptor_handler_, dialer_handler_;
  std::shared_ptr<VerbsConnection> acceptor_, dialer_;
  bool expect_refusal_ = false;
  Status dial_status_;
};

std::vector<std::byte> RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  return bytes;
}

TEST_F(VerbsConnectionTest, StagedMessagesArriveWholeAndInOrderWithCreditsRecycled) {
  VerbsLimits limits;
  limits.staged_slots = 3;  // 40 messages: the credits go round 13 times
  limits.staged_payload_bytes = 5000;
  limits.send_buffers = 2;
  ASSERT_NO_FATAL_FAILURE(Connect(limits));
  constexpr int kMessages = 40;
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kMessages; ++i) payloads.push_back(RandomBytes((i * 997) % 5001, i));
  std::atomic<int> done{0};
  dial_loop_.Run([&] {
    for (int i = 0; i < kMessages; ++i) {
      WireHeader h{Op::kPush, 3, static_cast<std::uint32_t>(i), 100u + i,
                   static_cast<std::uint32_t>(payloads[i].size())};
      dialer_->Send(h, payloads[i], [&](const Status& s) {
        EXPECT_TRUE(s.ok()) << s;
        ++done;
      });
    }
  });
  auto got = acceptor_handler_.WaitFor(kMessages);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(got[i].header.chunk, static_cast<std::uint32_t>(i));
    EXPECT_EQ(got[i].header.iteration, 100u + i);
    EXPECT_EQ(got[i].header.worker, 3u);
    EXPECT_EQ(got[i].payload, payloads[i]) << "message " << i;
  }
  // And the other way: a BYE with no payload.
  accept_loop_.Run([&] { acceptor_->Send(WireHeader{Op::kBye, 0, 0, 0, 0}, {}, nullptr); });
  auto back = dialer_handler_.WaitFor(1);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].header.op, Op::kBye);
  dial_loop_.Run([&] {
    EXPECT_EQ(done.load(), kMessages);
    EXPECT_EQ(dialer_->stats().staged_sent, static_cast<std::uint64_t>(kMessages));
    EXPECT_EQ(dialer_->stats().direct_sent, 0u);
  });
}

TEST_F(VerbsConnectionTest, DirectWritesLandInThePublishedZoneZeroCopyOrByCopy) {
  constexpr std::size_t kBytes = 4096 * 4;
  std::vector<std::byte> zone_memory(2 * kBytes);
  accept_loop_.Run([&] { ASSERT_TRUE(accept_verbs_.registry->Register(zone_memory).ok()); });
  acceptor_handler_.zones = {
      {Op::kPush, 1, 7, 1, std::span<std::byte>(zone_memory).first(kBytes)},
      {Op::kInit, 0, 9, 0, std::span<std::byte>(zone_memory).subspan(kBytes, kBytes)}};
  std::vector<std::byte> registered = RandomBytes(kBytes, 1);  // sent without a copy
  dial_loop_.Run([&] { ASSERT_TRUE(dial_verbs_.registry->Register(registered).ok()); });
  ASSERT_NO_FATAL_FAILURE(Connect());

  // Iterations 1, 2, 3 of the push zone, each waited for (the iteration protocol), alternating
  // registered and unregistered sources; then the INIT zone.
  std::vector<std::vector<std::byte>> unregistered = {RandomBytes(kBytes, 2), RandomBytes(kBytes, 3)};
  std::vector<std::span<const std::byte>> sources = {registered, unregistered[0], unregistered[1]};
  for (std::uint64_t it = 1; it <= 3; ++it) {
    dial_loop_.Run([&] {
      dialer_->Send(WireHeader{Op::kPush, 1, 7, it, kBytes}, sources[it - 1], nullptr);
    });
    auto got = acceptor_handler_.WaitFor(it);
    ASSERT_EQ(got.size(), it);
    EXPECT_TRUE(got.back().in_zone);
    EXPECT_EQ(got.back().header.op, Op::kPush);
    EXPECT_EQ(got.back().header.iteration, it);
    EXPECT_EQ(got.back().header.payload_bytes, kBytes);
    EXPECT_TRUE(std::equal(got.back().payload.begin(), got.back().payload.end(),
                           sources[it - 1].begin()))
        << "iteration " << it;
  }
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kInit, 0, 9, 0, kBytes}, registered, nullptr); });
  auto got = acceptor_handler_.WaitFor(4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].header.op, Op::kInit);
  EXPECT_TRUE(std::equal(zone_memory.begin() + kBytes, zone_memory.end(), registered.begin()));
  dial_loop_.Run([&] {
    EXPECT_EQ(dialer_->stats().direct_sent, 4u);
    EXPECT_EQ(dialer_->stats().copied_sent, 2u);  // the two unregistered sources
    EXPECT_EQ(dialer_->stats().staged_sent, 0u);
  });
  accept_loop_.Run([&] { EXPECT_EQ(acceptor_->stats().direct_received, 4u); });
}

TEST_F(VerbsConnectionTest, AnIterationOutOfOrderIntoAZoneClosesWithTheReason) {
  std::vector<std::byte> zone_memory(256);
  accept_loop_.Run([&] { ASSERT_TRUE(accept_verbs_.registry->Register(zone_memory).ok()); });
  acceptor_handler_.zones = {{Op::kPush, 0, 0, 1, zone_memory}};
  ASSERT_NO_FATAL_FAILURE(Connect());
  std::vector<std::byte> payload(256);
  Status sent;
  dial_loop_.Run([&] {
    dialer_->Send(WireHeader{Op::kPush, 0, 0, 5, 256}, payload, [&](const Status& s) { sent = s; });
  });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kInternal) << why;
  EXPECT_THAT(std::string(why.message()), HasSubstr("expects 1"));
  EXPECT_FALSE(sent.ok());
  // The acceptor notices its peer going through the side channel.
  Status peer = acceptor_handler_.WaitClosed();
  EXPECT_EQ(peer.code(), absl::StatusCode::kUnavailable) << peer;
  EXPECT_THAT(std::string(peer.message()), HasSubstr("closed the connection"));
}

// An elastic job's joiner attaches before it knows its first iteration: both ends move the
// zones of (op, worker) to it (ExpectIteration), after which a write of that iteration lands
// and is delivered with it; zones of another op or worker keep their count.
TEST_F(VerbsConnectionTest, ExpectIterationMovesBothEndsOfAWorkersZones) {
  std::vector<std::byte> zone_memory(3 * 256);
  accept_loop_.Run([&] { ASSERT_TRUE(accept_verbs_.registry->Register(zone_memory).ok()); });
  const auto part = [&](int i) { return std::span<std::byte>(zone_memory).subspan(i * 256, 256); };
  acceptor_handler_.zones = {{Op::kPush, 2, 0, 1, part(0)},
                             {Op::kPush, 2, 1, 1, part(1)},
                             {Op::kPush, 3, 0, 1, part(2)}};
  ASSERT_NO_FATAL_FAILURE(Connect());
  accept_loop_.Run([&] { acceptor_->ExpectIteration(Op::kPush, 2, 40); });
  dial_loop_.Run([&] { dialer_->ExpectIteration(Op::kPush, 2, 40); });
  const std::vector<std::byte> payload = RandomBytes(256, 4);
  std::atomic<int> sent_ok{0};
  const auto count = [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) ++sent_ok;
  };
  dial_loop_.Run([&] {
    dialer_->Send(WireHeader{Op::kPush, 2, 0, 40, 256}, payload, count);
    dialer_->Send(WireHeader{Op::kPush, 2, 1, 40, 256}, payload, count);
    dialer_->Send(WireHeader{Op::kPush, 3, 0, 1, 256}, payload, count);
  });
  auto got = acceptor_handler_.WaitFor(3);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(got[i].in_zone) << i;
    EXPECT_EQ(got[i].header.iteration, i < 2 ? 40u : 1u) << i;
    EXPECT_EQ(got[i].payload, payload) << i;
  }
  for (int i = 0; i < 6000 && sent_ok < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(sent_ok.load(), 3);
  // The writer checks too: worker 2's next is 41 now, so 40 again closes with the reason.
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kPush, 2, 0, 40, 256}, payload, nullptr); });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_THAT(std::string(why.message()), HasSubstr("expects 41"));
}

TEST_F(VerbsConnectionTest, AStaleAttachIsRefusedWithTheHandlersReason) {
  acceptor_handler_.expected_session = 77;
  expect_refusal_ = true;
  ASSERT_NO_FATAL_FAILURE(Connect({}, WireHeader{Op::kAttach, 2, 0, 76, 0}));
  EXPECT_EQ(dial_status_.code(), absl::StatusCode::kUnavailable) << dial_status_;
  EXPECT_THAT(std::string(dial_status_.message()), HasSubstr("stale session"));
}

TEST_F(VerbsConnectionTest, AStagedMessageLargerThanThePeersSlotsIsRefusedWithTheFix) {
  VerbsLimits limits;
  limits.staged_payload_bytes = 1024;
  ASSERT_NO_FATAL_FAILURE(Connect(limits));
  std::vector<std::byte> payload(4096);
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kPush, 0, 0, 1, 4096}, payload, nullptr); });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_THAT(std::string(why.message()), HasSubstr("staged_payload_bytes"));
}

TEST_F(VerbsConnectionTest, AZoneOutsideRegisteredMemoryFailsTheSetUp) {
  std::vector<std::byte> not_registered(64);
  dialer_handler_.zones = {{Op::kWeights, 0, 0, 0, not_registered}};
  // No acceptor is needed: the dialer refuses before it writes anything.
  std::unique_ptr<SocketListener> listener;
  accept_loop_.Run([&] {
    auto l = SocketListener::Bind(accept_loop_.context(), "127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    listener = std::move(*l);
    listener->Start([](boost::asio::ip::tcp::socket) {});
  });
  auto s = ConnectWithRetry(dial_loop_.context(), "127.0.0.1", listener->port(), 5000);
  ASSERT_TRUE(s.ok());
  auto dialer = VerbsConnection::Dial(std::move(*s), dial_verbs_, &dialer_handler_);
  ASSERT_FALSE(dialer.ok());
  EXPECT_THAT(std::string(dialer.status().message()), HasSubstr("not in registered memory"));
  accept_loop_.Run([&] { listener.reset(); });
}

}  // namespace
}  // namespace phub::transport::verbs

namespace phub::transport::verbs {
namespace {

// The outcome of one acceptor-side set-up, reported from the accept loop.
struct SetUpOutcome {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Status> status;

  // Waits up to 30 s; the status, or nullopt if the set-up never ended.
  std::optional<Status> Wait() {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return status.has_value(); });
    return status;
  }
};

class VerbsSetUpDeadlineTest : public VerbsConnectionTest {
 protected:
  // Listens; every accepted socket starts an acceptor-side set-up with `limits`.
  void AcceptWith(const VerbsLimits& limits) {
    accept_loop_.Run([&] {
      auto listener = SocketListener::Bind(accept_loop_.context(), "127.0.0.1", 0);
      ASSERT_TRUE(listener.ok());
      listener_ = std::move(*listener);
      listener_->Start([this, limits](boost::asio::ip::tcp::socket socket) {
        VerbsConnection::Accept(std::move(socket), accept_verbs_,
                                [this] { return &acceptor_handler_; }, limits,
                                [this](StatusOr<std::shared_ptr<VerbsConnection>> c) {
                                  std::lock_guard lock(outcome_.mu);
                                  outcome_.status = c.status();
                                  outcome_.cv.notify_all();
                                });
      });
    });
  }
  SetUpOutcome outcome_;
};

// A dialer that sends its endpoint and then never says "ready" (a stuck or hostile client)
// must not hold the acceptor's queue pair and CQ entries for ever: the set-up times out.
TEST_F(VerbsSetUpDeadlineTest, ADialerThatNeverFinishesTheSetUpTimesOut) {
  VerbsLimits limits;
  limits.setup_timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(AcceptWith(limits));
  auto socket = ConnectWithRetry(dial_loop_.context(), "127.0.0.1", listener_->port(), 5000);
  ASSERT_TRUE(socket.ok());
  QpAddress address;  // a plausible endpoint: this device's GID, a queue pair nobody has
  address.qpn = 0xabcd;
  address.gid = device_->gid();
  address.lid = device_->lid();
  address.mtu = static_cast<std::uint8_t>(device_->active_mtu());
  ASSERT_TRUE(WriteControlMessage(*socket, EncodeEndpoint(address, StagedRing{0, 0, 1, 64},
                                                               {}, std::nullopt))
                  .ok());
  auto reply = ReadControlMessage(*socket);  // the acceptor's endpoint comes back
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->has_verbs_endpoint());
  std::optional<Status> outcome = outcome_.Wait();  // ... and no "ready" from us
  ASSERT_TRUE(outcome.has_value()) << "the set-up never ended";
  EXPECT_EQ(outcome->code(), absl::StatusCode::kDeadlineExceeded) << *outcome;
  EXPECT_THAT(std::string(outcome->message()), HasSubstr("did not finish it within 300 ms"));
}

// A peer that connects and never sends its endpoint is under the same deadline: the socket is
// not held until the job ends.
TEST_F(VerbsSetUpDeadlineTest, ADialerThatSaysNothingTimesOut) {
  VerbsLimits limits;
  limits.setup_timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(AcceptWith(limits));
  auto socket = ConnectWithRetry(dial_loop_.context(), "127.0.0.1", listener_->port(), 5000);
  ASSERT_TRUE(socket.ok());
  std::optional<Status> outcome = outcome_.Wait();
  ASSERT_TRUE(outcome.has_value()) << "a silent peer held the set-up for 30 s";
  EXPECT_EQ(outcome->code(), absl::StatusCode::kDeadlineExceeded) << *outcome;
  EXPECT_THAT(std::string(outcome->message()), HasSubstr("did not finish it within 300 ms"));
}

// Device memory (GPUDirect RDMA) is read and written by the NIC alone. Host memory registered
// as if it were a GPU's stands in for it: no machine here has a GPU and an HCA.

TEST_F(VerbsConnectionTest, DeviceMemoryGoesIntoALandingZoneZeroCopyBothWays) {
  constexpr std::size_t kBytes = 4096;
  std::vector<std::byte> zone_memory(kBytes);
  accept_loop_.Run(
      [&] { ASSERT_TRUE(accept_verbs_.registry->TEST_RegisterAsDeviceMemory(zone_memory).ok()); });
  acceptor_handler_.zones = {{Op::kPush, 1, 7, 1, zone_memory}};
  std::vector<std::byte> source = RandomBytes(kBytes, 5);
  dial_loop_.Run(
      [&] { ASSERT_TRUE(dial_verbs_.registry->TEST_RegisterAsDeviceMemory(source).ok()); });
  ASSERT_NO_FATAL_FAILURE(Connect());
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kPush, 1, 7, 1, kBytes}, source, nullptr); });
  auto got = acceptor_handler_.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].in_zone);
  EXPECT_EQ(zone_memory, source);
  dial_loop_.Run([&] {
    EXPECT_EQ(dialer_->stats().direct_sent, 1u);
    EXPECT_EQ(dialer_->stats().copied_sent, 0u);
  });
}

TEST_F(VerbsConnectionTest, DeviceMemoryWithoutALandingZoneIsRefusedNotCopied) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  std::vector<std::byte> payload(256);
  dial_loop_.Run(
      [&] { ASSERT_TRUE(dial_verbs_.registry->TEST_RegisterAsDeviceMemory(payload).ok()); });
  Status sent;
  dial_loop_.Run([&] {
    dialer_->Send(WireHeader{Op::kPush, 0, 3, 1, 256}, payload, [&](const Status& s) { sent = s; });
  });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition) << why;
  EXPECT_THAT(std::string(why.message()),
              HasSubstr("chunk 3 from device memory needs a landing zone"));
  EXPECT_EQ(sent, why);
  dial_loop_.Run([&] { EXPECT_EQ(dialer_->stats().staged_sent, 0u); });
  EXPECT_EQ(acceptor_handler_.WaitClosed().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(acceptor_handler_.WaitFor(0).empty());
}

// A payload for a zone that is partly device memory and partly not is in no one region, so it
// would go by copy: refused.
TEST_F(VerbsConnectionTest, APayloadPartlyInDeviceMemoryIsRefusedNotCopied) {
  constexpr std::size_t kBytes = 4096;
  std::vector<std::byte> zone_memory(kBytes);
  accept_loop_.Run([&] { ASSERT_TRUE(accept_verbs_.registry->Register(zone_memory).ok()); });
  acceptor_handler_.zones = {{Op::kPush, 0, 2, 1, zone_memory}};
  std::vector<std::byte> source(2 * kBytes);
  dial_loop_.Run([&] {
    ASSERT_TRUE(dial_verbs_.registry
                    ->TEST_RegisterAsDeviceMemory(std::span<std::byte>(source).first(kBytes))
                    .ok());
  });
  ASSERT_NO_FATAL_FAILURE(Connect());
  std::span<const std::byte> straddling =
      std::span<const std::byte>(source).subspan(kBytes / 2, kBytes);
  dial_loop_.Run([&] {
    dialer_->Send(WireHeader{Op::kPush, 0, 2, 1, kBytes}, straddling, nullptr);
  });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition) << why;
  EXPECT_THAT(std::string(why.message()), HasSubstr("partly in device memory"));
  dial_loop_.Run([&] {
    EXPECT_EQ(dialer_->stats().direct_sent, 0u);
    EXPECT_EQ(dialer_->stats().copied_sent, 0u);
  });
}

// The receiving side: a staged message whose slot (ResolveSlot's answer) is device memory
// would be copied there by the CPU: refused, the memory untouched.
TEST_F(VerbsConnectionTest, AStagedMessageIsNeverCopiedIntoDeviceMemory) {
  std::vector<std::byte> slot(256, std::byte{0});
  accept_loop_.Run(
      [&] { ASSERT_TRUE(accept_verbs_.registry->TEST_RegisterAsDeviceMemory(slot).ok()); });
  acceptor_handler_.staged_slot = slot;
  ASSERT_NO_FATAL_FAILURE(Connect());
  std::vector<std::byte> payload = RandomBytes(256, 9);
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kPush, 0, 4, 1, 256}, payload, nullptr); });
  Status why = acceptor_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition) << why;
  EXPECT_THAT(std::string(why.message()), HasSubstr("its slot is device memory"));
  EXPECT_EQ(slot, std::vector<std::byte>(256, std::byte{0}));
  EXPECT_TRUE(acceptor_handler_.WaitFor(0).empty());
}

// Send buffers are sized by what this side sends (max_send_payload_bytes), not by the slots
// and zones the peer publishes; a payload over it is refused, naming the limit.
TEST_F(VerbsConnectionTest, APayloadOverMaxSendPayloadBytesIsRefused) {
  VerbsLimits limits;
  limits.max_send_payload_bytes = 256;
  ASSERT_NO_FATAL_FAILURE(Connect(limits));
  std::vector<std::byte> payload(512);
  dial_loop_.Run([&] { dialer_->Send(WireHeader{Op::kPush, 0, 0, 1, 512}, payload, nullptr); });
  Status why = dialer_handler_.WaitClosed();
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_THAT(std::string(why.message()), HasSubstr("max_send_payload_bytes"));
}

}  // namespace
}  // namespace phub::transport::verbs
