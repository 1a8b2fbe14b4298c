// What every transport's Connection and Acceptor must do (connection.h, transport.h), one test
// body per behaviour run on TCP and on verbs, each pair made only through the seam
// (transport_pair.h). What one transport does on its own (TCP's framing and byte counters,
// verbs' credits, zones and set-up deadlines) is in tcp/tcp_connection_test.cc and
// verbs/verbs_connection_test.cc. The verbs half skips without an RDMA device; it runs in
// tests/verbs/'s soft-RoCE guest as part of verbs_test.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tests/phub/transport/recording_handler.h"
#include "tests/phub/transport/transport_pair.h"

namespace phub::transport {
namespace {

class ConnectionConformanceTest : public TransportPairTest {
 protected:
  // One message each way on the pair, both delivered, both sends OK, nobody closed.
  void ExpectThePairStillCarriesBothWays() {
    const std::vector<std::byte> up = Pattern(300, 1);
    const std::vector<std::byte> down = Pattern(500, 2);
    ASSERT_TRUE(acceptor_handler_.WaitForMessages(1));  // the ATTACH, delivered on its own time
    const std::size_t at_acceptor = acceptor_handler_.messages().size();
    const std::size_t at_dialer = dialer_handler_.messages().size();
    SendResults sent;  // the payloads must outlive their sends
    DialerSend(WireHeader{Op::kPush, 2, 1, 1, 300}, up, sent.Callback());
    AcceptorSend(WireHeader{Op::kWeights, 2, 1, 1, 500}, down, sent.Callback());
    ASSERT_TRUE(acceptor_handler_.WaitForMessages(at_acceptor + 1));
    ASSERT_TRUE(dialer_handler_.WaitForMessages(at_dialer + 1));
    ASSERT_TRUE(sent.WaitFor(2));
    for (const Status& s : sent.statuses()) EXPECT_TRUE(s.ok()) << s;
    const RecordingHandler::Message got_up = acceptor_handler_.messages().back();
    const RecordingHandler::Message got_down = dialer_handler_.messages().back();
    EXPECT_TRUE(std::equal(got_up.slot.begin(), got_up.slot.end(), up.begin(), up.end()));
    EXPECT_TRUE(std::equal(got_down.slot.begin(), got_down.slot.end(), down.begin(), down.end()));
    EXPECT_EQ(acceptor_handler_.closed_count(), 0) << acceptor_handler_.why();
    EXPECT_EQ(dialer_handler_.closed_count(), 0) << dialer_handler_.why();
  }

  // The acceptor's ResolveSlot refuses a PUSH (of `payload_bytes`) after the ATTACH: the
  // connection closes with that reason, no OnReceived for it, and the peer sees it go.
  void ExpectAResolveSlotRefusalToClose(std::uint32_t payload_bytes) {
    const Status refusal = absl::FailedPreconditionError("no slot for chunk 9 at iteration 3");
    acceptor_handler_.set_resolver([&](const WireHeader& header) -> StatusOr<std::span<std::byte>> {
      if (header.chunk == 9) return refusal;
      return std::span<std::byte>();
    });
    ASSERT_NO_FATAL_FAILURE(ConnectPair());
    const std::vector<std::byte> payload = Pattern(payload_bytes, 0);
    SendResults sent;  // the payload must outlive its send
    DialerSend(WireHeader{Op::kPush, 2, 9, 3, payload_bytes}, payload, sent.Callback());

    ASSERT_TRUE(acceptor_handler_.WaitForClosed());
    ASSERT_TRUE(sent.WaitFor(1));
    EXPECT_EQ(acceptor_handler_.why(), refusal);
    EXPECT_EQ(acceptor_handler_.resolve_calls(), 2);  // the ATTACH and the refused PUSH
    ASSERT_EQ(acceptor_handler_.messages().size(), 1u);
    EXPECT_EQ(acceptor_handler_.messages()[0].header.op, Op::kAttach);
    ASSERT_TRUE(dialer_handler_.WaitForClosed());
    EXPECT_EQ(dialer_handler_.why().code(), absl::StatusCode::kUnavailable)
        << dialer_handler_.why();
    DrainLoops();
    EXPECT_EQ(acceptor_handler_.closed_count(), 1);
  }

