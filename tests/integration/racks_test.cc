// Racks of racks (docs/design.md "Racks of racks") with real processes: a phubd per rack and
// the test worker on "hosts" named by the topology file. The float64 results of 2 and 3 racks
// are in exchange_training_test.cc; here: a lost or silent PBox is reported to every worker of
// the job, in every rack, within the liveness bound (never a hang), and the racks' Hellos that
// do not fit phubd's topology are refused saying what to fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <functional>
#include <fstream>
#include <thread>

#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/server/shard/copy_count.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/test_data.h"
#include "tests/support/free_port.h"

namespace phub::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kLivenessMs = 1000;

// `racks` racks of `per_rack` workers "w0".., a phubd on each of `ports`.
std::string RacksFile(std::uint32_t racks, std::uint32_t per_rack,
                      const std::vector<std::uint16_t>& ports) {
  std::string text;
  for (std::uint32_t r = 0; r < racks; ++r) {
    text += "rack { name: \"r" + std::to_string(r) + "\" pbox: \"127.0.0.1:" +
            std::to_string(ports[r]) + "\"";
    for (std::uint32_t i = 0; i < per_rack; ++i) {
      text += " host: \"w" + std::to_string(r * per_rack + i) + "\"";
    }
    text += " }\n";
  }
  return text;
}

// `racks` racks of `per_rack` test workers "w0".. and a phubd per rack on a free port, as the
// racks file names them. StartPhubds gives each phubd the file, its rack and `args(r)` (and
// stops those of an earlier start); StartWorkers gives each worker the file, its host and
// `args`, its log in TAG-wI.log, its final weights in TAG-wI and its progress in
// TAG-wI.progress.
class Racks {
 public:
  using PerRack = std::function<std::vector<std::string>(std::uint32_t rack)>;
  Racks(const TempDir& dir, std::uint32_t racks, std::uint32_t per_rack,
        const std::string& name = "racks")
      : dir_(dir), racks_(racks), per_rack_(per_rack), file_(dir.File(name + ".txtpb")) {
    for (std::uint32_t r = 0; r < racks; ++r) ports_.push_back(FreeLoopbackPort());
    std::ofstream(file_) << RacksFile(racks, per_rack, ports_);
  }
  void StartPhubds(const PerRack& args) {
    phubds.clear();  // an earlier start's, killed: the ports are the file's
    for (std::uint32_t r = 0; r < racks_; ++r) {
      std::vector<std::string> argv = {"--topology", file_, "--rack", "r" + std::to_string(r)};
      const std::vector<std::string> more = args(r);
      argv.insert(argv.end(), more.begin(), more.end());
      phubds.push_back(StartPhubdOnPort(dir_, ports_[r], argv));
    }
  }
  void StartWorkers(const std::string& tag, const std::vector<std::string>& args) {
    tag_ = tag;
    workers.clear();
    for (std::uint32_t w = 0; w < racks_ * per_rack_; ++w) {
      std::vector<std::string> argv = {TestWorkerPath(), "--topology", file_, "--hostname",
                                       "w" + std::to_string(w), "--out", Out(w), "--progress",
                                       Out(w) + ".progress"};
      argv.insert(argv.end(), args.begin(), args.end());
      workers.push_back(Process::Start(argv, Out(w) + ".log"));
    }
  }
  // Every worker exits 0 within `bound` each; else what failed, with the logs.
  std::string AllSucceed(milliseconds bound = milliseconds(60000)) {
    std::string failures;
    for (std::uint32_t w = 0; w < workers.size(); ++w) {
      const std::optional<int> code = workers[w].Wait(bound);
      if (code != 0) {
        failures += "worker w" + std::to_string(w) +
                    (code ? " exited " + std::to_string(*code) : std::string(" hung")) + ":\n" +
                    ReadFile(Log(w));
      }
    }
    return failures.empty() ? failures : failures + PhubdLogs();
  }
  std::string Out(std::uint32_t w) const { return dir_.File(tag_ + "-w" + std::to_string(w)); }
  std::string Log(std::uint32_t w) const { return Out(w) + ".log"; }
  std::string PhubdLogs() const {
    std::string logs;
    for (const auto& p : phubds) logs += "\n" + p.log_path + ":\n" + ReadFile(p.log_path);
    return logs;
  }
  // Every worker has completed `iterations`.
  bool Progressed(std::uint64_t iterations) const {
    for (std::uint32_t w = 0; w < workers.size(); ++w) {
      const std::string text = ReadFile(Out(w) + ".progress");
      if (text.empty() || std::stoull(text) < iterations) return false;
    }
    return true;
  }

