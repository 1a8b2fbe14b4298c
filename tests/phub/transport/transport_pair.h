// Test support for the transport seam (transport.h): a fixture, parameterized by TransportKind,
// that makes a connection pair only the way phubd, its workers and the ring do — OpenDevice,
// a Transport bound to each of two EventLoops, Listen with AcceptHooks on one, Dial from the
// test thread onto the other — so that one test body runs on every transport. The verbs half
// skips where there is no RDMA device; tests/verbs/run_verbs_tests.sh runs it in a QEMU guest
// with soft-RoCE. Every wait is bounded (recording_handler.h's kTimeout); nothing measures time.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "phub/transport/connection.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/open_device.h"
#include "phub/transport/transport.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/verbs_device.h"
#include "tests/phub/transport/recording_handler.h"

namespace phub::transport {

inline constexpr char kNoRdmaDevice[] =
    "no RDMA device here (verbs::ListDevices() is empty); tests/verbs/run_verbs_tests.sh runs "
    "this half in a QEMU guest with soft-RoCE";

inline constexpr int kConnectTimeoutMs = 30000;

// The largest payload the tests send outside a landing zone.
inline constexpr std::uint32_t kMaxTestPayload = 96 * 1024;

// Both sides' sizing (the dialer's DialRequest, the acceptor's admit). TCP ignores it. Verbs
// sizes its buffers from it before any data: a payload outside a landing zone is staged
// through the receiver's ring (max_unplaced_bytes) after a copy into one of the sender's send
// buffers (max_send_bytes), and a payload over either closes the connection where TCP would
// deliver it. Covering kMaxTestPayload on both sides is what lets one test body run on both.
inline ConnectionSizing TestSizing() {
  ConnectionSizing sizing;
  sizing.max_send_bytes = kMaxTestPayload;
  sizing.max_unplaced_bytes = kMaxTestPayload;
  sizing.unplaced_in_flight = 8;
  sizing.send_copies = 8;
  return sizing;
}

// The dialer's DialRequest.attach in every pair.
inline constexpr WireHeader kTestAttach{Op::kAttach, /*worker=*/2, /*chunk=*/5,
                                        /*iteration=*/77, /*payload_bytes=*/0};

class TransportPairTest : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override {
    if (GetParam() == TransportKind::kVerbs && verbs::ListDevices().empty()) {
      GTEST_SKIP() << kNoRdmaDevice;
    }
    TransportOptions options;
    options.kind = GetParam();
    StatusOr<std::shared_ptr<Device>> device = OpenDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    ASSERT_NO_FATAL_FAILURE(Bind(accept_loop_, accept_transport_));
    ASSERT_NO_FATAL_FAILURE(Bind(dial_loop_, dial_transport_));

    // The hooks every test starts from; a test may replace one before Listen().
    hooks_.admit = [this](std::size_t) -> std::optional<ConnectionSizing> {
      ++admitted_;
      return TestSizing();
    };
    hooks_.handler_now = [this]() -> ConnectionHandler* {
      ++handler_asked_;
      return &acceptor_handler_;
    };
    hooks_.ready = [this](std::shared_ptr<Connection> connection) {
      std::lock_guard lock(ready_mu_);
      ready_.push_back(std::move(connection));
      ++ready_count_;
      ready_cv_.notify_all();
    };
    hooks_.setup_timeout_ms = kConnectTimeoutMs;
  }

  void TearDown() override {
    accept_loop_.Run([&] {
      acceptor_.reset();  // accepts no more (verbs: fails the set-ups still running)
      if (accepted_) accepted_->Close(absl::OkStatus());
      accepted_.reset();
      for (auto& connection : TakeReady()) connection->Close(absl::OkStatus());
      accept_transport_.reset();
    });
    dial_loop_.Run([&] {
      if (dialed_) dialed_->Close(absl::OkStatus());
      dialed_.reset();
      dial_transport_.reset();
    });
  }

  // Listens on 127.0.0.1, on a port the kernel picks (port_), with hooks_.
  void Listen() {
    Status status;
    accept_loop_.Run([&] {
      StatusOr<std::unique_ptr<Acceptor>> acceptor =
          accept_transport_->Listen("127.0.0.1", 0, hooks_);
      if (!acceptor.ok()) return void(status = acceptor.status());
      acceptor_ = *std::move(acceptor);
      port_ = acceptor_->port();
    });
    ASSERT_TRUE(status.ok()) << status;
  }

