// phub-worker: one training process. This build trains alone (single worker, the optimizer
// applied locally with phub/kernels) on synthetic data shaped for the model, or describes a
// model; the exchange (--comm ps|ring|nccl) and real data join it in the end-to-end issue.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "phub/common/logging.h"
#include "phub/kernels/optimizer_flags.h"
#include "worker/backend/onednn/onednn_backend.h"
#ifdef PHUB_HAVE_CUDNN
#include "worker/backend/cudnn/cudnn_backend.h"
#endif
#include "worker/nn/models/models.h"
#include "worker/train/local_optimizer.h"
#include "worker/train/synthetic_data.h"

using phub::worker::Tensor;

int main(int argc, char** argv) {
  std::string model_name = "fashion-cnn", log_level = "info", backend_name = "onednn";
  std::int64_t batch = 32;
  int iters = 20, warmup = 3;
  std::uint64_t seed = 1;
  bool describe = false;
  phub::kernels::OptimizerConfig optimizer{.kind = phub::kernels::OptimizerKind::kMomentum,
                                           .lr = 0.01f};

  CLI::App app{"phub-worker: trains a model (forward, backward, optimizer step) and reports the "
               "time per mini-batch. This build runs one worker on the CPU (oneDNN) or a GPU "
               "(cuDNN) with synthetic data; --describe prints the model's layers and parameter count."};
  app.add_option("--model", model_name, "Model: fashion-cnn, fcn5, alexnet, resnet56, resnet50, lstm")
      ->capture_default_str();
  app.add_option("--batch", batch, "Mini-batch size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--backend", backend_name,
                 "onednn (CPU) or cudnn (GPU 0; only in builds with CUDA and cuDNN)")
      ->capture_default_str()
      ->check(CLI::IsMember({"onednn", "cudnn"}));
  app.add_flag("--describe", describe, "Print the layers, their output shapes and parameters; exit");
  app.add_option("--iters", iters, "Timed iterations")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  app.add_option("--warmup", warmup, "Untimed iterations first")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_option("--seed", seed, "Seed of the weights and of the synthetic data")->capture_default_str();
  phub::kernels::AddOptimizerFlags(app, optimizer);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (auto s = phub::SetUpLogging(log_level, "phub-worker"); !s.ok()) {
    std::fprintf(stderr, "phub-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  try {
    std::unique_ptr<phub::worker::Backend> backend;
    if (backend_name == "cudnn") {
#ifdef PHUB_HAVE_CUDNN
      backend = phub::worker::MakeCudnnBackend(0);
#else
      spdlog::error("--backend cudnn: this phub-worker was built without CUDA/cuDNN; rebuild "
                    "where /usr/local/cuda has them (PHUB_WITH_CUDA=ON), or use --backend onednn");
      return 2;
#endif
    } else {
      backend = phub::worker::MakeOnednnBackend();
    }
    auto model = phub::worker::MakeModel(model_name, batch);
    model->Build(*backend, seed);
    if (describe) {
      std::printf("%s", model->Describe().c_str());
      return 0;
    }
    phub::worker::LocalOptimizer opt(model->parameters(), optimizer, *backend);
    spdlog::info("{} batch {} on {}: {} parameters, {} ({} warm-up + {} timed iterations)",
                 model_name, batch, backend->Describe(), model->ParameterCount(),
                 phub::kernels::Describe(optimizer), warmup, iters);
    phub::worker::Batch data = phub::worker::MakeSyntheticBatch(*model);
    // The input on the backend's device (the host batch itself on the CPU); labels stay on the
    // host (ops.h).
    Tensor x = backend->device() == phub::worker::Device::kCpu ? data.x
                                                               : backend->Allocate(data.x.shape());
    std::vector<double> times;
    for (int i = 0; i < warmup + iters; ++i) {
      phub::worker::FillSynthetic(*model, data, seed + static_cast<std::uint64_t>(i));
      const auto start = std::chrono::steady_clock::now();
      if (x.data() != data.x.data()) backend->CopyFromHost(data.x, x);  // timed, as in PyTorch's .to()
      model->Forward(x, true);
      const double loss = model->Loss(data.labels);
      model->Backward(data.labels);
      opt.Step();
      backend->Synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (i >= warmup) times.push_back(ms);
      spdlog::info("iteration {}/{}{}: {:.1f} ms, loss {:.4f}", i + 1, warmup + iters,
                   i < warmup ? " (warm-up)" : "", ms, loss);
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf("%s batch %lld: median %.1f ms per mini-batch, %.1f samples/s (%d iterations)\n",
                model_name.c_str(), static_cast<long long>(batch), median,
                1000.0 * static_cast<double>(batch) / median, iters);
  } catch (const std::invalid_argument& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {  // a device or library failure (cuDNN, CUDA, oneDNN)
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}
