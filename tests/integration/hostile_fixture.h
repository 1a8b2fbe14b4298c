// What every hostile-client test does around its attack: start a real phubd with short
// deadlines, play a member of a job by hand beside an honest in-process PsClient, and after
// the attack prove that phubd still serves a real 2-worker job with the right weights and holds
// no more than a bounded amount of memory and descriptors.
//
// Nothing here may hang: waits on phubd have deadlines, and PsClient calls that could block
// for good (its handshake has no deadline) run under RunBounded, which SIGKILLs phubd when the
// deadline passes: every blocked PsClient call then returns with phubd's EOF.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/forged_client.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process_stats.h"

namespace phub::testing {

// The model of every job in these tests. With --chunk-bytes 64 (16 floats) it has 5 chunks:
// a = chunks 0..2 (16, 16, 8 floats), b = chunks 3..4 (16, 4), spread over the cores.
inline const std::vector<keys::TensorSpec> kHostileModel = {{"a", 40}, {"b", 20}};
inline constexpr std::uint32_t kHostileChunks = 5;
inline constexpr float kHostileLr = 0.5f;

// What phubd may hold once the attackers are gone (and, for the memory attacks, ever).
inline constexpr std::uint64_t kMaxRssBytes = 200u << 20;
inline constexpr int kMaxOpenFds = 64;

// phubd with --max-world-size 2 --optimizer sgd --lr 0.5 --chunk-bytes 64 (unless `extra` gives
// its own --chunk-bytes), then `extra`. Unless
// built with a sanitizer (whose shadow memory needs terabytes of address space), phubd runs
// with a 4 GiB address-space limit, so a phubd that does allocate what a peer claims fails
// alone instead of taking the machine's memory.
RunningPhubd StartHostilePhubd(const TempDir& dir, const std::vector<std::string>& extra = {},
                               PhubdRlimits limits = {});

// A task on its own thread (an honest worker's calls, which may block) whose end the test
// awaits with a deadline.
class BackgroundTask {
 public:
  BackgroundTask(RunningPhubd& phubd, std::function<void()> body);
  // Finishes within 5 s if Finish was not called (a failed ASSERT returns early), so a task
  // blocked on phubd can never hang the suite.
  ~BackgroundTask();
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // Waits up to `timeout`; past it SIGKILLs phubd (which ends every blocked PsClient call) and
  // joins. False if phubd had to be killed.
  bool Finish(std::chrono::milliseconds timeout);

 private:
  struct State;
  RunningPhubd& phubd_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Runs `body` as a BackgroundTask and finishes it within `timeout`.
bool RunBounded(RunningPhubd& phubd, std::chrono::milliseconds timeout,
                const std::function<void()>& body);

// A real job through phubd: `world` in-process PsClient workers connect (retrying for a few
// seconds while phubd may still be ending the previous job), Init, run 2 iterations and Close;
// every worker's weights must equal the float64 reference of SGD (lr 0.5) on the test data.
// Bounded by `timeout` (RunBounded).
::testing::AssertionResult AJobCompletes(
    RunningPhubd& phubd, std::uint32_t world = 2,
    std::chrono::milliseconds timeout = std::chrono::seconds(20));

// phubd is running, resident memory and its peak are under kMaxRssBytes, and within 3 s its
// descriptors drop under kMaxOpenFds (closes of the attackers' connections may still be in
// flight).
::testing::AssertionResult StaysSmall(RunningPhubd& phubd);

// The end of every attack: phubd serves a job and stays small.
void ExpectServesAJobAndStaysSmall(RunningPhubd& phubd);

// A job of 2 whose `forged.rank` is played by hand and whose other rank is an honest
// PsClient. Formed: both have the Welcome; attached: the forged member has a data connection
// to every core (honest's Connect attaches its own).
struct ForgedJob {
  ForgedMember forged;
  InProcessWorker honest;
  std::vector<std::vector<float>> honest_start;  // honest's weights before anything happened
};

// Forms the job and, if `attach`, attaches the forged member; on failure the test has failed
// (ADD_FAILURE) and false returns.
bool FormForgedJob(RunningPhubd& phubd, std::uint32_t forged_rank, ForgedJob& job,
                   bool attach = true);

// Reads what phubd sends on `socket` until it closes or `timeout` passes. Counts WEIGHTS
// messages by iteration (the test decides which are wrong). True if phubd closed it.
struct DataPlaneWatch {
  bool closed = false;
  int weights_at_iteration_0 = 0;
  int weights_after_iteration_0 = 0;
};
DataPlaneWatch WatchUntilClosed(RawSocket& socket, std::chrono::milliseconds timeout);

// Reads the iteration-0 WEIGHTS of every chunk core `core` owns from the forged member's data
// connection to it: once they are in, the honest rank 0's Init has reached phubd.
bool ReadInitialWeights(ForgedMember& forged, std::uint32_t core,
                        std::chrono::milliseconds timeout);

// The forged member's part of iteration `it`, as a PsClient would play it: a PUSH of every
// chunk, with the gradient TestValue(1, rank, it, ...) that AJobCompletes' reference uses, on
// its owner core's connection; then the WEIGHTS(k, it) of every chunk. False if phubd did not
// answer within `timeout`.
bool ForgedIteration(ForgedMember& forged, std::uint64_t it, std::chrono::milliseconds timeout);

// Rank 0's INIT of every chunk with the initial weights TestValue(1, kInitRank, 0, ...), as
// PsClient::Init sends them (REQUIRES: the forged member is rank 0). False if a send failed.
bool ForgedInit(ForgedMember& forged);

// The initial weights rank 0 starts every job of these tests from.
std::vector<std::vector<float>> InitialWeights();

// Leaves cleanly: BYE on every data connection, Goodbye on the control connection, then closes.
void ForgedLeave(ForgedMember& forged);

// Drops every connection of the forged member without a word (a dead worker).
void ForgedVanish(ForgedMember& forged);

// Expects an Error (optionally of `code`) on `socket` within `timeout`, then EOF within 2 s.
// Returns the Error (empty if none came) so the test can look at its text.
proto::Error ExpectErrorThenClose(RawSocket& socket, std::chrono::milliseconds timeout,
                                  std::optional<proto::Error::Code> code = std::nullopt);

}  // namespace phub::testing