  // The dialer of a refused connection: TCP's Dial is done once connected and the ATTACH
  // written, so the refusal shows as the connection closing once started; verbs' Dial waits
  // for the acceptor's endpoint, so Dial itself fails. Either way Unavailable.
  void ExpectTheDialerRefused() {
    ASSERT_NO_FATAL_FAILURE(Listen());
    StatusOr<std::shared_ptr<Connection>> dialed = Dial();
    if (dialed.ok()) {
      dialed_ = *std::move(dialed);
      dial_loop_.Run([&] { dialed_->Start(); });
      ASSERT_TRUE(dialer_handler_.WaitForClosed()) << "a refused dialer was not closed";
      EXPECT_EQ(dialer_handler_.why().code(), absl::StatusCode::kUnavailable)
          << dialer_handler_.why();
    } else {
      EXPECT_EQ(dialed.status().code(), absl::StatusCode::kUnavailable) << dialed.status();
    }
    DrainLoops();
    EXPECT_EQ(ready_count(), 0);
    // The acceptor's handler never saw the connection.
    EXPECT_EQ(acceptor_handler_.resolve_calls(), 0);
    EXPECT_EQ(acceptor_handler_.closed_count(), 0);
  }
};

// --- The ATTACH ---

TEST_P(ConnectionConformanceTest, TheDialersAttachIsTheFirstMessageTheAcceptorGets) {
  ASSERT_NO_FATAL_FAILURE(ListenAndDial());
  // The dialer starts and sends before the acceptor's side is even started.
  const std::vector<std::byte> payload = Pattern(100, 1);
  SendResults sent;
  dial_loop_.Run([&] {
    dialed_->Start();
    dialed_->Send(WireHeader{Op::kPush, 2, 0, 1, 100}, payload, sent.Callback());
    dialed_->Send(WireHeader{Op::kBye, 2, 0, 1, 0}, {}, sent.Callback());
  });
  accepted_ = WaitReady();
  ASSERT_NE(accepted_, nullptr);
  accept_loop_.Run([&] { accepted_->Start(); });

  ASSERT_TRUE(acceptor_handler_.WaitForMessages(3));
  ASSERT_TRUE(sent.WaitFor(2));
  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].header.op, Op::kAttach);
  EXPECT_EQ(got[0].header.worker, kTestAttach.worker);
  EXPECT_EQ(got[0].header.chunk, kTestAttach.chunk);
  EXPECT_EQ(got[0].header.iteration, kTestAttach.iteration);
  EXPECT_EQ(got[0].header.payload_bytes, 0u);
  EXPECT_EQ(got[1].header.op, Op::kPush);
  EXPECT_EQ(got[2].header.op, Op::kBye);
  // The ATTACH passed the handler's validation point like any message.
  EXPECT_EQ(acceptor_handler_.resolve_calls(), 3);
  DrainLoops();
  EXPECT_TRUE(dialer_handler_.messages().empty());  // the ATTACH goes one way only
}

TEST_P(ConnectionConformanceTest, AnAttachRefusedByResolveSlotClosesWithThatReason) {
  const Status refusal = absl::PermissionDeniedError("ATTACH of a session that ended");
  acceptor_handler_.set_resolver([&](const WireHeader& header) -> StatusOr<std::span<std::byte>> {
    if (header.op == Op::kAttach) return refusal;
    return std::span<std::byte>();
  });
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  ASSERT_TRUE(acceptor_handler_.WaitForClosed());
  EXPECT_EQ(acceptor_handler_.why(), refusal);
  EXPECT_EQ(acceptor_handler_.resolve_calls(), 1);
  EXPECT_TRUE(acceptor_handler_.messages().empty());
  ASSERT_TRUE(dialer_handler_.WaitForClosed());
  EXPECT_EQ(dialer_handler_.why().code(), absl::StatusCode::kUnavailable) << dialer_handler_.why();
}

// --- Payloads ---

