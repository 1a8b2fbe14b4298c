// phub-worker: one training process (one per GPU, or per CPU box). Trains a model of the zoo on
// synthetic data or Fashion-MNIST, alone (--comm none: the optimizer runs here) or with other
// workers through a parameter server (--comm ps: phubd applies the optimizer), a ring
// allreduce (--comm ring: every worker applies it) or NCCL (--comm nccl), overlapping each layer's
// exchange with the rest of backward and the next forward (worker/train/trainer.h). Prints a
// progress line per interval, test accuracy per epoch (Fashion-MNIST), a summary, and on request a
// JSON record.
//
// Errors come up as a Status from every layer below (backends, model, loader, trainer, the
// exchange); main logs the message and exits 2 for what the user can fix in the command line,
// the data or the environment (InvalidArgument, NotFound), 1 for anything else (a device, a
// peer, memory).
#include <CLI/CLI.hpp>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <optional>
#include <vector>

#include "phub/common/logging.h"
#include "phub/exchange/make_exchange.h"
#include "phub/exchange/transport_flags.h"
#include "phub/kernels/optimizer_flags.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/data/batch_loader.h"
#include "worker/data/fashion_mnist.h"
#include "worker/nn/models/models.h"
#include "worker/train/evaluate.h"
#include "worker/train/launch_env.h"
#include "worker/train/reconnect.h"
#include "worker/train/save_weights.h"
#include "worker/train/supervisor.h"
#include "worker/train/synthetic_data.h"
#include "worker/train/trainer.h"
#ifdef PHUB_HAVE_CUDNN
#include "worker/backend/cudnn/cudnn_backend.h"
#endif

namespace {

using phub::worker::Tensor;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model = "fashion-cnn", backend = "onednn", device, comm = "none", data = "synthetic";
  std::string data_dir = phub::worker::data::kFashionMnistDir, rendezvous, listen_host = "127.0.0.1";
  std::string token_file, job, results, log_level = "info";
  std::vector<std::string> ps;
  std::string topology, hostname = phub::topology::ThisHostName();  // racks of racks
  std::int64_t batch = 32;
  int socket_buffer_bytes = 0;
  int iters = 20, warmup = 3, epochs = 0, log_every = 0;
  std::optional<std::uint32_t> rank, world;
  std::uint64_t seed = 1;
  int restarts = 0, reconnect_timeout_ms = 60000;
  std::string save_weights;
  bool describe = false, no_overlap = false, tf32 = false;
  // An optimizer flag was on the command line: a PS job asks phubd to run that optimizer (in
  // its Hello); without one, phubd's own --optimizer flags apply.
  bool optimizer_given = false;
  phub::exchange::ExchangeOptions exchange;  // --transport and the RDMA device flags
  phub::kernels::OptimizerConfig optimizer{.kind = phub::kernels::OptimizerKind::kMomentum,
                                           .lr = 0.01f};
};

phub::StatusOr<std::unique_ptr<phub::worker::Backend>> MakeBackend(const std::string& name,
                                                                    bool tf32) {
  if (name == "cudnn") {
#ifdef PHUB_HAVE_CUDNN
    return phub::worker::MakeCudnnBackend({.device = 0, .allow_tf32 = tf32});
#else
    (void)tf32;
    return absl::InvalidArgumentError(
        "--backend cudnn (--device cuda): this phub-worker was built without CUDA/cuDNN; "
        "rebuild where /usr/local/cuda has them (PHUB_WITH_CUDA=ON), or use --device cpu");
#endif
  }
  return phub::worker::MakeOnednnBackend();
}

