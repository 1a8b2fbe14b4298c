// phubd played by a test, for a real PsClient in the same process: a control listener and one
// data listener per server core on 127.0.0.1 (kernel-picked ports), driven from the test's
// thread with RawSockets (forged_client.h). Handshake() takes the client through Hello, Welcome
// and ATTACH exactly as phubd would; after that the test reads what the client sends on each
// core's data connection and answers whatever it likes: correct WEIGHTS for the positive path
// (tests/phub/client/), hostile ones (tests/integration/hostile_server_test.cc).
//
// Every accept and read has a deadline (kForgedStep), so a test can fail but never hang on
// the client; CloseAll() ends any PsClient call still blocked on this phubd. Not thread-safe:
// one test thread drives it while the client runs on another (PsClientThread).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phub/keys/key_table.h"
#include "phub/transport/wire_header.h"
#include "proto/phub.pb.h"
#include "tests/support/forged_client.h"

namespace phub::testing {

// Each wait of the forged phubd on the client: ample on a loaded 2-core machine under ASan,
// short enough that a regression fails the test instead of hanging it. Never a timing claim.
inline constexpr Millis kForgedStep{5000};

// The job the forged phubd announces, and the client it expects.
struct ForgedJob {
  std::vector<keys::TensorSpec> model;
  std::uint64_t chunk_bytes = 64;
  std::vector<keys::CoreIndex> owners;  // chunk id -> core, as the Welcome's chunk_owner
  std::uint32_t cores = 1;
  std::uint32_t rank = 0;  // the client's rank and world size, checked in its Hello
  std::uint32_t world = 1;
  std::uint64_t session = 0x5e55'1011'2233'4455ull;
  bool weights_from_server = false;

  // The chunking the Welcome announces (the client rebuilds the same). REQUIRES: owners fit.
  keys::KeyTable Table() const;
};

class ForgedPhubd {
 public:
  explicit ForgedPhubd(ForgedJob job);

  bool listening() const;
  std::uint16_t port() const { return control_listener_.port(); }
  const ForgedJob& job() const { return job_; }
  const keys::KeyTable& table() const { return table_; }

  // The Welcome phubd's ControlPlane::StartJob would build for the job: every core on
  // 127.0.0.1 at its data listener, in order, transport "tcp".
  proto::Welcome MakeWelcome() const;

  // Accepts the control connection and checks that its first message is the Hello PsClient
  // should send for the job (version, rank, world, tensor table).
  ::testing::AssertionResult AcceptHello();
  // Sends `reply` (a Welcome, or an Error refusing the Hello) on the control connection.
  ::testing::AssertionResult Reply(const proto::ControlMessage& reply);
  ::testing::AssertionResult SendWelcome(const proto::Welcome& welcome);
  // Accepts core `core`'s data connection and checks that it opens with the client's ATTACH.
  ::testing::AssertionResult AcceptAttach(std::uint32_t core);
  // AcceptHello, SendWelcome(MakeWelcome()), AcceptAttach for every core.
  ::testing::AssertionResult Handshake();
  // The same with `welcome` (MakeWelcome() edited by the test: a resumed job, a liveness
  // timeout) in place of MakeWelcome().
  ::testing::AssertionResult Handshake(const proto::Welcome& welcome);

  // The next message the client sent on the control connection (a Heartbeat, the Goodbye),
  // waiting up to `timeout`.
  ::testing::AssertionResult ReadControl(proto::ControlMessage& message,
                                         Millis timeout = kForgedStep);

  // One data-plane message on core `core`'s connection: the header, then `payload`.
  bool Send(std::uint32_t core, const transport::WireHeader& header,
            std::span<const std::byte> payload);
  // WEIGHTS(chunk, iteration) to the client, `values` being the whole chunk, on its owner's
  // connection.
  bool SendWeights(std::uint32_t chunk, std::uint64_t iteration, std::span<const float> values);
  // The next message the client sent on core `core`'s connection (header and payload).
  ::testing::AssertionResult Read(std::uint32_t core, transport::WireHeader& header,
                                  std::vector<std::byte>& payload);

  // Whether the client closed core `core`'s data connection (or the control connection)
  // within `timeout`; what arrives meanwhile is discarded.
  bool DroppedByClient(std::uint32_t core, Millis timeout);
  bool ControlDroppedByClient(Millis timeout) { return control_.WaitClosed(timeout); }
  // Whether a connection to core `core`'s data listener is waiting to be accepted now (the
  // client dials before PsClient::Connect returns, so after it this needs no waiting).
  bool DataConnectionPending(std::uint32_t core);

  // The next message on core `core`'s connection is the client's BYE, and the end of the
  // stream follows (the client half-closes: Connection::Finish); then this side closes, as
  // phubd does, which lets the client's Finish end.
  ::testing::AssertionResult ExpectBye(std::uint32_t core);
  // The next control message is a Goodbye after `iterations` pushes.
  ::testing::AssertionResult ExpectGoodbye(std::uint64_t iterations);

  // Closes every socket: any PsClient call still blocked on this phubd returns.
  void CloseAll();

 private:
  ForgedJob job_;
  keys::KeyTable table_;
  RawListener control_listener_;
  std::vector<RawListener> data_listeners_;
  RawSocket control_;
  std::vector<RawSocket> data_;  // by core
};

}  // namespace phub::testing
