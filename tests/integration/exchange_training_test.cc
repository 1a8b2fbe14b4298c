// End to end: N real worker processes train K synchronous iterations of deterministic random
// gradients through each GradientExchange: one real phubd (ps), one phubd per worker with the
// model spread over them (ps-colocated), and ring allreduce with the optimizer on the worker
// (ring). Every worker's final weights must be identical and must match an independent
// float64 simulation of the same training. With a schedule (an lr per iteration, through
// GradientExchange::BeginIteration) the same, phubd or the ring stepping each iteration with
// its own lr; a PS exchange not made for a schedule refuses one, naming the option.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "phub/exchange/ps_exchange.h"
#include "phub/kernels/wire_format.h"
#include "phub/transport/verbs/verbs_device.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/test_data.h"
#include "tests/reference/optimizer_reference.h"
#include "tests/support/free_port.h"

namespace phub::testing {
namespace {

struct TrainingCase {
  std::string name;
  std::uint32_t workers;
  std::uint64_t chunk_bytes;
  std::uint32_t cores;
  std::string optimizer;
  RefConfig config;
  std::uint64_t iterations;
  std::string sizes;  // tensor sizes; deliberately not multiples of the chunk
  bool init_from_file = false;  // phubd loads --init-weights instead of taking rank 0's
  std::string comm = "ps";      // the worker's --comm
  std::string transport = "tcp";  // phubd's and the ring's --transport
  std::string wire = "fp32";      // the workers' --wire (ps, ps-colocated)
  bool wire_weights = true;       // --wire-weights wire (else fp32)
  bool tcp_rendezvous = false;    // ring: --rendezvous tcp://127.0.0.1:PORT (rank 0 serves it)
  std::uint32_t racks = 1;        // ps: > 1 = racks of racks, a phubd per rack (--topology)
  // ps: phubd's --nics and every worker's (two NICs each), and phubd logs each ATTACH.
  std::vector<std::string> phubd_nics{}, worker_nics{};
  // A schedule: iteration it steps with lr lrs[it - 1] (the workers' --lrs), the rest of
  // `config` as it is. Empty: `config` every iteration.
  std::vector<std::string> lrs{};
};

// The case with an lr of its own for every iteration (one of them 0: a step that moves only
// the optimizer's state).
TrainingCase Scheduled(TrainingCase c, std::vector<std::string> lrs) {
  c.name += "_lr_schedule";
  c.lrs = std::move(lrs);
  return c;
}

// A PBox with two NICs and workers with two of their own: phubd's cores alternate over its
// NICs, each listening on its own address, and each worker reaches the cores of phubd's NIC k
// from its own NIC k.
TrainingCase OnTwoNics(TrainingCase c, std::vector<std::string> phubd_nics,
                       std::vector<std::string> worker_nics, const std::string& tag) {
  c.name += "_two_nics" + tag;
  c.phubd_nics = std::move(phubd_nics);
  c.worker_nics = std::move(worker_nics);
  return c;
}

std::string Csv(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// Racks of racks: the workers spread over `racks` racks in order, the last racks one short
// when they do not divide evenly (so racks differ in size and the homes must divide by every
// worker, not by racks times a rack's), each rack with its own phubd.
TrainingCase InRacks(TrainingCase c, std::uint32_t racks) {
  c.name += "_racks" + std::to_string(racks);
  c.racks = racks;
  return c;
}

// The racks' topology file (proto/topology.proto) for `c`'s workers "w0".. and phubds on
// `ports`.
std::string RacksFile(const TrainingCase& c, const std::vector<std::uint16_t>& ports) {
  std::string text;
  std::uint32_t next = 0;
  for (std::uint32_t r = 0; r < c.racks; ++r) {
    const std::uint32_t size = c.workers / c.racks + (r < c.workers % c.racks ? 1 : 0);
    text += "rack { name: \"r" + std::to_string(r) + "\" pbox: \"127.0.0.1:" +
            std::to_string(ports[r]) + "\"";
    for (std::uint32_t i = 0; i < size; ++i) text += " host: \"w" + std::to_string(next++) + "\"";
    text += " }\n";
  }
  return text;
}

// The case with pushes (and, with weights, the weights sent back) in a compact format.
TrainingCase OnWire(TrainingCase c, std::string wire, bool weights) {
  c.name += "_" + wire + (weights ? "_weights_too" : "_weights_fp32");
  c.wire = std::move(wire);
  c.wire_weights = weights;
  return c;
}

// A float as it arrives through the compact wire format `wire`.
double OnTheWire(const std::string& wire, float x) {
  if (wire == "bf16") return kernels::ToFloat(kernels::ToBf16(x));
  if (wire == "fp16") return kernels::ToFloat(kernels::ToFp16(x));
  return x;
}

TrainingCase With(TrainingCase c, std::string comm, std::string transport = "tcp") {
  c.name += "_" + comm + (transport == "tcp" ? "" : "_" + transport);
  c.transport = std::move(transport);
  for (char& ch : c.name) ch = ch == '-' ? '_' : ch;
  c.comm = std::move(comm);
  return c;
}

// The ring meeting through rank 0's TCP rendezvous instead of a shared directory.
TrainingCase OverTcpRendezvous(TrainingCase c) {
  c.name += "_tcp_rendezvous";
  c.tcp_rendezvous = true;
  return c;
}

// Initial weights in the --init-weights file come from another seed than rank 0's buffer, so
// the result proves which one was used.
constexpr std::uint64_t kFileSeed = 777;

void PrintTo(const TrainingCase& c, std::ostream* os) { *os << c.name; }

std::vector<std::string> OptimizerFlags(const TrainingCase& c) {
  auto str = [](double v) {
    std::ostringstream out;
    out.precision(17);
    out << v;
    return out.str();
  };
  return {"--optimizer", c.optimizer, "--lr", str(c.config.lr), "--momentum", str(c.config.momentum),
          "--weight-decay", str(c.config.weight_decay), "--beta1", str(c.config.beta1),
          "--beta2", str(c.config.beta2), "--eps", str(c.config.eps)};
}

// The float64 simulation: rank 0's initial weights, then K steps on the workers' mean gradient.
// With a compact wire each worker pushes its gradient plus what rounding left out of its
// earlier pushes, rounded (error feedback, in float32 as the worker does it); with compact
// weights the workers hold a view that trails the weights by one rounded change: `slack` is,
// per element, the last change's size, within whose rounding the workers' weights may differ.
struct Simulated {
  std::vector<std::vector<double>> weights, slack;
};
Simulated Simulate(const TrainingCase& c, const std::vector<std::uint64_t>& sizes,
                   std::uint64_t seed) {
  Simulated out;
  for (std::uint32_t t = 0; t < sizes.size(); ++t) {
    std::vector<double> w(sizes[t]), v, s, view, slack(sizes[t], 0.0);
    std::vector<std::vector<float>> residual(c.workers, std::vector<float>(sizes[t], 0.0f));
    const std::uint64_t init_seed = c.init_from_file ? kFileSeed : seed;
    for (std::uint64_t i = 0; i < sizes[t]; ++i) w[i] = TestValue(init_seed, kInitRank, 0, t, i);
    view = w;
    for (std::uint64_t it = 1; it <= c.iterations; ++it) {
      std::vector<std::vector<double>> grads(c.workers, std::vector<double>(sizes[t]));
      for (std::uint32_t r = 0; r < c.workers; ++r) {
        for (std::uint64_t i = 0; i < sizes[t]; ++i) {
          const float g = TestValue(seed, r, it, t, i);
          if (c.wire == "fp32") {
            grads[r][i] = g;
            continue;
          }
          const float sum = g + residual[r][i];
          grads[r][i] = OnTheWire(c.wire, sum);
          residual[r][i] = static_cast<float>(sum - grads[r][i]);
        }
      }
      RefConfig config = c.config;
      // The lr as the workers parse it (float), as the float64 reference takes it.
      if (!c.lrs.empty()) config.lr = std::stof(c.lrs[it - 1]);
      RefStep(config, grads, w, v, s, it);
      for (std::uint64_t i = 0; i < sizes[t]; ++i) {
        slack[i] = std::fabs(w[i] - view[i]);
        view[i] += OnTheWire(c.wire, static_cast<float>(w[i] - view[i]));
      }
    }
    out.weights.push_back(std::move(w));
    out.slack.push_back(std::move(slack));
  }
  return out;
}

class ExchangeTrainingTest : public ::testing::TestWithParam<TrainingCase> {};

TEST_P(ExchangeTrainingTest, EveryWorkerEndsWithTheFloat64ReferenceWeights) {
  const TrainingCase& c = GetParam();
  if (c.transport == "verbs" && transport::verbs::ListDevices().empty()) {
    GTEST_SKIP() << "no RDMA device here: tests/verbs/run_verbs_tests.sh runs the verbs cases in "
                    "a QEMU guest with soft-RoCE";
  }
  if (c.transport == "verbs" && !c.phubd_nics.empty() &&
      transport::verbs::ListDevices().size() < 2) {
    GTEST_SKIP() << "fewer than two RDMA devices here: tests/verbs/run_in_guest.sh brings up "
                    "rxe0 and rxe1 in its guest";
  }
  const std::uint64_t seed = 42 + c.workers;
  TempDir dir;
  std::vector<std::string> args = {"--max-world-size", std::to_string(c.workers), "--cores",
                                   std::to_string(c.cores), "--chunk-bytes",
                                   std::to_string(c.chunk_bytes), "--one-job",
                                   "--transport", c.transport};
  auto flags = OptimizerFlags(c);
  args.insert(args.end(), flags.begin(), flags.end());
  if (!c.phubd_nics.empty()) {
    args.insert(args.end(), {"--nics", Csv(c.phubd_nics), "--log-level", "debug"});
  }
  if (c.init_from_file) {
    std::ofstream file(dir.File("init.f32"), std::ios::binary);
    auto sizes = ParseSizes(c.sizes);
    for (std::uint32_t t = 0; t < sizes.size(); ++t) {
      for (std::uint64_t i = 0; i < sizes[t]; ++i) {
        float v = TestValue(kFileSeed, kInitRank, 0, t, i);
        file.write(reinterpret_cast<const char*>(&v), sizeof v);
      }
    }
    args.insert(args.end(), {"--init-weights", dir.File("init.f32")});
  }
  // ps: one phubd, or one per rack; ps-colocated: one per worker ("host"); ring: none.
  std::vector<RunningPhubd> servers;
  const std::uint32_t num_servers = c.comm == "ring" ? 0 : c.comm == "ps" ? c.racks : c.workers;
  std::string servers_csv;
  const std::string racks_file = dir.File("racks.txtpb");
  if (c.racks > 1) {
    std::vector<std::uint16_t> ports;
    for (std::uint32_t r = 0; r < c.racks; ++r) ports.push_back(FreeLoopbackPort());
    std::ofstream(racks_file) << RacksFile(c, ports);
    // Each phubd runs two jobs (its rack's, and its chunks' homes): it stays up after the first.
    args.erase(std::find(args.begin(), args.end(), "--one-job"));
    for (std::uint32_t r = 0; r < c.racks; ++r) {
      std::vector<std::string> rack_args = args;
      rack_args.insert(rack_args.end(),
                       {"--topology", racks_file, "--rack", "r" + std::to_string(r)});
      servers.push_back(StartPhubdOnPort(dir, ports[r], rack_args));
    }
  }
  for (std::uint32_t s = 0; s < num_servers && c.racks == 1; ++s) {
    servers.push_back(StartPhubd(dir, args));
    servers_csv += (s ? "," : "") + std::string("127.0.0.1:") + std::to_string(servers.back().port);
  }

  // Per RDMA device, the packets it sent so far (soft-RoCE's hw_counters): a PBox whose cores
  // spread over two NICs moves the job's bytes over both.
  auto sent_packets = [](const std::string& device) -> long long {
    std::ifstream in("/sys/class/infiniband/" + device + "/ports/1/hw_counters/sent_pkts");
    long long n = -1;
    in >> n;
    return n;
  };
  const bool count_devices = c.transport == "verbs" && !c.phubd_nics.empty();
  const long long sent_before[2] = {count_devices ? sent_packets("rxe0") : 0,
                                    count_devices ? sent_packets("rxe1") : 0};

  const std::string rendezvous_address =
      "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort()) + "/" + c.name;
  std::vector<Process> workers;
  for (std::uint32_t r = 0; r < c.workers; ++r) {
    std::vector<std::string> argv = {
        TestWorkerPath(), "--comm", c.comm, "--rank", std::to_string(r), "--world",
        std::to_string(c.workers), "--tensors", c.sizes, "--iters", std::to_string(c.iterations),
        "--seed", std::to_string(seed), "--out", dir.File("w" + std::to_string(r)),
        "--transport", c.transport, "--wire", c.wire, "--wire-weights",
        c.wire_weights ? "wire" : "fp32"};
    if (c.comm == "ring") {
      argv.insert(argv.end(),
                  {"--rendezvous", c.tcp_rendezvous ? rendezvous_address : dir.path()});
      argv.insert(argv.end(), flags.begin(), flags.end());  // the optimizer runs on the worker
    } else if (c.racks > 1) {
      // The topology says which rack and phubd, rank and world size.
      argv.insert(argv.end(), {"--topology", racks_file, "--hostname", "w" + std::to_string(r)});
    } else {
      argv.insert(argv.end(), {"--servers", servers_csv});
    }
    if (!c.worker_nics.empty()) argv.insert(argv.end(), {"--nics", Csv(c.worker_nics)});
    if (!c.lrs.empty()) {
      argv.insert(argv.end(), {"--lrs", Csv(c.lrs)});
      // The PS steps with the workers' optimizer (their Hello names it) and each iteration's lr.
      if (c.comm != "ring") argv.insert(argv.end(), flags.begin(), flags.end());
    }
    workers.push_back(Process::Start(argv, dir.File("worker" + std::to_string(r) + ".log")));
  }
  auto server_logs = [&] {
    std::string logs;
    for (auto& s : servers) logs += "\n" + s.log_path + ":\n" + ReadFile(s.log_path);
    return logs;
  };
  for (std::uint32_t r = 0; r < c.workers; ++r) {
    auto code = workers[r].Wait(std::chrono::seconds(120));
    ASSERT_TRUE(code.has_value()) << "worker " << r << " hung";
    ASSERT_EQ(*code, 0) << "worker " << r << " failed:\n"
                        << ReadFile(dir.File("worker" + std::to_string(r) + ".log"))
                        << "\nphubd logs:" << server_logs();
  }
  for (auto& server : servers) {
    if (c.racks > 1) break;  // without --one-job: they are stopped with the test
    auto phubd_code = server.process.Wait(std::chrono::seconds(30));
    ASSERT_TRUE(phubd_code.has_value()) << "phubd --one-job did not exit after the job";
    EXPECT_EQ(*phubd_code, 0) << ReadFile(server.log_path);
  }

  if (count_devices) {
    for (int d = 0; d < 2; ++d) {
      const std::string device = "rxe" + std::to_string(d);
      const long long sent = sent_packets(device) - sent_before[d];
      std::printf("%s sent %lld packets in the job\n", device.c_str(), sent);
      EXPECT_GT(sent, 100) << device << " carried (almost) none of the job";
    }
  }
  if (!c.phubd_nics.empty()) {
    // Each core listened on its own NIC and each worker reached it from its matching NIC.
    const std::string log = ReadFile(servers[0].log_path);
    for (std::uint32_t core = 0; core < c.cores; ++core) {
      const std::uint32_t nic = core % c.phubd_nics.size();
      EXPECT_NE(log.find("core " + std::to_string(core) + ": "), std::string::npos);
      EXPECT_NE(log.find(", NIC " + std::to_string(nic) + ": "), std::string::npos) << log;
      const std::string from = c.worker_nics[nic % c.worker_nics.size()];
      for (std::uint32_t r = 0; r < c.workers; ++r) {
        const std::string attach = "core " + std::to_string(core) + ": rank " +
                                   std::to_string(r) + " attached from " + from + ":";
        EXPECT_NE(log.find(attach), std::string::npos) << "no '" << attach << "' in\n" << log;
      }
    }
  }

  // Every worker holds exactly the same bytes: they all received phubd's weights (ring: the
  // allgather hands every rank the same reduced bytes and each applies the same step).
  std::string rank0 = ReadFile(dir.File("w0"));
  for (std::uint32_t r = 1; r < c.workers; ++r) {
    EXPECT_EQ(ReadFile(dir.File("w" + std::to_string(r))), rank0) << "rank " << r << " differs";
  }
  auto sizes = ParseSizes(c.sizes);
  const Simulated expected = Simulate(c, sizes, seed);
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  ASSERT_EQ(rank0.size(), total * sizeof(float));
  const float* got = reinterpret_cast<const float*>(rank0.data());
  std::size_t offset = 0, mismatches = 0;
  for (std::uint32_t t = 0; t < sizes.size(); ++t) {
    for (std::uint64_t i = 0; i < sizes[t]; ++i, ++offset) {
      const double want = expected.weights[t][i];
      double tolerance = 2e-5 + 1e-4 * std::fabs(want);
      if (c.wire != "fp32" && c.wire_weights) {
        // The workers hold phubd's view: the weights less the rounding of the last change
        // (one ulp of the format relative to the change, not to the weights).
        tolerance += expected.slack[t][i] * (c.wire == "bf16" ? 0x1p-7 : 0x1p-10);
      }
      if (!(std::fabs(got[offset] - want) <= tolerance) && mismatches++ < 5) {
        ADD_FAILURE() << "tensor " << t << " element " << i << ": got " << got[offset]
                      << ", float64 reference " << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

RefConfig Config(RefOptimizer kind, double lr, double weight_decay = 0) {
  RefConfig c;
  c.kind = kind;
  c.lr = lr;
  c.weight_decay = weight_decay;
  return c;
}

// Sizes: a tensor smaller than any chunk, primes, and one of many chunks.
const std::string kSizes = "1000,37,4099,1,20011";

// The foundation's cases on the dedicated PS; the colocated PS and the ring on the cases
// their code paths differ on (optimizers, ragged sizes, several workers).
std::vector<TrainingCase> Cases() {
  const std::vector<TrainingCase> ps = {
        TrainingCase{"N1_sgd_4KiB_2cores", 1, 4096, 2, "sgd", Config(RefOptimizer::kSgd, 0.1), 3, kSizes},
        TrainingCase{"N2_momentum_4KiB_2cores", 2, 4096, 2, "momentum",
                     Config(RefOptimizer::kMomentum, 0.05), 4, kSizes},
        TrainingCase{"N2_sgd_tiny12B_3cores", 2, 12, 3, "sgd", Config(RefOptimizer::kSgd, 0.1), 2,
                     "1000,37,5,1"},
        TrainingCase{"N4_nesterov_wd_64KiB_2cores", 4, 65536, 2, "nesterov",
                     Config(RefOptimizer::kNesterov, 0.05, 1e-2), 4, kSizes},
        TrainingCase{"N4_adam_1KiB_3cores", 4, 1024, 3, "adam", Config(RefOptimizer::kAdam, 1e-2),
                     5, kSizes},
        TrainingCase{"N2_adam_wd_512KiB_1core", 2, 512 * 1024, 1, "adam",
                     Config(RefOptimizer::kAdam, 1e-3, 1e-2), 3, "300000,17"},
        TrainingCase{"N2_momentum_initial_weights_from_file", 2, 4096, 2, "momentum",
                     Config(RefOptimizer::kMomentum, 0.05), 3, kSizes, /*init_from_file=*/true}};
  std::vector<TrainingCase> all;
  for (const TrainingCase& c : ps) all.push_back(With(c, "ps"));
  // The compact wire (--wire): bf16 and fp16 pushes, weights back compact or in float32, on
  // both PS paths; over verbs too (in the guest).
  all.push_back(With(OnWire(ps[1], "bf16", true), "ps"));
  all.push_back(With(OnWire(ps[4], "bf16", false), "ps"));
  all.push_back(With(OnWire(ps[3], "fp16", true), "ps"));
  all.push_back(With(OnWire(ps[1], "bf16", true), "ps-colocated"));
  all.push_back(With(OnWire(ps[1], "bf16", true), "ps", "verbs"));
  all.push_back(With(OnWire(ps[6], "fp16", false), "ps", "verbs"));
  // Shared memory (every process on this host): several workers and cores, chunks that fill
  // the rings many times over (512 KiB chunks of a 1.2 MB tensor), the compact wire, the ring.
  all.push_back(With(ps[3], "ps", "shm"));
  all.push_back(With(ps[5], "ps", "shm"));
  all.push_back(With(OnWire(ps[1], "bf16", true), "ps", "shm"));
  all.push_back(With(ps[4], "ring", "shm"));
  for (const TrainingCase& c : ps) {
    if (c.init_from_file) continue;  // phubd's file only exists with a PS
    if (c.workers > 1) all.push_back(With(c, "ps-colocated"));
    all.push_back(With(c, "ring"));
  }
  // Racks of racks: 2 racks of 2 (momentum, several cores, chunks of many sizes); 3 racks of
  // 2, 1, 1 workers (Adam: the homes must divide by 4, not 3 racks); one chunk's home on each.
  all.push_back(With(InRacks(ps[1], 2), "ps"));
  all.push_back(With(InRacks(ps[4], 3), "ps"));
  all.push_back(With(InRacks(ps[3], 3), "ps"));
  // Two NICs on phubd and on every worker: loopback addresses here, the guest's rxe0 and rxe1
  // (on dummy0 and dummy1) on verbs.
  all.push_back(With(OnTwoNics(ps[4], {"127.0.0.1", "127.0.0.2"}, {"127.0.0.3", "127.0.0.4"}, ""),
                     "ps"));
  all.push_back(With(OnTwoNics(ps[1], {"192.0.2.1", "198.51.100.1"}, {"192.0.2.1", "198.51.100.1"}, ""), "ps",
                     "verbs"));
  // A schedule (issue 40): an lr per iteration through the ring, phubd and the colocated PS.
  const std::vector<std::string> momentum_lrs = {"0.01", "0.05", "0", "0.025"};
  const std::vector<std::string> adam_lrs = {"0.001", "0.01", "0.005", "0", "0.002"};
  for (const char* comm : {"ring", "ps"}) {
    all.push_back(With(Scheduled(ps[1], momentum_lrs), comm));
    all.push_back(With(Scheduled(ps[4], adam_lrs), comm));
  }
  all.push_back(With(Scheduled(ps[3], momentum_lrs), "ps-colocated"));
  // No shared directory: rank 0 serves the rendezvous over TCP.
  all.push_back(OverTcpRendezvous(With(ps[1], "ring")));
  all.push_back(OverTcpRendezvous(With(ps[3], "ring")));
  // On verbs (run in the soft-RoCE guest): every exchange, several workers and cores, chunks
  // smaller and larger than a page, weights from rank 0 and from phubd's file.
  for (const TrainingCase& c : ps) {
    if (c.workers < 2) continue;
    all.push_back(With(c, "ps", "verbs"));
    if (c.init_from_file) continue;
    if (c.workers == 2) all.push_back(With(c, "ps-colocated", "verbs"));
    all.push_back(With(c, "ring", "verbs"));
  }
  return all;
}

// A PS job made without per_iteration_values steps with fixed values: a schedule's
// BeginIteration is refused, naming the option, and the exchange goes on with phubd's lr.
TEST(PsExchangeScheduleTest, WithoutPerIterationValuesBeginIterationNamesTheOption) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--max-world-size", "1", "--cores", "1", "--one-job",
                                        "--optimizer", "sgd", "--lr", "0.5"});
  exchange::PsExchangeOptions options;
  options.servers = {{"127.0.0.1", phubd.port}};
  std::vector<float> w = {1, 2, 3};
  const std::vector<float> g = {2, 2, 2};
  auto x = exchange::PsExchange::Connect(options, {{0, 1}, {}}, {{"w", 3}}, {std::span<float>(w)});
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE((*x)->Init().ok());
  const Status refused = (*x)->BeginIteration({.lr = 0.1f});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("per_iteration_values"));
  ASSERT_TRUE((*x)->Push(0, g).ok());
  ASSERT_TRUE((*x)->Wait(0).ok());
  EXPECT_EQ(w, (std::vector<float>{0, 1, 2}));  // phubd's lr 0.5, not the refused 0.1
  EXPECT_TRUE((*x)->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, ExchangeTrainingTest, ::testing::ValuesIn(Cases()),
    [](const ::testing::TestParamInfo<TrainingCase>& info) { return info.param.name; });

}  // namespace
}  // namespace phub::testing
