#include "worker/phub_worker_flags.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/exchange/transport_flags.h"
#include "phub/kernels/optimizer_flags.h"

namespace phub::worker {
namespace {

// --help's groups, in the order they print (CLI11 orders groups by their first flag's
// declaration, so AddWorkerFlags declares them in this order).
constexpr const char* kModelAndData = "Model and data";
constexpr const char* kRankAndWorld = "Rank and world (phub::Membership)";
constexpr const char* kTraining = "Training and optimizer (kernels::OptimizerConfig)";
constexpr const char* kSchedule = "Learning-rate schedule (worker::LrScheduleOptions)";
constexpr const char* kExchange =
    "Exchange and wire (exchange::ExchangeOptions, kernels::WireOptions)";
constexpr const char* kNics = "NICs, transport and RDMA";
constexpr const char* kPs = "The PS connection (--comm ps: client::PsClientOptions)";
constexpr const char* kRing = "Ring and NCCL (--comm ring, nccl)";
constexpr const char* kRecovery = "Recovery and deadlines";
constexpr const char* kOutput = "Metrics and output";
constexpr const char* kExperiment = "Experiment knobs (to measure what a feature is worth)";

void AddModelAndDataFlags(CLI::App& app, WorkerFlags& f) {
  app.option_defaults()->group(kModelAndData);
  app.add_option("--model", f.model, "fashion-cnn, fcn5, alexnet, resnet56, resnet50, lstm")
      ->capture_default_str();
  app.add_option("--batch", f.batch, "Mini-batch size per worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--device", f.device,
                 "cpu (oneDNN) or cuda (cuDNN on GPU 0; builds with CUDA and cuDNN)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--tf32", f.tf32,
               "cuDNN: let convolutions, GEMMs and the LSTM use TF32 tensor cores and FFT/"
               "Winograd convolutions (~1e-3 relative error); default strict float32");
  app.add_option("--data", f.data, "synthetic, or fashion-mnist (Debian's dataset-fashion-mnist)")
      ->capture_default_str()
      ->check(CLI::IsMember({"synthetic", "fashion-mnist"}));
  app.add_option("--data-dir", f.data_dir, "Where the Fashion-MNIST IDX files are")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the weights, the data order and synthetic data")
      ->capture_default_str();
  app.add_flag("--describe", f.describe,
               "Print the layers, their output shapes and parameters; exit");

  app.option_defaults()->group(kRankAndWorld);
  app.add_option("--rank", f.rank, "This worker's rank (default: from mpirun/srun, else 0)");
  app.add_option("--world", f.world, "Number of workers (default: from mpirun/srun, else 1)");
  app.add_option("--min-workers", f.min_workers,
                 "--comm ps: an elastic job: it runs while at least this many workers are "
                 "members; workers join it (up to --max-workers) and leave it (SIGTERM: at the "
                 "next iteration boundary) while it runs, and the data is re-sharded over the "
                 "members of each iteration (docs/operations.md \"Elastic jobs\")")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-workers", f.max_workers,
                 "Elastic job: the most members it may have (its world size; default --world)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--start-workers", f.start_workers,
                 "Elastic job: ranks 0..N-1 start it (default --min-workers); others join")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--lr-scaling", f.lr_scaling,
                 "Elastic job: the learning rate (--lr, or the schedule's) is the rate at "
                 "--start-workers members and follows each iteration's member count: linear "
                 "(SGD's linear-scaling rule), sqrt (Adam), or none. Across racks (--topology): "
                 "the members of every rack over the racks' start sizes (a fixed rack's: its "
                 "hosts); give every rack's workers the same")
      ->check(CLI::IsMember({"none", "linear", "sqrt"}))
      ->capture_default_str();
  app.add_option("--topology", f.topology,
                 "Racks of racks (--comm ps): the racks file; this worker's rank, world and "
                 "phubd (its rack's PBox) come from it (docs/operations.md \"Racks of racks\"). "
                 "With --data fashion-mnist each rack takes its hosts' share of every epoch, and "
                 "--epochs counts the iterations a rack of all its hosts takes per epoch");
  app.add_option("--hostname", f.hostname, "This worker's host as --topology names it")
      ->capture_default_str();