  // Dials the listener from the test thread (Dial blocks; never on the loop's thread), opening
  // with kTestAttach; the connection runs on dial_loop_, not yet started.
  StatusOr<std::shared_ptr<Connection>> Dial() {
    DialRequest request;
    request.host = "127.0.0.1";
    request.port = port_;
    request.timeout_ms = kConnectTimeoutMs;
    request.attach = kTestAttach;
    request.sizing = TestSizing();
    return dial_transport_->Dial(request, &dialer_handler_);
  }

  // The next connection `ready` delivered, or null on timeout.
  std::shared_ptr<Connection> WaitReady() {
    std::unique_lock lock(ready_mu_);
    if (!ready_cv_.wait_for(lock, kTimeout, [&] { return !ready_.empty(); })) return nullptr;
    std::shared_ptr<Connection> connection = std::move(ready_.front());
    ready_.pop_front();
    return connection;
  }
  int ready_count() {
    std::lock_guard lock(ready_mu_);
    return ready_count_;
  }

  // Listens if need be and dials: dialed_, not started; the acceptor's side is not taken yet.
  void ListenAndDial() {
    if (!acceptor_) {
      ASSERT_NO_FATAL_FAILURE(Listen());
    }
    StatusOr<std::shared_ptr<Connection>> dialed = Dial();
    ASSERT_TRUE(dialed.ok()) << dialed.status();
    dialed_ = *std::move(dialed);
  }

  // dialed_ <-> accepted_, both started.
  void ConnectPair() {
    ASSERT_NO_FATAL_FAILURE(ListenAndDial());
    accepted_ = WaitReady();
    ASSERT_NE(accepted_, nullptr) << "no connection was ready within the timeout";
    accept_loop_.Run([&] { accepted_->Start(); });
    dial_loop_.Run([&] { dialed_->Start(); });
  }

  void DialerSend(const WireHeader& header, std::span<const std::byte> payload,
                  Connection::SendDone done) {
    dial_loop_.Run([&] { dialed_->Send(header, payload, std::move(done)); });
  }
  void AcceptorSend(const WireHeader& header, std::span<const std::byte> payload,
                    Connection::SendDone done) {
    accept_loop_.Run([&] { accepted_->Send(header, payload, std::move(done)); });
  }

  // Lets every completion already queued on both loops run, so that a late callback would be
  // seen by the assertions that follow.
  void DrainLoops() {
    for (int i = 0; i < 3; ++i) {
      dial_loop_.Run([] {});
      accept_loop_.Run([] {});
    }
  }

  // Declared before the loops so that they outlive every callback the loops may still run.
  RecordingHandler acceptor_handler_;
  RecordingHandler dialer_handler_;
  AcceptHooks hooks_;
  std::atomic<int> admitted_{0};       // admit calls
  std::atomic<int> handler_asked_{0};  // handler_now calls
  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  std::deque<std::shared_ptr<Connection>> ready_;  // delivered by `ready`, not yet taken
  int ready_count_ = 0;

  std::shared_ptr<Device> device_;
  EventLoop accept_loop_{"conformance-accept", -1};
  EventLoop dial_loop_{"conformance-dial", -1};
  std::unique_ptr<Transport> accept_transport_;  // used on accept_loop_ only
  std::unique_ptr<Transport> dial_transport_;    // used on dial_loop_ only (and Dial)
  std::unique_ptr<Acceptor> acceptor_;           // used on accept_loop_ only
  std::uint16_t port_ = 0;
  std::shared_ptr<Connection> accepted_;  // the acceptor's side; used on accept_loop_ only
  std::shared_ptr<Connection> dialed_;    // the dialer's side; used on dial_loop_ only

 private:
  void Bind(EventLoop& loop, std::unique_ptr<Transport>& transport) {
    StatusOr<std::unique_ptr<Transport>> bound = absl::InternalError("Bind did not run");
    loop.Run([&] { bound = device_->Bind(loop); });
    ASSERT_TRUE(bound.ok()) << bound.status();
    transport = *std::move(bound);
  }
  std::deque<std::shared_ptr<Connection>> TakeReady() {
    std::lock_guard lock(ready_mu_);
    return std::exchange(ready_, {});
  }
};

}  // namespace phub::transport