TEST_P(ConnectionConformanceTest, PayloadsLandExactlyInTheSlotsResolveSlotReturned) {
  // One arena, each message's slot a window in it with guard bytes around: the connection must
  // write exactly payload_bytes at exactly the returned address.
  constexpr std::size_t kGuard = 64;
  const std::vector<std::uint32_t> sizes = {1, 3, 4, 1000, 65537};
  std::vector<std::size_t> offsets;
  std::size_t arena_bytes = kGuard;
  for (std::uint32_t size : sizes) {
    offsets.push_back(arena_bytes);
    arena_bytes += size + kGuard;
  }
  std::vector<std::byte> arena(arena_bytes, std::byte{0xA5});
  acceptor_handler_.set_resolver([&](const WireHeader& header) -> StatusOr<std::span<std::byte>> {
    if (header.op == Op::kAttach) return std::span<std::byte>();
    if (header.chunk >= sizes.size() || header.payload_bytes != sizes[header.chunk]) {
      return absl::InvalidArgumentError("unexpected message");
    }
    return std::span<std::byte>(arena).subspan(offsets[header.chunk], header.payload_bytes);
  });
  ASSERT_NO_FATAL_FAILURE(ConnectPair());

  std::vector<std::vector<std::byte>> payloads;
  for (std::uint32_t i = 0; i < sizes.size(); ++i) payloads.push_back(Pattern(sizes[i], 100 + i));
  SendResults sent;  // the payloads must outlive their sends
  dial_loop_.Run([&] {
    for (std::uint32_t i = 0; i < sizes.size(); ++i) {
      dialed_->Send(WireHeader{Op::kPush, 2, i, 40 + i, sizes[i]}, payloads[i], sent.Callback());
    }
  });
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(1 + sizes.size()));
  ASSERT_TRUE(sent.WaitFor(sizes.size()));

  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 1 + sizes.size());
  for (std::uint32_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(i);
    const RecordingHandler::Message& m = got[1 + i];
    EXPECT_EQ(m.header.op, Op::kPush);
    EXPECT_EQ(m.header.worker, 2u);
    EXPECT_EQ(m.header.chunk, i);
    EXPECT_EQ(m.header.iteration, 40u + i);
    EXPECT_EQ(m.header.payload_bytes, sizes[i]);
    EXPECT_EQ(m.slot.data(), arena.data() + offsets[i]);
  }
  std::vector<std::byte> expected(arena_bytes, std::byte{0xA5});
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::memcpy(expected.data() + offsets[i], payloads[i].data(), sizes[i]);
  }
  EXPECT_TRUE(arena == expected) << "the arena differs from the payloads placed at their slots";
}

TEST_P(ConnectionConformanceTest, ManyMessagesArriveInOrderIncludingEmptyOnes) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  constexpr std::uint32_t kMessages = 300;
  std::vector<std::vector<std::byte>> payloads;
  for (std::uint32_t i = 0; i < kMessages; ++i) {
    // Every third message is empty; the others vary in size, some not a multiple of 4.
    payloads.push_back(Pattern(i % 3 == 0 ? 0 : (i * 37) % 5000 + 1, i));
  }
  SendResults sent;
  dial_loop_.Run([&] {
    for (std::uint32_t i = 0; i < kMessages; ++i) {
      const Op op = i % 3 == 0 ? Op::kBye : Op::kPush;
      dialed_->Send(WireHeader{op, 7, i, 1000 + i, static_cast<std::uint32_t>(payloads[i].size())},
                    payloads[i], sent.Callback());
    }
  });
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(1 + kMessages));
  ASSERT_TRUE(sent.WaitFor(kMessages));
  DrainLoops();

  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 1 + kMessages);
  EXPECT_EQ(got[0].header.op, Op::kAttach);
  for (std::uint32_t i = 0; i < kMessages; ++i) {
    SCOPED_TRACE(i);
    const RecordingHandler::Message& m = got[1 + i];
    EXPECT_EQ(m.header.op, i % 3 == 0 ? Op::kBye : Op::kPush);
    EXPECT_EQ(m.header.worker, 7u);
    EXPECT_EQ(m.header.chunk, i);
    EXPECT_EQ(m.header.iteration, 1000u + i);
    ASSERT_EQ(m.header.payload_bytes, payloads[i].size());
    ASSERT_EQ(m.slot.size(), payloads[i].size());
    EXPECT_TRUE(std::equal(m.slot.begin(), m.slot.end(), payloads[i].begin()));
  }
  // Every message, empty ones included, passes the handler's validation point.
  EXPECT_EQ(acceptor_handler_.resolve_calls(), static_cast<int>(1 + kMessages));
  std::vector<Status> statuses = sent.statuses();
  EXPECT_EQ(statuses.size(), kMessages);  // each SendDone exactly once
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST_P(ConnectionConformanceTest, MessagesFlowBothWaysAtOnce) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  constexpr std::uint32_t kEach = 100;
  std::vector<std::vector<std::byte>> up, down;
  for (std::uint32_t i = 0; i < kEach; ++i) {
    up.push_back(Pattern(i % 4 == 0 ? 0 : (i * 131) % 3000 + 1, i));
    down.push_back(Pattern(i % 5 == 0 ? 0 : (i * 71) % 7000 + 1, 1000 + i));
  }
  SendResults sent;
  // Posted, not run: both loops send at the same time.
  dial_loop_.Post([&] {
    for (std::uint32_t i = 0; i < kEach; ++i) {
      dialed_->Send(WireHeader{Op::kPush, 2, i, i, static_cast<std::uint32_t>(up[i].size())}, up[i],
                    sent.Callback());
    }
  });
  accept_loop_.Post([&] {
    for (std::uint32_t i = 0; i < kEach; ++i) {
      accepted_->Send(WireHeader{Op::kWeights, 2, i, i, static_cast<std::uint32_t>(down[i].size())},
                      down[i], sent.Callback());
    }
  });
  dial_loop_.Run([] {});  // both posted sends have run (their frames' data outlive them)
  accept_loop_.Run([] {});
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(1 + kEach));
  ASSERT_TRUE(dialer_handler_.WaitForMessages(kEach));
  ASSERT_TRUE(sent.WaitFor(2 * kEach));

  std::vector<RecordingHandler::Message> at_acceptor = acceptor_handler_.messages();
  std::vector<RecordingHandler::Message> at_dialer = dialer_handler_.messages();
  ASSERT_EQ(at_acceptor.size(), 1 + kEach);
  ASSERT_EQ(at_dialer.size(), kEach);
  for (std::uint32_t i = 0; i < kEach; ++i) {
    SCOPED_TRACE(i);
    const RecordingHandler::Message& u = at_acceptor[1 + i];
    const RecordingHandler::Message& d = at_dialer[i];
    EXPECT_EQ(u.header.op, Op::kPush);
    EXPECT_EQ(u.header.chunk, i);
    EXPECT_TRUE(std::equal(u.slot.begin(), u.slot.end(), up[i].begin(), up[i].end()));
    EXPECT_EQ(d.header.op, Op::kWeights);
    EXPECT_EQ(d.header.chunk, i);
    EXPECT_TRUE(std::equal(d.slot.begin(), d.slot.end(), down[i].begin(), down[i].end()));
  }
  for (const Status& s : sent.statuses()) EXPECT_TRUE(s.ok()) << s;
}