  std::vector<RunningPhubd> phubds;
  std::vector<Process> workers;

 private:
  const TempDir& dir_;
  std::uint32_t racks_, per_rack_;
  std::string file_, tag_ = "w";
  std::vector<std::uint16_t> ports_;
};

// Rack r1's PBox dies (SIGKILL) or goes silent (SIGSTOP: a cut uplink looks the same, nothing
// comes back) while 2 racks of 2 train: every worker of both racks exits with an error naming
// it within the liveness bound, none hangs.
void ExpectALostPboxIsReportedToEveryWorker(int signal) {
  TempDir dir;
  Racks racks(dir, 2, 2);
  racks.StartPhubds([](std::uint32_t) -> std::vector<std::string> {
    return {"--cores", "2", "--chunk-bytes", "4096", "--liveness-timeout-ms",
            std::to_string(kLivenessMs), "--optimizer", "sgd", "--lr", "0.1"};
  });
  racks.StartWorkers("run", {"--tensors", "5000,37,20011", "--iters", "100000",
                             "--step-delay-ms", "5"});
  ASSERT_TRUE(WaitFor([&] { return racks.Progressed(5); }, milliseconds(60000)))
      << racks.PhubdLogs() << ReadFile(racks.Log(0));
  racks.phubds[1].process.Kill(signal);
  const auto lost = Clock::now();
  for (std::uint32_t w = 0; w < 4; ++w) {
    // The liveness bound, plus the margin a loaded 2-core CI box needs to run the processes.
    const auto left = milliseconds(kLivenessMs + 8000) -
                      std::chrono::duration_cast<milliseconds>(Clock::now() - lost);
    const std::optional<int> code = racks.workers[w].Wait(std::max(left, milliseconds(0)));
    ASSERT_TRUE(code.has_value()) << "worker w" << w << " hung; its log:\n"
                                  << ReadFile(racks.Log(w)) << racks.PhubdLogs();
    EXPECT_EQ(*code, 3) << ReadFile(racks.Log(w));
  }
  // Rack r0's workers are told by their own PBox, whose relay lost rack r1's.
  for (std::uint32_t w = 0; w < 2; ++w) {
    EXPECT_THAT(ReadFile(racks.Log(w)), AllOf(HasSubstr("stalled"), HasSubstr("rack 'r1'")))
        << ReadFile(racks.Log(w));
  }
  EXPECT_TRUE(racks.phubds[0].process.Running()) << racks.PhubdLogs();
  std::printf("workers of both racks exited %lld ms after rack r1's PBox was lost\n",
              static_cast<long long>(
                  std::chrono::duration_cast<milliseconds>(Clock::now() - lost).count()));
  if (signal == SIGSTOP) racks.phubds[1].process.Kill(SIGCONT);
}

TEST(Racks, APboxKilledMidRunIsReportedToEveryWorker) {
  ExpectALostPboxIsReportedToEveryWorker(SIGKILL);
}

TEST(Racks, APboxGoneSilentIsReportedToEveryWorkerWithinTheLivenessBound) {
  ExpectALostPboxIsReportedToEveryWorker(SIGSTOP);
}

