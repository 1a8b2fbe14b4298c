#include "tests/integration/recovery_fixture.h"

#include <cmath>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace phub::testing::recovery {

namespace {
const std::vector<std::string> kJobFlags = {"--cores",     "2",        "--chunk-bytes", "4096",
                                            "--optimizer", "momentum", "--lr",          "0.05",
                                            "--momentum",  "0.9"};
}  // namespace

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::size_t CountOf(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

void Record(const char* key, double ms) {
  ::testing::Test::RecordProperty(key, std::to_string(static_cast<long long>(ms)));
  std::printf("%s: %.0f ms\n", key, ms);
}

std::uint32_t Seed() {
  if (const char* fixed = std::getenv("PHUB_RECOVERY_SEED")) {
    return static_cast<std::uint32_t>(std::strtoul(fixed, nullptr, 10));
  }
  return 20261124u;
}

std::vector<std::string> Flags(std::uint32_t world, std::vector<std::string> more) {
  std::vector<std::string> args = {"--max-world-size", std::to_string(world)};
  args.insert(args.end(), kJobFlags.begin(), kJobFlags.end());
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

Checkpointing CheckpointingFlags(const TempDir& dir, std::uint32_t world,
                                 std::vector<std::string> more) {
  Checkpointing c;
  c.folder = dir.File("checkpoints");
  std::filesystem::create_directory(c.folder);
  more.insert(more.end(), {"--checkpoint-dir", c.folder, "--checkpoint-every", "5"});
  c.flags = Flags(world, std::move(more));
  c.resume_flags = c.flags;
  c.resume_flags.insert(c.resume_flags.end(), {"--resume", c.folder});
  return c;
}

Phubd LaunchPhubd(const TempDir& dir, const std::string& name, std::uint16_t port,
                  const std::vector<std::string>& args, const std::string& listen) {
  static int launches = 0;
  Phubd phubd;
  phubd.log_path = dir.File(name + ".log");
  const std::string port_file = dir.File(name + "." + std::to_string(launches++) + ".port");
  std::vector<std::string> argv = {PhubdPath(), "--port", std::to_string(port), "--port-file",
                                   port_file};
  argv.insert(argv.end(), {"--listen", listen, "--no-pin"});
  argv.insert(argv.end(), args.begin(), args.end());
  phubd.process = Process::Start(argv, phubd.log_path);
  if (!WaitFor([&] { return !ReadFile(port_file).empty() || !phubd.process.Running(); },
               milliseconds(20000)) ||
      ReadFile(port_file).empty()) {
    throw std::runtime_error("phubd did not start; its log:\n" + phubd.Log());
  }
  phubd.port = static_cast<std::uint16_t>(std::stoi(ReadFile(port_file)));
  return phubd;
}

Job::Job(const TempDir& dir, std::string tag, std::uint32_t world, std::uint64_t iterations,
         std::string sizes)
    : dir(&dir),
      tag(std::move(tag)),
      world(world),
      iterations(iterations),
      sizes(std::move(sizes)) {}

std::string Job::File(std::uint32_t rank, const std::string& what) const {
  return dir->File(tag + "-w" + std::to_string(rank) + "." + what);
}

std::uint64_t Job::Progress(std::uint32_t rank) const {
  // The worker replaces the file by a rename: it is whole or absent.
  const std::string text = ReadFile(File(rank, "progress"));
  return text.empty() ? 0 : std::stoull(text);
}

void Job::ForgetProgress(std::uint32_t rank) const { std::remove(File(rank, "progress").c_str()); }

std::uint64_t Job::MaxProgress() const {
  std::uint64_t most = 0;
  for (std::uint32_t r = 0; r < world; ++r) most = std::max(most, Progress(r));
  return most;
}

bool Job::AllProgressed(std::uint64_t at_least) const {
  for (std::uint32_t r = 0; r < world; ++r) {
    if (Progress(r) < at_least) return false;
  }
  return true;
}

Process Job::Start(std::uint32_t rank, std::uint16_t port) const {
  std::vector<std::string> argv = prefix;
  const std::string host = rank < hosts.size() ? hosts[rank] : "127.0.0.1";
  argv.insert(argv.end(), {TestWorkerPath(), "--host", host, "--port", std::to_string(port)});
  argv.insert(argv.end(), {"--rank", std::to_string(rank), "--world", std::to_string(world)});
  argv.insert(argv.end(), {"--tensors", sizes, "--iters", std::to_string(iterations)});
  argv.insert(argv.end(), {"--grad-from-weights", "--out", File(rank, "out")});
  argv.insert(argv.end(), {"--progress", File(rank, "progress")});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return Process::Start(argv, File(rank, "log"));
}

void Job::StartAll(std::uint16_t port) {
  workers.clear();
  for (std::uint32_t r = 0; r < world; ++r) workers.push_back(Start(r, port));
}

std::string Job::WaitAllSucceed(milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  std::string failures;
  for (std::uint32_t r = 0; r < world; ++r) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    auto code = workers[r].Wait(std::max(left, milliseconds(0)));
    if (!code) {
      failures += "worker " + std::to_string(r) + " still running after " +
                  std::to_string(bound.count()) + " ms; its log:\n" + Log(r) + "\n";
    } else if (*code != 0) {
      failures += "worker " + std::to_string(r) + " exited " + std::to_string(*code) +
                  "; its log:\n" + Log(r) + "\n";
    }
  }
  return failures;
}

std::string Difference(const std::string& got, const std::string& want) {
  if (got.size() != want.size()) {
    return "sizes differ: " + std::to_string(got.size()) + " bytes, reference " +
           std::to_string(want.size());
  }
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  auto at = [](const std::string& bytes, std::size_t i) {
    float f;
    std::memcpy(&f, bytes.data() + i * sizeof(float), sizeof(float));
    return f;
  };
  const std::size_t floats = got.size() / sizeof(float);
  std::size_t differing = 0, first = floats;
  for (std::size_t i = 0; i < floats; ++i) {
    if (std::memcmp(got.data() + i * sizeof(float), want.data() + i * sizeof(float),
                    sizeof(float)) != 0) {
      if (first == floats) first = i;
      ++differing;
    }
  }
  if (first == floats) return "the bytes past the last whole float differ";
  return std::to_string(differing) + " of " + std::to_string(floats) +
         " floats differ; the first, element " + std::to_string(first) + ": " +
         std::to_string(at(got, first)) + " vs " + std::to_string(at(want, first));
}

std::string ReferenceWeights(const TempDir& dir, std::uint32_t world, std::uint64_t iterations,
                             const std::string& sizes, const std::vector<std::string>& worker_extra) {
  auto phubd = StartPhubd(dir, Flags(world));
  Job job(dir, "reference", world, iterations, sizes);
  job.extra = worker_extra;
  const auto start = Clock::now();
  job.StartAll(phubd.port);
  const std::string failures = job.WaitAllSucceed(milliseconds(120000));
  if (!failures.empty()) {
    ADD_FAILURE() << "the reference run failed:\n" << failures;
    return "";
  }
  std::printf("reference run: %llu iterations, %u workers, %.0f ms\n",
              static_cast<unsigned long long>(iterations), world, MsSince(start));
  const std::string weights = job.Weights(0);
  EXPECT_FALSE(weights.empty());
  for (std::uint32_t r = 1; r < world; ++r) {
    EXPECT_EQ(Difference(job.Weights(r), weights), "") << "reference rank " << r;
  }
  return weights;
}

void ExpectWeightsEqual(const Job& job, const std::string& reference) {
  for (std::uint32_t r = 0; r < job.world; ++r) {
    EXPECT_EQ(Difference(job.Weights(r), reference), "")
        << "rank " << r << "'s final weights are not bitwise those of the uninterrupted run";
  }
}

void ExpectWeightsClose(const Job& job, const std::string& reference, double relative) {
  const std::string rank0 = job.Weights(0);
  for (std::uint32_t r = 1; r < job.world; ++r) {
    EXPECT_EQ(Difference(job.Weights(r), rank0), "") << "rank " << r << " differs from rank 0";
  }
  ASSERT_EQ(rank0.size(), reference.size());
  std::vector<float> got(rank0.size() / sizeof(float)), want(got.size());
  std::memcpy(got.data(), rank0.data(), rank0.size());
  std::memcpy(want.data(), reference.data(), reference.size());
  std::size_t far = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = relative * std::max(1.0, std::fabs(double{want[i]}));
    if (!(std::fabs(double{got[i]} - want[i]) <= bound) && far++ < 5) {
      ADD_FAILURE() << "weight " << i << " is " << got[i] << ", the uninterrupted run's "
                    << want[i];
    }
  }
  EXPECT_EQ(far, 0u);
}

}  // namespace phub::testing::recovery