// TCP asks ResolveSlot and reads the payload there; verbs writes it there directly (the zone
// was published at set-up) and ResolveSlot confirms the place. The same bytes either way.
TEST_P(ConnectionConformanceTest, APayloadForAPublishedLandingZoneLandsInTheZone) {
  constexpr std::uint32_t kZoneBytes = 16 * 1024;
  constexpr std::uint32_t kBesideBytes = 64;
  std::vector<std::byte> zone(kZoneBytes);
  std::vector<std::byte> beside(kBesideBytes);  // a message without a zone, after each
  Status registered = absl::InternalError("Register did not run");
  accept_loop_.Run([&] { registered = accept_transport_->Register(zone); });
  ASSERT_TRUE(registered.ok()) << registered;
  acceptor_handler_.set_landing_zones({LandingZone{Op::kPush, 2, 7, /*first_iteration=*/1, zone}});
  acceptor_handler_.set_resolver([&](const WireHeader& header) -> StatusOr<std::span<std::byte>> {
    if (header.op == Op::kAttach) return std::span<std::byte>();
    if (header.op == Op::kPush && header.worker == 2 && header.chunk == 7 &&
        header.payload_bytes == kZoneBytes) {
      return std::span<std::byte>(zone);
    }
    if (header.op == Op::kPush && header.chunk == 8 && header.payload_bytes == kBesideBytes) {
      return std::span<std::byte>(beside);
    }
    return absl::InvalidArgumentError("unexpected message");
  });
  ASSERT_NO_FATAL_FAILURE(ConnectPair());

  // Iterations 1, 2, 3, each waited for before the next (the PS's iteration protocol: the zone
  // is overwritten in place).
  for (std::uint64_t it = 1; it <= 3; ++it) {
    SCOPED_TRACE(it);
    const std::vector<std::byte> payload = Pattern(kZoneBytes, static_cast<std::uint32_t>(it));
    const std::vector<std::byte> other =
        Pattern(kBesideBytes, static_cast<std::uint32_t>(100 + it));
    SendResults sent;
    DialerSend(WireHeader{Op::kPush, 2, 7, it, kZoneBytes}, payload, sent.Callback());
    DialerSend(WireHeader{Op::kPush, 2, 8, it, kBesideBytes}, other, sent.Callback());
    ASSERT_TRUE(acceptor_handler_.WaitForMessages(1 + 2 * it)) << acceptor_handler_.why();
    ASSERT_TRUE(sent.WaitFor(2));
    for (const Status& s : sent.statuses()) EXPECT_TRUE(s.ok()) << s;

    std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
    const RecordingHandler::Message& in_zone = got[2 * it - 1];
    EXPECT_EQ(in_zone.header.op, Op::kPush);
    EXPECT_EQ(in_zone.header.worker, 2u);
    EXPECT_EQ(in_zone.header.chunk, 7u);
    EXPECT_EQ(in_zone.header.iteration, it);
    EXPECT_EQ(in_zone.header.payload_bytes, kZoneBytes);
    EXPECT_EQ(in_zone.slot.data(), zone.data());
    // Read on the acceptor's loop, the thread that writes them: the next iteration overwrites
    // both, and what orders that write after this read (the dialer sends only afterwards) runs
    // through the NIC on verbs, where ThreadSanitizer cannot see it.
    bool zone_holds_it = false, beside_holds_it = false;
    accept_loop_.Run([&] {
      zone_holds_it = zone == payload;
      beside_holds_it = beside == other;
    });
    EXPECT_TRUE(zone_holds_it) << "the zone does not hold iteration " << it << "'s payload";
    EXPECT_EQ(got[2 * it].header.chunk, 8u);
    EXPECT_TRUE(beside_holds_it);
  }
}