// With --checkpoint-dir each PBox checkpoints the chunks it is home to, and nothing else: its
// file holds its home chunks (chunk c's home is rack c mod R) at the last iteration, with the
// float64 reference's weights.
TEST(Racks, EachPboxCheckpointsTheChunksItIsHomeTo) {
  constexpr std::uint64_t kIterations = 4, kSeed = 1;
  constexpr double kLr = 0.1;
  const std::vector<std::uint64_t> sizes = {5000, 37, 20011};
  TempDir dir;
  Racks racks(dir, 2, 2);
  racks.StartPhubds([&](std::uint32_t r) -> std::vector<std::string> {
    return {"--cores", "2", "--chunk-bytes", "4096", "--optimizer", "sgd", "--lr", "0.1",
            "--checkpoint-dir", dir.File("ckpt" + std::to_string(r)), "--checkpoint-every", "2"};
  });
  racks.StartWorkers("run", {"--tensors", "5000,37,20011", "--iters",
                             std::to_string(kIterations), "--seed", std::to_string(kSeed)});
  ASSERT_EQ(racks.AllSucceed(), "");
  std::size_t chunks_seen = 0;
  for (std::uint32_t r = 0; r < 2; ++r) {
    const std::string ckpt = dir.File("ckpt" + std::to_string(r)) + "/default@racks";
    StatusOr<server::LoadedCheckpoint> loaded;
    // The last checkpoint is written on the job's writer thread as the iteration completes.
    ASSERT_TRUE(WaitFor(
        [&] {
          loaded = server::LoadNewestCheckpoint(ckpt);
          return loaded.ok() && !loaded->snapshot.chunks.empty() &&
                 loaded->snapshot.chunks[0].iteration == kIterations;
        },
        milliseconds(20000)))
        << ckpt << ": " << (loaded.ok() ? "older iteration" : loaded.status().ToString());
    const server::JobSnapshot& snap = loaded->snapshot;
    EXPECT_EQ(snap.world_size, 2u);  // its members: the racks' PBoxes
    // Its tensors: one per home chunk, "t<k>@<offset>", chunks of the same ids mod 2, each of
    // the rack's chunk's elements and its counts of copies and members (copy_count.h).
    for (const keys::TensorSpec& t : snap.tensors) {
      const std::size_t at = t.name.find('@');
      ASSERT_NE(at, std::string::npos) << t.name;
      const std::uint32_t tensor = std::stoul(t.name.substr(1, at - 1));
      const std::uint64_t offset = std::stoull(t.name.substr(at + 1));
      ASSERT_LT(tensor, sizes.size());
      ASSERT_GT(t.elements, server::kCountElements) << t.name;
      ASSERT_LE(offset + t.elements - server::kCountElements, sizes[tensor]);
      // Chunk ids run over the tensors in order, 1024 floats each: the id of this one.
      std::uint64_t id = 0;
      for (std::uint32_t k = 0; k < tensor; ++k) id += (sizes[k] + 1023) / 1024;
      id += offset / 1024;
      EXPECT_EQ(id % 2, r) << t.name << " is chunk " << id << ", not homed at rack " << r;
      ++chunks_seen;
    }
    ASSERT_EQ(snap.chunks.size(), snap.tensors.size());
    for (std::size_t c = 0; c < snap.chunks.size(); ++c) {
      const keys::TensorSpec& t = snap.tensors[c];
      const std::size_t at = t.name.find('@');
      const std::uint32_t tensor = std::stoul(t.name.substr(1, at - 1));
      const std::uint64_t offset = std::stoull(t.name.substr(at + 1));
      ASSERT_EQ(snap.chunks[c].weights.size(), t.elements);
      // The counts' slots are no weights: never stepped.
      for (std::uint64_t i = t.elements - server::kCountElements; i < t.elements; ++i) {
        EXPECT_EQ(snap.chunks[c].weights[i], 0.0f) << t.name << " element " << i;
      }
      for (std::uint64_t i = 0; i + server::kCountElements < t.elements; ++i) {
        double want = TestValue(kSeed, kInitRank, 0, tensor, offset + i);
        for (std::uint64_t it = 1; it <= kIterations; ++it) {
          double mean = 0;
          for (std::uint32_t w = 0; w < 4; ++w) mean += TestValue(kSeed, w, it, tensor, offset + i);
          want -= kLr * mean / 4;
        }
        ASSERT_NEAR(snap.chunks[c].weights[i], want, 1e-5 + 1e-5 * std::fabs(want))
            << t.name << " element " << i;
      }
    }
  }
  EXPECT_EQ(chunks_seen, 26u);  // 5 + 1 + 20 chunks of 1024 floats, each on one home
}

