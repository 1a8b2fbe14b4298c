#include "phub/ctl/plan_flags.h"

namespace phub::ctl {

void AddPlanFlags(CLI::App& app, PlanOptions& options) {
  app.add_option("--schemes", options.schemes, "ps-pbox, ps-cloud, ps-multi, ps-racks, ring, tree")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--workers", options.workers, "Workers (N)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--mib", options.mib, "The gradient's size, MiB")->capture_default_str();
  app.add_option("--tensors-file", options.tensors_file,
                 "A model's gradient and compute instead: a tensor's bytes and its backward "
                 "FLOPs a line, in the order backward produces them, and a line `forward "
                 "FLOPS` (bench/sim/models.py writes them)");
  app.add_option("--gpu-tflops", options.gpu_tflops,
                 "A worker's compute, TFLOP/s (default: the measured rate of "
                 "phub/sim/calibration.h, one H200 in TF32)")
      ->check(CLI::Range(1e-6, 1e6));
  app.add_option("--gbps", options.gbps, "Each worker's link, Gbit/s")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e5));
  app.add_option("--latency-us", options.latency_us, "One-way latency of each link, us")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--ps-cores", options.ps_cores, "The PBox's cores serving the job")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--ps-hosts", options.ps_hosts,
                 "ps-multi: PS hosts the keys spread over (each with one worker's link)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--racks", options.racks,
                 "Racks of --workers / --racks workers each, a PBox in each")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--uplink-gbps", options.uplink_gbps,
                 "With --racks above 1: each rack's uplink to the core, Gbit/s")
      ->check(CLI::Range(1e-3, 1e6));
  app.add_option("--chunk-bytes", options.chunk_bytes, "phubd's --chunk-bytes")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{1} << 32));
  app.add_option("--iterations", options.iterations,
                 "Iterations simulated (the first, filling the pipeline, is not timed)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--bucket-mib", options.bucket_mib,
                 "ring, tree: allreduce the gradient in buckets of this many MiB as backward "
                 "fills them (DDP's bucket_cap_mb); 0: one allreduce")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--verbs", options.verbs, "The PBox on verbs (its CPU per byte), not TCP");
  app.add_flag("--json", options.json, "Print one JSON object instead of the table");
  app.add_option("--max-worker-hosts", options.max_worker_hosts,
                 "Simulation: hosts standing for the workers (identical workers merged)")
      ->capture_default_str()
      ->check(CLI::Range(2u, 4096u));
  app.add_option("--max-chunks", options.max_chunks,
                 "Simulation: chunks simulated; past them a model's pieces grow beyond "
                 "--chunk-bytes (faster, coarser)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--progress-seconds", options.progress_seconds,
                 "A progress line on stderr this often while a simulation runs (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--nic-gbps", options.nic_gbps, "Sizing: the NICs a PBox is built with, Gbit/s")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e5));
  app.add_option("--max-nics", options.max_nics, "Sizing: the NICs one PBox holds")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  app.add_option("--ps-nics", options.ps_nics,
                 "PS schemes: each PS host's NICs, its link split over them; phubd's cores "
                 "alternate over them (phubd --nics)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  app.add_option("--ps-nic-gbps", options.ps_nic_gbps,
                 "PS schemes: each NIC's rate, Gbit/s (0: the scheme's PS link over --ps-nics)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--jobs", options.jobs,
                 "PS schemes, one rack: jobs sharing the PS hosts, WORKERS[:WEIGHT] each, "
                 "comma-separated, their workers adding up to --workers (\"2:2,2:1\": two jobs "
                 "of 2 workers, weights 2 and 1: phubd --job-weight)");
  app.add_option("--pace-gbps", options.pace_gbps,
                 "phubd --nic-gbps: while jobs share a PS host its sends are paced to this, by "
                 "weight (0: not paced)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--streams", options.streams,
                 "PS schemes: the gradient in this many tensors, each pushed again as soon as "
                 "its weights are in (phub_exchange_worker --streams; 0: a training step)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  app.add_option("--push-bytes-ratio", options.push_bytes_ratio,
                 "A push's bytes over the weights' (0.5: bf16 pushes, fp32 weights)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 8.0));
}

}  // namespace phub::ctl
