// staging_bench: what the staging pipeline (phub/exchange/staged_exchange.h) costs a step, set
// against the physical limit of a staged path: the same bytes copied device -> pinned host and
// back alone, measured in the same run.
//
//   staging_bench --model resnet50 [--engine cuda|host] [--segment-bytes 0,4194304]
//                 [--rounds 5] [--iters 10] [--out DIR]
//
// The model's parameter tensors (sizes from worker/nn's zoo) live on the device (GPU 0, or with
// --engine host a separate host buffer that the host engine copies for real). Four timings per
// round, interleaved, each of `iters` steps (push every tensor in backward order, then wait for
// all, then until the weights are on the device):
//   copy      every tensor to pinned staging, then every one back: the bytes' D2H + H2D alone,
//             the physical limit of a staged path
//   pipeline  StagedExchange over an exchange that answers at once: the staging itself
//   exchange  a real exchange on host buffers (a one-rank ring: its copy and SGD step)
//   staged    the same exchange fed from the device through the pipeline
// pipeline / copy is the staging cost's figure (issue 39's bar: <= 1.3); staged / exchange
// shows how much of it the exchange hides. pipeline and staged are timed for each
// --segment-bytes (0: whole tensors; StagedExchangeOptions::segment_bytes), a row each, all in
// the same rounds. Medians over rounds; a TSV and a Markdown table in --out (default
// results/staging).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "phub/exchange/make_exchange.h"
#include "phub/exchange/staged_exchange.h"
#include "phub/staging/host_copy_engine.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/nn/models/models.h"
#include "worker/train/trainer.h"
#ifdef PHUB_HAVE_CUDA_STAGING
#include "phub/nccl/device_buffer.h"
#include "phub/staging/cuda_copy_engine.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

// The pipeline alone: an exchange that answers every push at once with the weights it holds
// (nothing moves, nothing is stepped). A measuring instrument of this bench, so that "staged"
// minus nothing is the staging itself; the product never uses it.
class AnswersAtOnce final : public phub::exchange::GradientExchange {
 public:
  phub::Status Init() override { return absl::OkStatus(); }
  // Nothing is stepped: the values have nowhere to go.
  phub::Status BeginIteration(const phub::kernels::StepValues&) override {
    return absl::OkStatus();
  }
  phub::Status Push(std::uint32_t, std::span<const float>) override { return absl::OkStatus(); }
  phub::Status Wait(std::uint32_t) override { return absl::OkStatus(); }
  phub::Status WaitAll() override { return absl::OkStatus(); }
  phub::Status Close() override { return absl::OkStatus(); }
  std::string name() const override { return "answers-at-once"; }
};
using phub::Status;
namespace ex = phub::exchange;
namespace st = phub::staging;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device memory for one tensor: a GPU buffer, or (host engine) a plain host array.
struct DeviceArray {
  std::vector<float> host;
#ifdef PHUB_HAVE_CUDA_STAGING
  phub::nccl::DeviceBuffer gpu;
#endif
  float* data() {
#ifdef PHUB_HAVE_CUDA_STAGING
    if (gpu.data() != nullptr) return gpu.data();
#endif
    return host.data();
  }
};