// --- Closing ---

TEST_P(ConnectionConformanceTest, CloseFailsQueuedSendsWithTheReasonAndTellsTheHandlerOnce) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  const std::vector<std::byte> payload = Pattern(kMaxTestPayload, 4);
  SendResults sent;
  const Status why = absl::AbortedError("test stops the connection");
  dial_loop_.Run([&] {
    // In one loop turn: no send can complete before Close.
    for (std::uint32_t i = 0; i < 4; ++i) {
      dialed_->Send(WireHeader{Op::kPush, 2, i, 0, kMaxTestPayload}, payload, sent.Callback());
    }
    dialed_->Close(why);
    dialed_->Close(absl::InternalError("a second close"));  // idempotent
  });
  ASSERT_TRUE(sent.WaitFor(4));
  ASSERT_TRUE(dialer_handler_.WaitForClosed());
  // The peer notices; a later Close on either side adds no second OnClosed.
  ASSERT_TRUE(acceptor_handler_.WaitForClosed());
  accept_loop_.Run([&] { accepted_->Close(absl::InternalError("closed after the peer left")); });
  dial_loop_.Run([&] { dialed_->Close(absl::InternalError("closed again")); });
  DrainLoops();

  std::vector<Status> statuses = sent.statuses();
  ASSERT_EQ(statuses.size(), 4u);  // each exactly once, none reported OK later
  for (const Status& s : statuses) EXPECT_EQ(s, why);
  EXPECT_EQ(dialer_handler_.closed_count(), 1);
  EXPECT_EQ(dialer_handler_.why(), why);
  EXPECT_TRUE(dialer_handler_.closed_flag_seen());  // closed() is already true in OnClosed
  EXPECT_EQ(acceptor_handler_.closed_count(), 1);
  EXPECT_EQ(acceptor_handler_.why().code(), absl::StatusCode::kUnavailable)
      << acceptor_handler_.why();
}

TEST_P(ConnectionConformanceTest, CloseWithOkCancelsQueuedSendsAndReportsOk) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  const std::vector<std::byte> payload = Pattern(kMaxTestPayload, 4);
  SendResults sent;
  bool closed = false;
  dial_loop_.Run([&] {
    dialed_->Send(WireHeader{Op::kPush, 2, 0, 0, kMaxTestPayload}, payload, sent.Callback());
    dialed_->Close(absl::OkStatus());
    closed = dialed_->closed();
  });
  EXPECT_TRUE(closed);
  ASSERT_TRUE(sent.WaitFor(1));
  ASSERT_TRUE(dialer_handler_.WaitForClosed());
  DrainLoops();
  std::vector<Status> statuses = sent.statuses();
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kCancelled) << statuses[0];
  EXPECT_TRUE(dialer_handler_.why().ok()) << dialer_handler_.why();
  EXPECT_EQ(dialer_handler_.closed_count(), 1);
}

TEST_P(ConnectionConformanceTest, SendAfterCloseFailsAtOnceNamingThePeer) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  SendResults sent;
  std::string peer;
  dial_loop_.Run([&] {
    peer = dialed_->peer();
    dialed_->Close(absl::OkStatus());
    dialed_->Send(WireHeader{Op::kBye, 2, 0, 0, 0}, {}, sent.Callback());
  });
  std::vector<Status> statuses = sent.statuses();  // already there: Send reported inline
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_TRUE(MessageHas(statuses[0], peer));
}

