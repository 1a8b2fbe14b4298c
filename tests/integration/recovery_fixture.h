// What the recovery tests (recovery_test.cc, recovery_liveness_test.cc) share: a phubd that can
// be restarted on the same port, a job of phub_test_worker processes that can be killed and
// restarted rank by rank, and the uninterrupted reference run every recovered run must match
// BITWISE. The workers push gradients that depend on the weights they hold
// (--grad-from-weights), so a worker resumed with the wrong weights, or an iteration counted
// twice or lost, changes the final weights.
//
// Every wait is bounded; a bound passed fails the test. Times are printed and recorded as test
// properties, never asserted. PHUB_KEEP_TEST_FILES=1 keeps the logs. Not thread-safe: one
// test thread drives everything.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process.h"
#include "tests/support/free_port.h"

namespace phub::testing::recovery {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ~100 KB of model: 27 chunks of 4 KiB over 2 cores, one tensor smaller than a chunk.
inline const std::string kSizes = "5000,300,20000,7";

double MsSince(Clock::time_point start);
std::size_t CountOf(const std::string& text, const std::string& needle);
// Prints `ms` and records it as the test property `key`.
void Record(const char* key, double ms);
// The kill schedules' seed: fixed, or PHUB_RECOVERY_SEED to rerun a logged one.
std::uint32_t Seed();

// phubd flags of every job here (--max-world-size `world`, 2 cores, 4 KiB chunks, momentum), then
// `more`.
std::vector<std::string> Flags(std::uint32_t world, std::vector<std::string> more = {});

// A job's phubd flags (Flags(world, more)) writing a checkpoint every 5 iterations into a new
// folder of `dir`, and the same flags with --resume on that folder, for its restarts.
struct Checkpointing {
  std::string folder;
  std::vector<std::string> flags, resume_flags;
};
Checkpointing CheckpointingFlags(const TempDir& dir, std::uint32_t world,
                                 std::vector<std::string> more = {});

// A phubd on a port the test chooses (StartPhubd always takes a new one), so that a restart
// comes back where the workers reconnect. Its log (`name`.log) is appended to across restarts.
struct Phubd {
  Process process;
  std::uint16_t port = 0;
  std::string log_path;
  std::string Log() const { return ReadFile(log_path); }
};
// `port` 0: any free one. Throws if phubd does not write its port within 20 s.
Phubd LaunchPhubd(const TempDir& dir, const std::string& name, std::uint16_t port,
                  const std::vector<std::string>& args, const std::string& listen = "127.0.0.1");

// phub_test_worker processes of one job: rank r logs to <tag>-w<r>.log (appended across
// restarts), writes its final weights to <tag>-w<r>.out and the number of its last completed
// iteration to <tag>-w<r>.progress.
struct Job {
  Job(const TempDir& dir, std::string tag, std::uint32_t world, std::uint64_t iterations,
      std::string sizes = kSizes);

  const TempDir* dir;
  std::string tag;
  std::uint32_t world;
  std::uint64_t iterations;
  std::string sizes;
  std::vector<std::string> extra;   // more test_worker flags
  std::vector<std::string> prefix;  // runs each worker through this (ip netns exec ...)
  std::vector<std::string> hosts;   // phubd's address, by rank; default 127.0.0.1
  std::vector<Process> workers;     // by rank

  std::string File(std::uint32_t rank, const std::string& what) const;
  std::string Log(std::uint32_t rank) const { return ReadFile(File(rank, "log")); }
  std::string Weights(std::uint32_t rank) const { return ReadFile(File(rank, "out")); }
  // The last iteration `rank` completed since its progress file was removed (0: none yet).
  std::uint64_t Progress(std::uint32_t rank) const;
  void ForgetProgress(std::uint32_t rank) const;
  std::uint64_t MaxProgress() const;
  bool AllProgressed(std::uint64_t at_least) const;

  Process Start(std::uint32_t rank, std::uint16_t port) const;
  void StartAll(std::uint16_t port);
  void Restart(std::uint32_t rank, std::uint16_t port) { workers[rank] = Start(rank, port); }
  // Waits up to `bound` in all for every worker to exit; "" when each exited 0, else what went
  // wrong with each, and its log.
  std::string WaitAllSucceed(milliseconds bound);
};

// Where two weight files differ ("" when they are byte for byte equal).
std::string Difference(const std::string& got, const std::string& want);
// The final weights of an uninterrupted job of Flags(world) (no delays, no kills): what every
// recovered run of it must end with, bit for bit. Its workers must agree; "" (and a failure)
// if the run fails.
// `worker_extra`: more test_worker flags, the same as the recovered run's (e.g. --wire).
std::string ReferenceWeights(const TempDir& dir, std::uint32_t world, std::uint64_t iterations,
                             const std::string& sizes = kSizes,
                             const std::vector<std::string>& worker_extra = {});
void ExpectWeightsEqual(const Job& job, const std::string& reference);
// Every worker's weights bitwise equal to rank 0's, and each float within `relative` (of
// max(1, |reference|)) of the reference's.
void ExpectWeightsClose(const Job& job, const std::string& reference, double relative);

}  // namespace phub::testing::recovery