// The job's name as the launcher knows it (PHUB_JOB, torchrun's run id, Slurm's job id), or ""
// (phubd's job "default") when none does: the same order as the Python package's.
std::string DefaultJobName() {
  for (const char* name : {"PHUB_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string(value) != "none") return value;
  }
  return "";
}

phub::StatusOr<std::string> ReadToken(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("cannot read --token-file '" + path + "'");
  std::string token((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) return absl::InvalidArgumentError("error reading --token-file '" + path + "'");
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

phub::StatusOr<std::unique_ptr<phub::worker::Trainer>> MakeTrainer(
    const Flags& f, std::uint32_t rank, std::uint32_t world, phub::worker::Model& model,
    phub::worker::Backend& backend) {
  if (f.comm == "none") return phub::worker::Trainer::Local(model, backend, f.optimizer);
  phub::exchange::ExchangeOptions o = f.exchange;
  PHUB_ASSIGN_OR_RETURN(o.kind, phub::exchange::ParseExchangeKind(f.comm));
  o.rank = rank;
  o.world_size = world;
  for (const std::string& s : f.ps) {
    PHUB_ASSIGN_OR_RETURN(auto endpoint, phub::exchange::ParseEndpoint(s));
    o.ps.servers.push_back(endpoint);
  }
  if (!f.topology.empty()) {
    // Racks of racks: rank, world and phubd (the rack's PBox) are the file's.
    if (!f.ps.empty()) return absl::InvalidArgumentError("give --topology or --ps, not both");
    PHUB_ASSIGN_OR_RETURN(auto topology, phub::topology::Topology::Load(f.topology));
    PHUB_RETURN_IF_ERROR(phub::exchange::PlaceInRacks(topology, f.hostname, o));
    if (o.rank != rank || o.world_size != world) {
      return absl::InvalidArgumentError(
          "rank " + std::to_string(rank) + " of " + std::to_string(world) + ", but " +
          f.topology + " puts host '" + f.hostname + "' at rank " + std::to_string(o.rank) +
          " of " + std::to_string(o.world_size) + ": give no --rank/--world with --topology");
    }
  }
  PHUB_ASSIGN_OR_RETURN(o.ps.client.job_token, ReadToken(f.token_file));
  o.ps.client.job = f.job.empty() ? DefaultJobName() : f.job;
  // A worker that comes back (a restart, or phubd restarted with --resume) keeps trying this long.
  if (f.reconnect_timeout_ms > 0) o.ps.client.connect_timeout_ms = f.reconnect_timeout_ms;
  o.ps.client.socket_buffer_bytes = f.socket_buffer_bytes;
  if (f.optimizer_given) o.ps.client.optimizer = f.optimizer;
  o.ring.ring.rendezvous = f.rendezvous;
  o.ring.ring.listen_host = f.listen_host;
  o.ring.optimizer = f.optimizer;
  // GPU 0, as the cudnn backend: one worker per GPU is placed with CUDA_VISIBLE_DEVICES.
  o.nccl.device = 0;
  o.nccl.rendezvous = f.rendezvous;
  o.nccl.optimizer = f.optimizer;
  return phub::worker::Trainer::WithExchange(
      model, backend,
      [&](std::vector<phub::keys::TensorSpec> tensors, std::vector<std::span<float>> weights) {
        return phub::exchange::MakeExchange(o, std::move(tensors), std::move(weights));
      },
      !f.no_overlap);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The run; Ok when it trained (or described) to the end.
phub::Status Run(Flags& f) {
  std::uint32_t rank = 0, world = 1;
  if (!f.topology.empty() && !f.rank && !f.world) {
    PHUB_ASSIGN_OR_RETURN(auto topology, phub::topology::Topology::Load(f.topology));
    PHUB_ASSIGN_OR_RETURN(auto placement, topology.Locate(f.hostname));
    f.rank = placement.rank;
    f.world = placement.world_size;
  }
  if (f.rank || f.world) {
    if (!f.rank || !f.world) {
      return absl::InvalidArgumentError("give both --rank and --world, or neither");
    }
    rank = *f.rank;
    world = *f.world;
  } else {
    PHUB_ASSIGN_OR_RETURN(auto env, phub::worker::RankFromEnvironment());
    if (env) {
      rank = env->rank;
      world = env->world;
      spdlog::info("rank {} of {} from {}", rank, world, env->source);
    }
  }
  if (world < 1 || rank >= world) {
    return absl::InvalidArgumentError("--rank " + std::to_string(rank) + " must be below --world " +
                                      std::to_string(world));
  }
  // One command line for every rank (srun, mpirun): "{rank}" in an output path becomes the rank.
  for (std::string* path : {&f.save_weights, &f.results}) {
    for (auto at = path->find("{rank}"); at != std::string::npos; at = path->find("{rank}")) {
      path->replace(at, 6, std::to_string(rank));
    }
  }
  if (f.comm == "none" && world > 1) {
    return absl::InvalidArgumentError(
        "--world " + std::to_string(world) +
        " with --comm none: choose --comm ps, ring or nccl to train together");
  }
  if (!f.device.empty()) f.backend = f.device == "cuda" ? "cudnn" : "onednn";

  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Backend> backend,
                        MakeBackend(f.backend, f.tf32));
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Model> model,
                        phub::worker::MakeModel(f.model, f.batch));
  PHUB_RETURN_IF_ERROR(model->Build(*backend, f.seed));
  if (f.describe) {
    std::printf("%s", model->Describe().c_str());
    return absl::OkStatus();
  }

  // Data: Fashion-MNIST (train shard + test set) or synthetic batches.
  std::optional<phub::worker::data::ImageDataset> train, test;
  std::unique_ptr<phub::worker::data::BatchLoader> loader;
  if (f.data == "fashion-mnist") {
    if (model->input_shape() != phub::worker::Shape{f.batch, 1, 28, 28}) {
      return absl::InvalidArgumentError(
          "--data fashion-mnist needs a model for 1x28x28 images (e.g. fashion-cnn); " + f.model +
          " takes " + model->input_shape().ToString());
    }
    for (auto [split, out] : {std::pair{phub::worker::data::Split::kTrain, &train},
                              std::pair{phub::worker::data::Split::kTest, &test}}) {
      PHUB_ASSIGN_OR_RETURN(*out, phub::worker::data::LoadFashionMnist(f.data_dir, split));
    }
    PHUB_ASSIGN_OR_RETURN(
        loader, phub::worker::data::BatchLoader::Create(*train, f.batch, rank, world, f.seed));
  }
  // The batches of `step` onwards: the very ones an uninterrupted run would have had.
  auto seek = [&](std::int64_t step) -> phub::Status {
    if (!train) return absl::OkStatus();
    loader.reset();
    PHUB_ASSIGN_OR_RETURN(loader, phub::worker::data::BatchLoader::Create(
                                      *train, f.batch, rank, world, f.seed, true, step));
    return absl::OkStatus();
  };
  const std::int64_t per_epoch = loader ? loader->batches_per_epoch() : 0;
  const std::int64_t total_steps = f.epochs > 0 && loader ? f.epochs * per_epoch : f.warmup + f.iters;
  const int log_every = f.log_every > 0 ? f.log_every
                                        : static_cast<int>(std::max<std::int64_t>(1, total_steps / 20));

  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Trainer> trainer,
                        MakeTrainer(f, rank, world, *model, *backend));
  PHUB_RETURN_IF_ERROR(trainer->Init());
  std::int64_t first_step = static_cast<std::int64_t>(trainer->start_iteration());
  if (first_step > 0) {
    spdlog::info("rank {} resumes the job at step {} (phubd holds the weights)", rank, first_step);
    PHUB_RETURN_IF_ERROR(seek(first_step));
  }
  // phubd lost or this worker dropped: connect again, go on from where phubd resumes us.
  PHUB_ASSIGN_OR_RETURN(
      phub::worker::Reconnector reconnector,
      phub::worker::Reconnector::Create(
          *model, *backend, rank, f.comm == "ps" ? f.reconnect_timeout_ms : 0, rank == 0,
          [&] { return MakeTrainer(f, rank, world, *model, *backend); }));
  auto reconnect = [&](const phub::Status& lost, std::int64_t& step) -> phub::Status {
    PHUB_ASSIGN_OR_RETURN(step, reconnector.Reconnect(lost, step, trainer));
    return seek(step);
  };
  spdlog::info("{} batch {} on {}: {} parameters; {} rank {}/{}{}; {} steps", f.model, f.batch,
               backend->Describe(), model->ParameterCount(), trainer->mode(), rank, world,
               f.no_overlap ? " (no overlap)" : "", total_steps);

  PHUB_ASSIGN_OR_RETURN(phub::worker::Batch synthetic, phub::worker::MakeSyntheticBatch(*model));
  Tensor x;  // the batch on the device (none on the CPU: the host batch is used)
  if (backend->device() != phub::worker::Device::kCpu) {
    PHUB_ASSIGN_OR_RETURN(x, backend->Allocate(model->input_shape()));
  }
  std::vector<double> step_ms, blocked_ms;
  struct EpochRecord { std::int64_t epoch; double seconds, accuracy, test_loss, train_loss; };
  std::vector<EpochRecord> epochs;
  double epoch_loss = 0;
  const auto start = Clock::now();
  for (std::int64_t step = first_step;; ++step) {
    if (step == total_steps) {  // the last step's weights in, before saving or evaluating
      const phub::Status finished = trainer->Finish();
      if (finished.ok()) break;
      PHUB_RETURN_IF_ERROR(reconnect(finished, step));
      --step;
      continue;
    }
    phub::worker::data::LabeledBatch real;
    const Tensor* x_host;
    const Tensor* labels;
    if (loader) {
      PHUB_ASSIGN_OR_RETURN(real, loader->Next());
      x_host = &real.x;
      labels = &real.labels;
    } else {
      phub::worker::FillSynthetic(*model, synthetic, f.seed + static_cast<std::uint64_t>(step));
      x_host = &synthetic.x;
      labels = &synthetic.labels;
    }
    if (x.defined()) PHUB_RETURN_IF_ERROR(backend->CopyFromHost(*x_host, x));
    phub::StatusOr<phub::worker::StepTimes> stepped =
        trainer->Step(x.defined() ? x : *x_host, *labels);
    if (!stepped.ok()) {
      PHUB_RETURN_IF_ERROR(reconnect(stepped.status(), step));
      --step;  // the loop's ++step lands on the step to run
      continue;
    }
    const phub::worker::StepTimes t = *stepped;
    epoch_loss += t.loss;
    if (step >= (loader ? 1 : f.warmup)) {  // Fashion-MNIST runs time all but the first step
      step_ms.push_back(t.total_ms);
      blocked_ms.push_back(t.blocked_ms);
    }
    if ((step + 1) % log_every == 0 || step + 1 == total_steps) {
      spdlog::info("step {}/{}: loss {:.4f}, {:.1f} ms ({:.1f} ms waiting for the exchange)",
                   step + 1, total_steps, t.loss, t.total_ms, t.blocked_ms);
    }
    if (loader && (step + 1) % per_epoch == 0) {
      if (const phub::Status finished = trainer->Finish(); !finished.ok()) {
        PHUB_RETURN_IF_ERROR(reconnect(finished, step));
        --step;
        continue;
      }
      PHUB_ASSIGN_OR_RETURN(const phub::worker::Accuracy acc,
                            phub::worker::Evaluate(*model, *backend, *test));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      epochs.push_back({(step + 1) / per_epoch, seconds, acc.fraction(), acc.loss,
                        epoch_loss / static_cast<double>(per_epoch)});
      epoch_loss = 0;
      spdlog::info("epoch {}: test accuracy {:.2f} % ({} images), test loss {:.4f}, {:.1f} s",
                   epochs.back().epoch, 100 * acc.fraction(), acc.examples, acc.loss, seconds);
    }
  }
  if (!f.save_weights.empty()) PHUB_RETURN_IF_ERROR(phub::worker::SaveWeights(*model, *backend, f.save_weights));
  const double median = Median(step_ms);
  const double blocked = std::accumulate(blocked_ms.begin(), blocked_ms.end(), 0.0);
  const double total = std::accumulate(step_ms.begin(), step_ms.end(), 0.0);
  const double share = total > 0 ? blocked / total : 0;
  const double samples_s = 1000.0 * static_cast<double>(f.batch * world) / median;
  std::printf(
      "%s batch %lld: median %.1f ms per mini-batch, %.1f samples/s (all %u workers), "
      "communication share %.1f %% (%s, %zu timed steps)\n",
      f.model.c_str(), static_cast<long long>(f.batch), median, samples_s, world, 100 * share,
      trainer->mode().c_str(), step_ms.size());
  if (!epochs.empty()) {
    std::printf("final test accuracy %.2f %%\n", 100 * epochs.back().accuracy);
  }
  if (!f.results.empty()) {
    std::ofstream out(f.results);
    if (!out) return absl::InvalidArgumentError("cannot write --results '" + f.results + "'");
    out << "{\"model\": \"" << f.model << "\", \"batch\": " << f.batch << ", \"rank\": " << rank
        << ", \"world\": " << world << ", \"mode\": \"" << trainer->mode()
        << "\", \"overlap\": " << (f.no_overlap ? "false" : "true") << ", \"backend\": \""
        << backend->Describe() << "\", \"median_ms\": " << median
        << ", \"samples_per_s\": " << samples_s << ", \"comm_share\": " << share
        << ", \"timed_steps\": " << step_ms.size() << ", \"epochs\": [";
    for (std::size_t i = 0; i < epochs.size(); ++i) {
      const auto& e = epochs[i];
      out << (i ? ", " : "") << "{\"epoch\": " << e.epoch << ", \"seconds\": " << e.seconds
          << ", \"test_accuracy\": " << e.accuracy << ", \"test_loss\": " << e.test_loss
          << ", \"train_loss\": " << e.train_loss << "}";
    }
    out << "]}\n";
    out.flush();
    if (!out) return absl::InternalError("writing --results '" + f.results + "' failed");
  }
  return trainer->Close();
}

// 2 for what the user can fix in the command line, the data or the environment; 1 otherwise.
int ExitCode(const phub::Status& s) {
  if (s.ok()) return 0;
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"phub-worker: trains a model of the zoo (forward, backward, optimizer step), alone "
               "or with other workers through phubd (--comm ps), a ring allreduce (--comm "
               "ring) or NCCL (--comm nccl); prints progress, test accuracy per epoch and the time per mini-batch."};
  app.add_option("--model", f.model, "fashion-cnn, fcn5, alexnet, resnet56, resnet50, lstm")
      ->capture_default_str();
  app.add_option("--batch", f.batch, "Mini-batch size per worker")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--backend", f.backend, "onednn (CPU) or cudnn (GPU 0; builds with CUDA and cuDNN)")
      ->capture_default_str()->check(CLI::IsMember({"onednn", "cudnn"}));
  app.add_option("--device", f.device, "cpu or cuda: the same as --backend onednn or cudnn")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--comm", f.comm,
                 "none (alone, optimizer here), ps (one phubd: --ps HOST:PORT), ps-colocated "
                 "(--ps once per server), ring (--rendezvous), nccl (--rendezvous; GPU 0, "
                 "gradients staged through it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ps", "ps-colocated", "ring", "nccl"}));
  app.add_option("--ps", f.ps, "phubd's HOST:PORT (repeat for ps-colocated, same order everywhere)");
  app.add_option("--token-file", f.token_file,
                 "The job token file phubd was given (--token-file), or the one the operator "
                 "issued for this job (phubd's --job-tokens)");
  app.add_option("--job", f.job,
                 "PS: the job's name on a shared phubd, the same on every worker of the job "
                 "(default: $PHUB_JOB, torchrun's run id, $SLURM_JOB_ID, else \"default\")");
  app.add_option("--socket-buffer-bytes", f.socket_buffer_bytes,
                 "PS: fixed SO_SNDBUF/SO_RCVBUF (0: Linux autotuning; 65536 for colocated racks, "
                 "see docs/operations.md)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_option("--rendezvous", f.rendezvous,
                 "Ring and NCCL: where ranks meet: a directory shared by all ranks, or "
                 "tcp://HOST:PORT[/JOB] (rank 0 serves it on PORT of HOST, the address of its "
                 "node; the others connect, retrying until rank 0 is up; JOB, optional, keeps "
                 "jobs given the same port apart)");
  phub::exchange::AddTransportFlags(app, f.exchange);
  app.add_option("--listen-host", f.listen_host, "Ring: the address this rank listens on")
      ->capture_default_str();
  app.add_option("--topology", f.topology,
                 "Racks of racks (--comm ps): the racks file; this worker's rank, world and "
                 "phubd (its rack's PBox) come from it (docs/operations.md \"Racks of racks\")");
  app.add_option("--hostname", f.hostname, "This worker's host as --topology names it")
      ->capture_default_str();
  app.add_option("--rank", f.rank, "This worker's rank (default: from mpirun/srun, else 0)");
  app.add_option("--world", f.world, "Number of workers (default: from mpirun/srun, else 1)");
  app.add_option("--data", f.data, "synthetic, or fashion-mnist (Debian's dataset-fashion-mnist)")
      ->capture_default_str()->check(CLI::IsMember({"synthetic", "fashion-mnist"}));
  app.add_option("--data-dir", f.data_dir, "Where the Fashion-MNIST IDX files are")
      ->capture_default_str();
  app.add_option("--epochs", f.epochs, "Fashion-MNIST: epochs (each ends with a test accuracy)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--iters", f.iters, "Timed steps (synthetic data, or without --epochs)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  app.add_option("--warmup", f.warmup, "Untimed steps first (synthetic data)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_flag("--tf32", f.tf32,
               "cuDNN: let convolutions, GEMMs and the LSTM use TF32 tensor cores and FFT/"
               "Winograd convolutions (~1e-3 relative error); default strict float32");
  app.add_flag("--no-overlap", f.no_overlap,
               "Exchange after the whole backward and wait for all of it (to measure overlap)");
  app.add_option("--seed", f.seed, "Seed of the weights, the data order and synthetic data")
      ->capture_default_str();
  phub::kernels::AddOptimizerFlags(app, f.optimizer);
  app.add_option("--restarts", f.restarts,
                 "Run supervised: a worker that dies (a signal, a failure that may pass) is "
                 "started again, up to this many times, and rejoins its job (--comm ps)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("--reconnect-timeout-ms", f.reconnect_timeout_ms,
                 "--comm ps: when phubd is lost (or drops this worker), reconnect for up to this "
                 "long and go on from where phubd resumes the job; 0: fail instead")
      ->capture_default_str()->check(CLI::Range(0, 86400000));
  app.add_option("--save-weights", f.save_weights,
                 "Write the final weights (raw float32, parameter order) to this file; {rank} in "
                 "it becomes the rank");
  app.add_option("--log-every", f.log_every, "Progress line every K steps (default: 20 lines)");
  app.add_option("--results", f.results,
                 "Write a JSON record of the run to this file; {rank} in it becomes the rank");
  app.add_flag("--describe", f.describe, "Print the layers, their output shapes and parameters; exit");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  for (const char* flag : {"--optimizer", "--lr", "--momentum", "--weight-decay", "--beta1",
                           "--beta2", "--eps"}) {
    f.optimizer_given = f.optimizer_given || app.count(flag) > 0;
  }

  if (auto s = phub::SetUpLogging(f.log_level, "phub-worker"); !s.ok()) {
    std::fprintf(stderr, "phub-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (f.restarts > 0) {
    return phub::worker::RunSupervised(phub::worker::WithoutRestartsFlag(argc, argv), f.restarts);
  }
  const phub::Status s = Run(f);
  if (!s.ok()) spdlog::error("{}", s.message());
  return ExitCode(s);
}