// Every PBox restarted with --resume on its homes' checkpoint: the job goes on from the weights
// and momentum of the checkpoint, on every worker of every rack (the workers' own step count
// starts again at 1: the test worker's gradients of the second run are those of steps 1, 2).
TEST(Racks, AJobOverRacksResumesFromItsHomesCheckpoints) {
  constexpr std::uint64_t kSeed = 1;
  constexpr double kLr = 0.05, kMomentum = 0.9;
  const std::vector<std::uint64_t> sizes = {5000, 37, 20011};
  TempDir dir;
  Racks racks(dir, 2, 2);
  const auto run = [&](const std::string& tag, std::uint64_t iterations, bool resume) {
    racks.StartPhubds([&](std::uint32_t r) {
      const std::string ckpt = dir.File("ckpt" + std::to_string(r));
      std::vector<std::string> args = {"--cores", "2", "--chunk-bytes", "4096", "--optimizer",
                                       "momentum", "--lr", "0.05", "--momentum", "0.9",
                                       "--checkpoint-dir", ckpt, "--checkpoint-every", "2"};
      if (resume) args.insert(args.end(), {"--resume", ckpt + "/default@racks"});
      return args;
    });
    racks.StartWorkers(tag, {"--tensors", "5000,37,20011", "--iters",
                             std::to_string(iterations), "--seed", std::to_string(kSeed)});
    ASSERT_EQ(racks.AllSucceed(), "");
    // The homes' checkpoints of the run's last iteration are written before phubd goes.
    for (std::uint32_t r = 0; r < 2; ++r) {
      const std::string ckpt = dir.File("ckpt" + std::to_string(r)) + "/default@racks";
      ASSERT_TRUE(WaitFor(
          [&] {
            auto loaded = server::LoadNewestCheckpoint(ckpt);
            return loaded.ok() && loaded->snapshot.chunks[0].iteration >= (resume ? 6u : 4u);
          },
          milliseconds(20000)))
          << ckpt;
    }
  };
  run("first", 4, false);
  run("resumed", 2, true);
  // The reference: 4 steps, then 2 more with the gradients of steps 1 and 2, momentum carried.
  std::size_t offset = 0, mismatches = 0;
  const std::string got = ReadFile(racks.Out(0));
  ASSERT_EQ(got.size(), (5000 + 37 + 20011) * sizeof(float));
  const float* weights = reinterpret_cast<const float*>(got.data());
  for (std::uint32_t t = 0; t < sizes.size(); ++t) {
    for (std::uint64_t i = 0; i < sizes[t]; ++i, ++offset) {
      double w = TestValue(kSeed, kInitRank, 0, t, i), v = 0;
      for (std::uint64_t step : {1, 2, 3, 4, 1, 2}) {
        double mean = 0;
        for (std::uint32_t r = 0; r < 4; ++r) mean += TestValue(kSeed, r, step, t, i);
        v = kMomentum * v + mean / 4;
        w -= kLr * v;
      }
      if (!(std::fabs(weights[offset] - w) <= 1e-5 + 1e-4 * std::fabs(w)) && mismatches++ < 5) {
        ADD_FAILURE() << "tensor " << t << " element " << i << ": " << weights[offset]
                      << ", float64 reference " << w;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
  for (std::uint32_t w = 1; w < 4; ++w) {
    EXPECT_EQ(ReadFile(racks.Out(w)), got) << "worker " << w;
  }
}

// Determinism: the racks' sums are added in a fixed order (ranks within a rack, then racks), so
// two runs of the same topology end with the same bits, on every worker of every rack.
TEST(Racks, TwoRunsOfOneTopologyEndWithTheSameBits) {
  TempDir dir;
  std::vector<std::string> results;
  for (int run = 0; run < 2; ++run) {
    Racks racks(dir, 3, 2, "racks" + std::to_string(run));
    racks.StartPhubds([](std::uint32_t) -> std::vector<std::string> {
      return {"--cores", "3", "--chunk-bytes", "4096", "--optimizer", "adam", "--lr", "0.01"};
    });
    racks.StartWorkers("run" + std::to_string(run), {"--tensors", "5000,37,20011", "--iters", "5"});
    ASSERT_EQ(racks.AllSucceed(), "");
    for (std::uint32_t w = 0; w < 6; ++w) results.push_back(ReadFile(racks.Out(w)));
  }
  ASSERT_FALSE(results[0].empty());
  for (std::size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i], results[0]) << "run " << i / 6 << " worker " << i % 6 << " differs";
  }
}

// A worker whose topology does not fit its phubd's, with the error it gets.
struct Misfit {
  std::string name;
  std::string worker_file;  // %P: the port of the phubd of rack r0 (which serves rack r0)
  std::string hostname;
  std::vector<std::string> message;
};

class RacksRefuse : public ::testing::TestWithParam<Misfit> {};

TEST_P(RacksRefuse, AHelloThatDoesNotFitPhubdsTopologyIsRefusedSayingWhy) {
  const Misfit& m = GetParam();
  TempDir dir;
  const std::vector<std::uint16_t> ports = {FreeLoopbackPort(), FreeLoopbackPort()};
  const std::string file = dir.File("racks.txtpb");
  std::ofstream(file) << RacksFile(2, 2, ports);
  RunningPhubd phubd = StartPhubdOnPort(dir, ports[0], {"--topology", file, "--rack", "r0"});
  std::string text = m.worker_file;
  text.replace(text.find("%P"), 2, std::to_string(ports[0]));
  std::ofstream(dir.File("worker.txtpb")) << text;
  Process worker = Process::Start({TestWorkerPath(), "--topology", dir.File("worker.txtpb"),
                                   "--hostname", m.hostname, "--tensors", "100", "--iters", "1"},
                                  dir.File("worker.log"));
  const std::optional<int> code = worker.Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << "the worker hung";
  EXPECT_EQ(*code, 3);
  for (const std::string& part : m.message) {
    EXPECT_THAT(ReadFile(dir.File("worker.log")), HasSubstr(part));
  }
  EXPECT_TRUE(phubd.process.Running()) << ReadFile(phubd.log_path);
}

INSTANTIATE_TEST_SUITE_P(
    Misfits, RacksRefuse,
    ::testing::Values(
        // Rack r1 in the worker's file, but its PBox is the phubd of rack r0.
        Misfit{"OtherRacksPbox",
               "rack { name: \"r0\" pbox: \"127.0.0.1:1\" host: \"w0\" host: \"w1\" }\n"
               "rack { name: \"r1\" pbox: \"127.0.0.1:%P\" host: \"w2\" host: \"w3\" }",
               "w2",
               {"is in rack 'r1'", "serves rack 'r0'", "--hostname"}},
        Misfit{"MoreRacksThanPhubdKnows",
               "rack { name: \"r0\" pbox: \"127.0.0.1:%P\" host: \"w0\" host: \"w1\" }\n"
               "rack { name: \"r1\" pbox: \"127.0.0.1:1\" host: \"w2\" }\n"
               "rack { name: \"r2\" pbox: \"127.0.0.1:2\" host: \"w3\" }",
               "w0",
               {"3 racks", "has 2", "same topology file"}},
        Misfit{"RackOfAnotherSize",
               "rack { name: \"r0\" pbox: \"127.0.0.1:%P\" host: \"w0\" host: \"w1\" host: \"x\" }\n"
               "rack { name: \"r1\" pbox: \"127.0.0.1:1\" host: \"w2\" host: \"w3\" }",
               "w0",
               {"rack has 3 workers", "lists 2 hosts"}}),
    [](const ::testing::TestParamInfo<Misfit>& info) { return info.param.name; });

// A worker of a job over several racks at a phubd started without --topology.
TEST(Racks, AJobOverRacksAtAPhubdWithoutTopologyIsRefused) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {});
  std::ofstream(dir.File("worker.txtpb"))
      << "rack { name: \"r0\" pbox: \"127.0.0.1:" << phubd.port << "\" host: \"w0\" }\n"
      << "rack { name: \"r1\" pbox: \"127.0.0.1:1\" host: \"w1\" }\n";
  Process worker = Process::Start({TestWorkerPath(), "--topology", dir.File("worker.txtpb"),
                                   "--hostname", "w0", "--tensors", "100", "--iters", "1"},
                                  dir.File("worker.log"));
  const std::optional<int> code = worker.Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << "the worker hung";
  EXPECT_EQ(*code, 3);
  EXPECT_THAT(ReadFile(dir.File("worker.log")),
              AllOf(HasSubstr("without --topology"), HasSubstr("--rack NAME")));
}