// Finish after the last send's completion: the peer receives that message, then the end;
// Finish's caller hears OK once the peer has closed its side too (the acceptor closes on the
// end, as phubd does); sends after it fail at once.
TEST_P(ConnectionConformanceTest, FinishDeliversTheLastMessageThenEndsBothSides) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(1));  // the ATTACH
  const std::vector<std::byte> payload = Pattern(kMaxTestPayload, 6);
  SendResults sent;
  SendResults finished;
  SendResults after;
  dial_loop_.Run([&] {
    dialed_->Send(WireHeader{Op::kPush, 2, 1, 1, kMaxTestPayload}, payload,
                  [&, done = sent.Callback()](const Status& s) {
                    done(s);
                    dialed_->Finish(std::chrono::milliseconds(60000), finished.Callback());
                    dialed_->Send(WireHeader{Op::kBye, 2, 0, 0, 0}, {}, after.Callback());
                  });
  });
  ASSERT_TRUE(finished.WaitFor(1));
  ASSERT_TRUE(acceptor_handler_.WaitForClosed());
  ASSERT_TRUE(dialer_handler_.WaitForClosed());
  DrainLoops();
  EXPECT_TRUE(sent.statuses()[0].ok()) << sent.statuses()[0];
  EXPECT_TRUE(finished.statuses()[0].ok()) << finished.statuses()[0];
  ASSERT_EQ(after.statuses().size(), 1u);
  EXPECT_EQ(after.statuses()[0].code(), absl::StatusCode::kUnavailable) << after.statuses()[0];
  const std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 2u);  // the ATTACH and the PUSH; not the BYE sent after Finish
  EXPECT_TRUE(std::equal(got[1].slot.begin(), got[1].slot.end(), payload.begin(), payload.end()));
  EXPECT_EQ(acceptor_handler_.why().code(), absl::StatusCode::kUnavailable)
      << acceptor_handler_.why();
  EXPECT_TRUE(dialer_handler_.why().ok()) << dialer_handler_.why();
  EXPECT_EQ(dialer_handler_.closed_count(), 1);
  EXPECT_EQ(finished.statuses().size(), 1u);
}

TEST_P(ConnectionConformanceTest, TheDialerLeavingClosesTheAcceptorsSideWithUnavailable) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  dial_loop_.Run([&] { dialed_->Close(absl::OkStatus()); });
  ASSERT_TRUE(acceptor_handler_.WaitForClosed()) << "the peer's leaving went unnoticed";
  EXPECT_EQ(acceptor_handler_.why().code(), absl::StatusCode::kUnavailable)
      << acceptor_handler_.why();
  EXPECT_TRUE(MessageHas(acceptor_handler_.why(), "closed the connection"));
  EXPECT_TRUE(acceptor_handler_.closed_flag_seen());
  EXPECT_TRUE(dialer_handler_.why().ok()) << dialer_handler_.why();
}

TEST_P(ConnectionConformanceTest, TheAcceptorLeavingClosesTheDialersSideWithUnavailable) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  accept_loop_.Run([&] { accepted_->Close(absl::OkStatus()); });
  ASSERT_TRUE(dialer_handler_.WaitForClosed()) << "the peer's leaving went unnoticed";
  EXPECT_EQ(dialer_handler_.why().code(), absl::StatusCode::kUnavailable) << dialer_handler_.why();
  EXPECT_TRUE(MessageHas(dialer_handler_.why(), "closed the connection"));
  EXPECT_TRUE(dialer_handler_.closed_flag_seen());
  // Sends after that fail at once.
  SendResults sent;
  DialerSend(WireHeader{Op::kBye, 2, 0, 0, 0}, {}, sent.Callback());
  ASSERT_EQ(sent.statuses().size(), 1u);
  EXPECT_EQ(sent.statuses()[0].code(), absl::StatusCode::kUnavailable);
}

// --- The handler's refusals ---

TEST_P(ConnectionConformanceTest, ResolveSlotErrorClosesWithThatReason) {
  ExpectAResolveSlotRefusalToClose(/*payload_bytes=*/16);
}

// A zero-length message is validated like any other (a zero-length PUSH once skipped every
// check and crashed phubd).
TEST_P(ConnectionConformanceTest, AZeroLengthMessageIsRefusedByResolveSlotToo) {
  ExpectAResolveSlotRefusalToClose(/*payload_bytes=*/0);
}

TEST_P(ConnectionConformanceTest, ASlotOfTheWrongSizeClosesWithInternal) {
  std::vector<std::byte> too_small(8);
  acceptor_handler_.set_resolver([&](const WireHeader& header) -> StatusOr<std::span<std::byte>> {
    if (header.op == Op::kAttach) return std::span<std::byte>();
    return std::span<std::byte>(too_small);
  });
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  const std::vector<std::byte> payload = Pattern(16, 0);
  SendResults sent;  // the payload must outlive its send
  DialerSend(WireHeader{Op::kPush, 2, 0, 0, 16}, payload, sent.Callback());

  ASSERT_TRUE(acceptor_handler_.WaitForClosed());
  ASSERT_TRUE(sent.WaitFor(1));
  EXPECT_EQ(acceptor_handler_.why().code(), absl::StatusCode::kInternal) << acceptor_handler_.why();
  EXPECT_TRUE(MessageHas(acceptor_handler_.why(), "slot of 8 bytes for a payload of 16"));
  EXPECT_EQ(acceptor_handler_.messages().size(), 1u);  // the ATTACH only
  EXPECT_TRUE(std::all_of(too_small.begin(), too_small.end(), [](std::byte b) {
    return b == std::byte{0};
  })) << "a payload was written into a slot too small for it";
}

