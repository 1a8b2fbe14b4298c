// phub-worker's command line: every flag declared once, bound into WorkerFlags (and through it
// into the options structs of the exchange and the optimizer), and shown by --help in groups
// that mirror those structs. main (phub_worker_main.cc) parses, then runs from WorkerFlags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "phub/exchange/make_exchange.h"
#include "phub/kernels/optimizer_config.h"
#include "phub/topology/topology.h"
#include "worker/data/fashion_mnist.h"
#include "worker/train/lr_schedule.h"

namespace phub::worker {

struct WorkerFlags {
  // Model and data.
  std::string model = "fashion-cnn", device = "cpu", data = "synthetic";
  std::string data_dir = data::kFashionMnistDir;
  std::int64_t batch = 32;
  std::uint64_t seed = 1;
  bool tf32 = false, describe = false;
  // Rank and world: flags, else the launcher's environment, else the --topology file.
  std::optional<std::uint32_t> rank, world;
  // An elastic job (--comm ps): --min-workers .. --max-workers members, starting with
  // --start-workers (0: min); 0: a fixed job of --world.
  std::uint32_t min_workers = 0, max_workers = 0, start_workers = 0;
  std::string lr_scaling = "none";  // elastic: kernels::ParseLrScaling
  std::string topology, hostname = phub::topology::ThisHostName();  // racks of racks
  // Training.
  int iters = 20, warmup = 3, epochs = 0;
  phub::kernels::OptimizerConfig optimizer{.kind = phub::kernels::OptimizerKind::kMomentum,
                                           .lr = 0.01f};
  // How --lr changes over the run (--lr-schedule, --warmup-iters, ...).
  LrScheduleOptions lr_schedule;
  // An optimizer flag was on the command line: a PS job asks phubd to run that optimizer (in
  // its Hello); without one, phubd's own --optimizer flags apply.
  bool optimizer_given = false;
  // The exchange: --comm picks it; --transport, the NIC, RDMA and wire flags land in
  // `exchange` directly; the PS, ring and NCCL flags below are put there by the trainer's maker.
  std::string comm = "none";
  phub::exchange::ExchangeOptions exchange;
  std::vector<std::string> ps;
  std::string token_file, job;
  int socket_buffer_bytes = 0;
  std::string rendezvous, listen_host = "127.0.0.1";
  bool no_overlap = false;
  // Recovery.
  int restarts = 0, reconnect_timeout_ms = 60000, hello_answer_timeout_ms = 10000;
  // Output.
  std::string save_weights, results, log_level = "info";
  int log_every = 0;
};

// Declares every flag of phub-worker on `app`, writing into `flags` (which must outlive the
// parse); after app.parse, call NoteOptimizerGiven.
void AddWorkerFlags(CLI::App& app, WorkerFlags& flags);
// Sets flags.optimizer_given from what was on the command line.
void NoteOptimizerGiven(const CLI::App& app, WorkerFlags& flags);
// What one flag cannot say alone: a schedule's parameter given with another schedule
// (--lr-step-every without --lr-schedule step, ...). InvalidArgument naming both flags.
// (Each schedule's values are checked by LrSchedule::Create once the run's length is known.)
Status CheckScheduleFlags(const CLI::App& app, const WorkerFlags& flags);

}  // namespace phub::worker