// One job's members must agree on the racks: a worker without the topology beside one with it
// is refused (else one rack would train apart from the others without a word).
TEST(Racks, AJobsMembersThatDisagreeOnTheRacksAreRefused) {
  TempDir dir;
  const std::vector<std::uint16_t> ports = {FreeLoopbackPort(), FreeLoopbackPort()};
  const std::string file = dir.File("racks.txtpb");
  std::ofstream(file) << RacksFile(2, 2, ports);
  RunningPhubd phubd = StartPhubdOnPort(
      dir, ports[0], {"--topology", file, "--rack", "r0", "--form-timeout-ms", "3000"});
  Process racked = Process::Start({TestWorkerPath(), "--topology", file, "--hostname", "w0",
                                   "--tensors", "100", "--iters", "1"},
                                  dir.File("racked.log"));
  std::this_thread::sleep_for(milliseconds(300));  // its Hello first: the job's
  Process flat = Process::Start({TestWorkerPath(), "--port", std::to_string(ports[0]), "--rank",
                                 "1", "--world", "2", "--tensors", "100", "--iters", "1"},
                                dir.File("flat.log"));
  EXPECT_EQ(flat.Wait(milliseconds(30000)), 3);
  EXPECT_THAT(ReadFile(dir.File("flat.log")),
              AllOf(HasSubstr("spans 0 racks"), HasSubstr("same --topology")));
  EXPECT_EQ(racked.Wait(milliseconds(30000)), 3);  // its job never forms: refused in time
  EXPECT_TRUE(phubd.process.Running()) << ReadFile(phubd.log_path);
}

// phubd's own flags: a rack not in the file, a bad file.
TEST(Racks, PhubdRefusesToStartWithARackNotInItsTopology) {
  TempDir dir;
  std::ofstream(dir.File("racks.txtpb")) << RacksFile(2, 1, {7001, 7002});
  std::ofstream(dir.File("bad.txtpb")) << "rack { name: \"r0\" host: \"w0\" }";
  Process no_rack = Process::Start({PhubdPath(), "--port", "0", "--topology",
                                    dir.File("racks.txtpb"), "--rack", "r9"},
                                   dir.File("no_rack.log"));
  EXPECT_EQ(no_rack.Wait(milliseconds(10000)), 2);
  EXPECT_THAT(ReadFile(dir.File("no_rack.log")), AllOf(HasSubstr("'r9'"), HasSubstr("r0, r1")));
  Process bad = Process::Start(
      {PhubdPath(), "--port", "0", "--topology", dir.File("bad.txtpb"), "--rack", "r0"},
      dir.File("bad.log"));
  EXPECT_EQ(bad.Wait(milliseconds(10000)), 2);
  EXPECT_THAT(ReadFile(dir.File("bad.log")), HasSubstr("no pbox"));
}

}  // namespace
}  // namespace phub::testing