TEST_P(ConnectionConformanceTest, OnReceivedErrorClosesWithThatReason) {
  const Status refusal = absl::InvalidArgumentError("worker 2 may not push chunk 0 now");
  acceptor_handler_.set_on_received([&](const WireHeader& header) -> Status {
    return header.op == Op::kPush && header.chunk == 0 ? refusal : absl::OkStatus();
  });
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  SendResults sent;
  DialerSend(WireHeader{Op::kPush, 2, 0, 0, 0}, {}, sent.Callback());
  DialerSend(WireHeader{Op::kPush, 2, 1, 0, 0}, {}, sent.Callback());

  ASSERT_TRUE(acceptor_handler_.WaitForClosed());
  ASSERT_TRUE(sent.WaitFor(2));
  EXPECT_EQ(acceptor_handler_.why(), refusal);
  DrainLoops();
  // The ATTACH and the refused PUSH; nothing is delivered after the refusal.
  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].header.chunk, 0u);
  EXPECT_EQ(acceptor_handler_.closed_count(), 1);
}

// --- Accepting ---

TEST_P(ConnectionConformanceTest, AdmitReturningNulloptRefusesTheConnection) {
  hooks_.admit = [this](std::size_t) -> std::optional<ConnectionSizing> {
    ++admitted_;
    return std::nullopt;
  };
  ASSERT_NO_FATAL_FAILURE(ExpectTheDialerRefused());
  EXPECT_EQ(admitted_.load(), 1);
  EXPECT_EQ(handler_asked_.load(), 0);  // refused before anyone is asked to handle it
}

TEST_P(ConnectionConformanceTest, HandlerNowReturningNullRefusesTheConnection) {
  hooks_.handler_now = [this]() -> ConnectionHandler* {
    ++handler_asked_;
    return nullptr;
  };
  ASSERT_NO_FATAL_FAILURE(ExpectTheDialerRefused());
  EXPECT_EQ(admitted_.load(), 1);
  EXPECT_EQ(handler_asked_.load(), 1);
}

TEST_P(ConnectionConformanceTest, ReadyDeliversAConnectionThatWaitsForStart) {
  ASSERT_NO_FATAL_FAILURE(ListenAndDial());
  dial_loop_.Run([&] { dialed_->Start(); });
  const std::vector<std::byte> payload = Pattern(100, 3);
  SendResults sent;
  DialerSend(WireHeader{Op::kPush, 2, 0, 1, 100}, payload, sent.Callback());
  accepted_ = WaitReady();
  ASSERT_NE(accepted_, nullptr);
  // The payload has left the dialer (verbs: it is in the acceptor's memory already), but the
  // acceptor's side is not started: its handler hears nothing, the ATTACH included.
  ASSERT_TRUE(sent.WaitFor(1));
  EXPECT_TRUE(sent.statuses()[0].ok()) << sent.statuses()[0];
  bool closed = true;
  accept_loop_.Run([&] { closed = accepted_->closed(); });
  EXPECT_FALSE(closed);
  DrainLoops();
  EXPECT_EQ(acceptor_handler_.resolve_calls(), 0);
  EXPECT_TRUE(acceptor_handler_.messages().empty());
  EXPECT_EQ(acceptor_handler_.closed_count(), 0);

  accept_loop_.Run([&] { accepted_->Start(); });
  ASSERT_TRUE(acceptor_handler_.WaitForMessages(2));
  std::vector<RecordingHandler::Message> got = acceptor_handler_.messages();
  EXPECT_EQ(got[0].header.op, Op::kAttach);
  EXPECT_EQ(got[1].header.op, Op::kPush);
  EXPECT_TRUE(std::equal(got[1].slot.begin(), got[1].slot.end(), payload.begin(), payload.end()));
  EXPECT_EQ(ready_count(), 1);
}

