// A real PsClient on a thread of its own, for tests that play its peer (forged_phubd.h) on the
// test's thread: PsClient's calls block (Connect until the Welcome, Init and Wait until the
// weights land), so the peer must be free to answer while they wait.
//
// The test queues calls; they run one after another, in order, on the client's thread, and
// each returns a future of its Status that the test awaits with a deadline (Done). Everything
// the client touches (its weight buffers, the gradients it sends from) lives in state shared
// with that thread, so a client still hung past every deadline is abandoned (the test has
// failed) rather than freed under it. Not thread-safe: one test thread drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "phub/client/ps_client.h"
#include "tests/support/forged_client.h"

namespace phub::testing {

class PsClientThread {
 public:
  using Call = std::shared_future<Status>;

  // `weights[t]` is the initial content of tensor t's weight buffer (the client owns the
  // buffers from here on). `unblock` (the forged phubd's CloseAll) runs first on destruction,
  // so that a call still blocked on the peer returns.
  PsClientThread(client::PsClientOptions options, Membership membership,
                 std::vector<keys::TensorSpec> model,
                 std::vector<std::vector<float>> weights, std::function<void()> unblock);
  ~PsClientThread();
  PsClientThread(const PsClientThread&) = delete;
  PsClientThread& operator=(const PsClientThread&) = delete;

  // PsClient::Connect.
  Call Connect();
  // `call` on the connected client; FailedPrecondition without running it if there is none
  // (Connect failed, or Destroy ran).
  Call Run(std::function<Status(client::PsClient&)> call);
  // PsClient::Close, then the client is destroyed (its event loop joined): after this call is
  // done nothing writes the weights any more. Returns Close's status (OK without a client).
  Call Destroy();

  // Whether `call` finished within `timeout`.
  static bool Done(const Call& call, Millis timeout = Millis(5000)) {
    return call.wait_for(timeout) == std::future_status::ready;
  }

  // Keeps `values` alive as long as the client may read it (gradients to push, declare).
  std::span<const float> Hold(std::vector<float> values);

  // The weight buffers. REQUIRES: no WEIGHTS are in flight into them: the call that waited
  // for the last ones (Init, Wait) is done, or Destroy is.
  const std::vector<std::vector<float>>& weights() const;

 private:
  struct State;
  Call Queue(std::function<Status(State&)> task);
  static void Loop(State& state);

  std::shared_ptr<State> state_;
  std::function<void()> unblock_;
  std::shared_future<void> finished_;
  std::thread thread_;
};

}  // namespace phub::testing