  app.option_defaults()->group(kTraining);
  app.add_option("--epochs", f.epochs, "Fashion-MNIST: epochs (each ends with a test accuracy)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--iters", f.iters, "Timed steps (synthetic data, or without --epochs)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--warmup", f.warmup, "Untimed steps first (synthetic data)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  phub::kernels::AddOptimizerFlags(app, f.optimizer);

  app.option_defaults()->group(kSchedule);
  LrScheduleOptions& s = f.lr_schedule;
  app.add_option_function<std::string>(
         "--lr-schedule", [&s](const std::string& name) { s.kind = *ParseLrScheduleKind(name); },
         "How --lr changes, step by step: constant, step (x --lr-gamma every --lr-step-every "
         "steps) or cosine (down to --lr-min at the run's last step); after --warmup-iters. "
         "torch's LinearLR then StepLR / CosineAnnealingLR, stepped every iteration "
         "(docs/operations.md \"Learning-rate schedules\")")
      ->check(CLI::IsMember({"constant", "step", "cosine"}))
      ->default_str(LrScheduleName(s.kind));
  app.add_option("--warmup-iters", s.warmup_iters,
                 "Linear warm-up over the first N steps, from --warmup-start-factor x --lr up to "
                 "--lr (not --warmup, the untimed steps)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--warmup-start-factor", s.warmup_start_factor,
                 "The warm-up's first lr as a fraction of --lr, in (0, 1] (torch LinearLR's "
                 "start_factor)")
      ->capture_default_str();
  app.add_option("--lr-step-every", s.step_every,
                 "--lr-schedule step: multiply the lr by --lr-gamma every N steps after the "
                 "warm-up (torch StepLR's step_size, in iterations)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--lr-gamma", s.gamma, "--lr-schedule step: the factor of each decay")
      ->capture_default_str();
  app.add_option("--lr-min", s.lr_min,
                 "--lr-schedule cosine: the lr the decay ends at (torch's eta_min)")
      ->capture_default_str();
}

void AddExchangeFlags(CLI::App& app, WorkerFlags& f) {
  app.option_defaults()->group(kExchange);
  app.add_option("--comm", f.comm,
                 "none (alone, optimizer here), ps (one phubd: --ps HOST:PORT), ps-colocated "
                 "(--ps once per server), ring (--rendezvous), nccl (--rendezvous; GPU 0, "
                 "gradients staged through it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ps", "ps-colocated", "ring", "nccl"}));
  // --transport, the RDMA flags and --nics first, then --send-window-bytes and the wire's.
  app.option_defaults()->group(kNics);
  phub::exchange::AddTransportFlags(app, f.exchange);
  for (const char* name : {"--send-window-bytes", "--wire", "--wire-weights", "--error-feedback"}) {
    app.get_option(name)->group(kExchange);
  }

  app.option_defaults()->group(kPs);
  app.add_option("--ps", f.ps,
                 "phubd's HOST:PORT (repeat for ps-colocated, same order everywhere)");
  app.add_option("--token-file", f.token_file,
                 "The job token file phubd was given (--token-file), or the one the operator "
                 "issued for this job (phubd's --job-tokens); trailing whitespace is not part "
                 "of the token");
  app.add_option("--job", f.job,
                 "PS: the job's name on a shared phubd, the same on every worker of the job "
                 "(default: $PHUB_JOB, torchrun's run id, $SLURM_JOB_ID, else \"default\")");

  app.option_defaults()->group(kRing);
  app.add_option("--rendezvous", f.rendezvous,
                 "Ring and NCCL: where ranks meet: a directory shared by all ranks, or "
                 "tcp://HOST:PORT[/JOB] (rank 0 serves it on PORT of HOST, the address of its "
                 "node; the others connect, retrying until rank 0 is up; JOB, optional, keeps "
                 "jobs given the same port apart)");
  app.add_option("--listen-host", f.listen_host, "Ring: the address this rank listens on")
      ->capture_default_str();
}

void AddRunFlags(CLI::App& app, WorkerFlags& f) {
  app.option_defaults()->group(kRecovery);
  app.add_option("--restarts", f.restarts,
                 "Run supervised: a worker that dies (a signal, a failure that may pass) is "
                 "started again, up to this many times, and rejoins its job (--comm ps)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--reconnect-timeout-ms", f.reconnect_timeout_ms,
                 "--comm ps: when phubd is lost (or drops this worker), reconnect for up to this "
                 "long and go on from where phubd resumes the job; 0: fail instead")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400000));
  app.add_option("--hello-answer-timeout-ms", f.hello_answer_timeout_ms,
                 "--comm ps: phubd must answer the Hello within this, and while the job forms "
                 "send a heartbeat at least this often (it sends one every quarter of it); a "
                 "phubd silent this long (stopped, hung, overloaded) fails the connect, naming it")
      ->capture_default_str()
      ->check(CLI::Range(400, 3600000));

  app.option_defaults()->group(kOutput);
  app.add_option("--log-every", f.log_every, "Progress line every K steps (default: 20 lines)");
  app.add_option("--results", f.results,
                 "Write a JSON record of the run to this file; {rank} in it becomes the rank");
  app.add_option("--save-weights", f.save_weights,
                 "Write the final weights (raw float32, parameter order) to this file; {rank} in "
                 "it becomes the rank");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();

  app.option_defaults()->group(kExperiment);
  app.add_flag("--no-overlap", f.no_overlap,
               "Exchange after the whole backward and wait for all of it (to measure overlap)");
  app.add_option("--socket-buffer-bytes", f.socket_buffer_bytes,
                 "PS: fixed SO_SNDBUF/SO_RCVBUF (0: Linux autotuning; 65536 for colocated racks, "
                 "see docs/operations.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
}

}  // namespace

void AddWorkerFlags(CLI::App& app, WorkerFlags& flags) {
  AddModelAndDataFlags(app, flags);
  AddExchangeFlags(app, flags);
  AddRunFlags(app, flags);
  app.option_defaults()->group("Options");
}

void NoteOptimizerGiven(const CLI::App& app, WorkerFlags& flags) {
  for (const char* flag :
       {"--optimizer", "--lr", "--momentum", "--weight-decay", "--beta1", "--beta2", "--eps"}) {
    flags.optimizer_given = flags.optimizer_given || app.count(flag) > 0;
  }
}

Status CheckScheduleFlags(const CLI::App& app, const WorkerFlags& flags) {
  const LrScheduleKind kind = flags.lr_schedule.kind;
  const struct {
    const char* flag;
    bool fits;
    const char* schedule;
  } parameters[] = {{"--lr-step-every", kind == LrScheduleKind::kStep, "step"},
                    {"--lr-gamma", kind == LrScheduleKind::kStep, "step"},
                    {"--lr-min", kind == LrScheduleKind::kCosine, "cosine"},
                    {"--warmup-start-factor", flags.lr_schedule.warmup_iters > 0, nullptr}};
  for (const auto& p : parameters) {
    if (app.count(p.flag) == 0 || p.fits) continue;
    if (p.schedule == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.flag, " shapes the warm-up: give --warmup-iters N (> 0) with it"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        p.flag, " is a parameter of --lr-schedule ", p.schedule, ", not of --lr-schedule ",
        LrScheduleName(kind), ": drop it or give --lr-schedule ", p.schedule));
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