// connection.h: handler callbacks begin after Start(). An owner that refuses a ready
// connection closes it unstarted (ServerCore when the job ended meanwhile): its handler, which
// may be going away, hears nothing; queued sends still fail with the reason.
TEST_P(ConnectionConformanceTest, CloseBeforeStartFailsSendsAndCallsNoHandler) {
  ASSERT_NO_FATAL_FAILURE(ListenAndDial());
  accepted_ = WaitReady();
  ASSERT_NE(accepted_, nullptr);
  SendResults sent;
  accept_loop_.Run([&] {
    accepted_->Send(WireHeader{Op::kWeights, 2, 0, 1, 0}, {}, sent.Callback());
    accepted_->Close(absl::CancelledError("job over"));
  });
  ASSERT_TRUE(sent.WaitFor(1));
  EXPECT_FALSE(sent.statuses()[0].ok());
  DrainLoops();
  EXPECT_EQ(acceptor_handler_.closed_count(), 0);
  EXPECT_EQ(acceptor_handler_.resolve_calls(), 0);
}

TEST_P(ConnectionConformanceTest, TheAcceptorsPortIsTheOneItListensOn) {
  ASSERT_NO_FATAL_FAILURE(Listen());  // port 0: the kernel picks, port() says which
  ASSERT_NE(port_, 0);
  // The port is taken: another listener cannot have it.
  Status second;
  accept_loop_.Run(
      [&] { second = accept_transport_->Listen("127.0.0.1", port_, hooks_).status(); });
  EXPECT_FALSE(second.ok()) << "a second listener bound port " << port_;
  // And dialing it reaches this acceptor: the dialer's peer is 127.0.0.1:port() (verbs adds
  // the device; shm names the acceptor's process: this one).
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  std::string peer;
  dial_loop_.Run([&] { peer = dialed_->peer(); });
  const std::string address = GetParam() == TransportKind::kShm
                                  ? "local:" + std::to_string(getpid())
                                  : "127.0.0.1:" + std::to_string(port_);
  EXPECT_TRUE(peer == address || peer.starts_with(address + " ")) << peer;
  EXPECT_EQ(admitted_.load(), 1);
}

// CloseSettingUp is for connections accepted and not yet ready (the job ended meanwhile); the
// ready ones are their owner's.
TEST_P(ConnectionConformanceTest, CloseSettingUpLeavesReadyConnectionsAlone) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  accept_loop_.Run([&] { acceptor_->CloseSettingUp(absl::CancelledError("the job ended")); });
  ASSERT_NO_FATAL_FAILURE(ExpectThePairStillCarriesBothWays());
}

TEST_P(ConnectionConformanceTest, StoppingAndDroppingTheAcceptorLeavesReadyConnectionsAlone) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  accept_loop_.Run([&] {
    acceptor_->Stop();
    acceptor_.reset();
  });
  ASSERT_NO_FATAL_FAILURE(ExpectThePairStillCarriesBothWays());
}

// --- Device memory (GPUDirect RDMA) ---

// Transport::RegisterDeviceMemory of a descriptor no GPU driver exported (a memfd stands in for
// the dma-buf) is refused cleanly and leaves the transport as it was. TCP never takes device
// memory: Unimplemented, saying to stage through host memory. Verbs hands the fd to
// ibv_reg_dmabuf_mr: soft-RoCE has no dma-buf support (Unimplemented), and a device that had
// would refuse a memfd (not a dma-buf); either way an error naming the device, never a crash.
// No machine here has both a GPU and an HCA, so a dma-buf registration that succeeds is not
// tested.
TEST_P(ConnectionConformanceTest, DeviceMemoryNoDriverExportedIsRefusedWithoutHarm) {
  const int fd = memfd_create("phub-not-a-dmabuf", 0);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, 4096), 0) << std::strerror(errno);
  std::vector<std::byte> range(4096);  // where the "device memory" would be mapped
  Status status;
  accept_loop_.Run([&] { status = accept_transport_->RegisterDeviceMemory({range, fd, 0}); });
  close(fd);
  ASSERT_FALSE(status.ok());
  if (GetParam() != TransportKind::kVerbs) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    EXPECT_NE(status.message().find("stage through host memory"), std::string::npos) << status;
  } else {
    EXPECT_NE(status.message().find(verbs::ListDevices()[0]), std::string::npos) << status;
    if (status.code() == absl::StatusCode::kUnimplemented) {
      EXPECT_NE(status.message().find("stage through host memory"), std::string::npos) << status;
    }
  }
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  ASSERT_NO_FATAL_FAILURE(ExpectThePairStillCarriesBothWays());
}

INSTANTIATE_TEST_SUITE_P(Transports, ConnectionConformanceTest,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kVerbs,
                                           TransportKind::kShm),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return TransportName(info.param);
                         });

}  // namespace
}  // namespace phub::transport