int Fail(const Status& s, const char* what) {
  std::fprintf(stderr, "staging_bench: %s: %s\n", what, std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"staging_bench: the staging pipeline's cost per step vs the bytes' D2H + H2D"};
  std::string model_name = "resnet50", engine_name = "cuda", out_dir = "results/staging";
  int rounds = 5, iters = 10;
  std::vector<std::uint64_t> segment_sizes = {0, ex::kDefaultSegmentBytes};
  app.add_option("--model", model_name, "A model of the zoo (its parameter tensors)");
  app.add_option("--segment-bytes", segment_sizes,
                 "The staging's segment sizes to time (0: whole tensors), a row each")
      ->delimiter(',');
  app.add_option("--engine", engine_name, "cuda (GPU 0, pinned staging) or host (memcpy)")
      ->check(CLI::IsMember({"cuda", "host"}));
  app.add_option("--rounds", rounds, "Rounds (medians over them)")->check(CLI::Range(1, 1000));
  app.add_option("--iters", iters, "Steps per timing")->check(CLI::Range(1, 100000));
  app.add_option("--out", out_dir, "Where staging.tsv and staging.md go");
  CLI11_PARSE(app, argc, argv);

  // The tensor table, from the model built on the CPU (batch 1: parameters do not depend on it).
  auto backend = phub::worker::MakeOnednnBackend();
  if (!backend.ok()) return Fail(backend.status(), "oneDNN backend");
  auto model = phub::worker::MakeModel(model_name, 1);
  if (!model.ok()) return Fail(model.status(), "model");
  if (Status s = (*model)->Build(**backend, 1); !s.ok()) return Fail(s, "model build");
  const std::vector<phub::keys::TensorSpec> tensors = phub::worker::TensorTable(**model);
  std::uint64_t floats = 0;
  for (const auto& t : tensors) floats += t.elements;

  std::shared_ptr<st::CopyEngine> engine;
  if (engine_name == "cuda") {
#ifdef PHUB_HAVE_CUDA_STAGING
    auto e = st::MakeCudaCopyEngine({.device = 0});
    if (!e.ok()) return Fail(e.status(), "CUDA copy engine");
    engine = *std::move(e);
#else
    return Fail(absl::UnimplementedError("this build has no CUDA toolkit"), "--engine cuda");
#endif
  } else {
    engine = *st::MakeHostCopyEngine({.separate_device = true});
  }

  // Device gradients (random) and weights; host mirrors for the exchange-alone timing.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<DeviceArray> g(tensors.size()), w(tensors.size());
  std::vector<std::vector<float>> host_g(tensors.size()), host_w(tensors.size());
  std::vector<std::span<float>> dg, dw, hw;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::size_t n = tensors[t].elements;
    host_g[t].resize(n);
    host_w[t].resize(n);
    for (float& x : host_g[t]) x = u(rng);
    for (float& x : host_w[t]) x = u(rng);
    for (auto* a : {&g[t], &w[t]}) {
#ifdef PHUB_HAVE_CUDA_STAGING
      if (engine_name == "cuda") {
        auto b = phub::nccl::DeviceBuffer::Allocate(0, n);
        if (!b.ok()) return Fail(b.status(), "device buffer");
        a->gpu = *std::move(b);
        if (Status s = a->gpu.CopyFromHost(a == &g[t] ? host_g[t] : host_w[t]); !s.ok()) {
          return Fail(s, "copy to the device");
        }
        continue;
      }
#endif
      a->host = a == &g[t] ? host_g[t] : host_w[t];
    }
    dg.emplace_back(g[t].data(), n);
    dw.emplace_back(w[t].data(), n);
    hw.emplace_back(host_w[t].data(), n);
  }

  const std::string rdv =
      (std::filesystem::temp_directory_path() / ("phub-staging-bench-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(rdv);
  ex::ExchangeOptions options;
  options.kind = ex::ExchangeKind::kRing;
  options.membership = {0, 1};
  options.ring.ring.rendezvous = rdv;
  options.ring.optimizer.kind = phub::kernels::OptimizerKind::kSgd;
  options.ring.optimizer.lr = 1e-6f;
  auto alone = ex::MakeExchange(options, tensors, hw);
  if (!alone.ok()) return Fail(alone.status(), "exchange on host buffers");
  if (Status s = (*alone)->Init(); !s.ok()) return Fail(s, "init");
  // Per segment size: the pipeline alone, and the staged exchange (its own one-rank ring).
  std::vector<std::unique_ptr<ex::DeviceExchange>> staged, pipeline;
  std::vector<std::span<const float>> dg_const(dg.begin(), dg.end());
  for (std::size_t k = 0; k < segment_sizes.size(); ++k) {
    const std::string dir = rdv + "/" + std::to_string(k);
    std::filesystem::create_directories(dir);
    options.ring.ring.rendezvous = dir;
    options.segment_bytes = segment_sizes[k];
    auto x = ex::MakeDeviceExchange(options, engine, tensors, dg, dw);
    if (!x.ok()) return Fail(x.status(), "staged exchange");
    auto p = ex::StagedExchange::Create(
        engine, tensors, dg_const, dw,
        [](std::vector<phub::keys::TensorSpec>,
           std::vector<std::span<float>>) -> phub::StatusOr<std::unique_ptr<ex::GradientExchange>> {
          return std::make_unique<AnswersAtOnce>();
        },
        {.segment_bytes = segment_sizes[k]});
    if (!p.ok()) return Fail(p.status(), "pipeline");
    if (Status s = (*x)->Init(nullptr); !s.ok()) return Fail(s, "staged init");
    if (Status s = (*p)->Init(nullptr); !s.ok()) return Fail(s, "pipeline init");
    staged.push_back(*std::move(x));
    pipeline.push_back(*std::move(p));
  }
  auto staging = engine->AllocateStaging(floats);
  if (!staging.ok()) return Fail(staging.status(), "staging");

  const auto ms = [](Clock::time_point a) {
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
  };
  auto time_copy = [&]() -> phub::StatusOr<double> {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      st::Fence last;
      std::size_t at = 0;
      for (std::size_t t = tensors.size(); t-- > 0;) {
        PHUB_ASSIGN_OR_RETURN(
            last, engine->ToHost(dg[t].data(), staging->span().data() + at, dg[t].size(), {}));
        at += dg[t].size();
      }
      PHUB_RETURN_IF_ERROR(engine->HostWait(last, std::chrono::seconds(60)));
      at = 0;
      for (std::size_t t = tensors.size(); t-- > 0;) {
        PHUB_ASSIGN_OR_RETURN(
            last, engine->ToDevice(staging->span().data() + at, dg[t].data(), dg[t].size(), {}));
        at += dg[t].size();
      }
      PHUB_RETURN_IF_ERROR(engine->HostWait(last, std::chrono::seconds(60)));
    }
    return ms(start) / iters;
  };
  auto time_alone = [&]() -> phub::StatusOr<double> {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      for (std::size_t t = tensors.size(); t-- > 0;) {
        PHUB_RETURN_IF_ERROR((*alone)->Push(static_cast<std::uint32_t>(t), host_g[t]));
      }
      PHUB_RETURN_IF_ERROR((*alone)->WaitAll());
    }
    return ms(start) / iters;
  };
  auto time_staged = [&](ex::DeviceExchange& x) -> phub::StatusOr<double> {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      for (std::size_t t = tensors.size(); t-- > 0;) {
        PHUB_RETURN_IF_ERROR(x.Push(static_cast<std::uint32_t>(t), nullptr));
      }
      PHUB_RETURN_IF_ERROR(x.WaitAll(nullptr));
      // Until the weights are on the device: what the next forward would wait for.
      PHUB_ASSIGN_OR_RETURN(st::Fence done, engine->Record(nullptr));
      PHUB_RETURN_IF_ERROR(engine->HostWait(done, std::chrono::seconds(60)));
    }
    return ms(start) / iters;
  };

  const std::size_t sizes = segment_sizes.size();
  std::vector<double> copy, exch;
  std::vector<std::vector<double>> pipe(sizes), stag(sizes);
  (void)time_copy(), (void)time_alone();  // warm-up
  for (std::size_t k = 0; k < sizes; ++k)
    (void)time_staged(*staged[k]), (void)time_staged(*pipeline[k]);
  for (int r = 0; r < rounds; ++r) {
    auto c = time_copy();
    if (!c.ok()) return Fail(c.status(), "copy timing");
    auto a = time_alone();
    if (!a.ok()) return Fail(a.status(), "exchange timing");
    copy.push_back(*c);
    exch.push_back(*a);
    std::fprintf(stderr, "round %d: copy %.2f ms, exchange %.2f ms", r + 1, *c, *a);
    for (std::size_t k = 0; k < sizes; ++k) {
      auto p = time_staged(*pipeline[k]);
      if (!p.ok()) return Fail(p.status(), "pipeline timing");
      auto s = time_staged(*staged[k]);
      if (!s.ok()) return Fail(s.status(), "staged timing");
      pipe[k].push_back(*p);
      stag[k].push_back(*s);
      std::fprintf(stderr, "; segments of %llu B: pipeline %.2f ms, staged %.2f ms",
                   static_cast<unsigned long long>(segment_sizes[k]), *p, *s);
    }
    std::fprintf(stderr, "\n");
  }
  for (std::size_t k = 0; k < sizes; ++k) {
    (void)pipeline[k]->Close();
    (void)staged[k]->Close();
  }
  (void)(*alone)->Close();
  std::filesystem::remove_all(rdv);

  const double c = Median(copy), a = Median(exch);
  const double mb = static_cast<double>(floats) * 4 / 1e6;
  std::filesystem::create_directories(out_dir);
  std::ofstream tsv(out_dir + "/staging.tsv");
  std::ofstream md(out_dir + "/staging.md");
  tsv << "model\tengine\ttensors\tMB\tsegment_bytes\tcopy_ms\tpipeline_ms\tpipeline_over_copy"
         "\texchange_ms\tstaged_ms\tstaged_over_exchange\n";
  md << "| model | engine | tensors | MB | segment | D2H+H2D alone ms | pipeline ms | "
        "pipeline / copy | exchange on host ms | staged exchange ms | staged / host |\n"
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t k = 0; k < sizes; ++k) {
    const double p = Median(pipe[k]), s = Median(stag[k]);
    const std::uint64_t b = segment_sizes[k];
    const std::string segment = b == 0               ? std::string("whole")
                                : b % (1 << 20) == 0 ? std::to_string(b >> 20) + " MiB"
                                : b % 1024 == 0      ? std::to_string(b >> 10) + " KiB"
                                                     : std::to_string(b) + " B";
    tsv << model_name << "\t" << engine->Describe() << "\t" << tensors.size() << "\t" << mb << "\t"
        << segment_sizes[k] << "\t" << c << "\t" << p << "\t" << p / c << "\t" << a << "\t" << s
        << "\t" << s / a << "\n";
    char line[512];
    std::snprintf(line, sizeof line,
                  "| %s | %s | %zu | %.1f | %s | %.2f | %.2f | **%.2f** | %.2f | %.2f | %.2f |\n",
                  model_name.c_str(), engine->Describe().c_str(), tensors.size(), mb,
                  segment.c_str(), c, p, p / c, a, s, s / a);
    md << line;
    std::printf("%s", line);
  }
  std::printf("(medians of %d rounds x %d steps)\n", rounds, iters);
  return 0;
}
