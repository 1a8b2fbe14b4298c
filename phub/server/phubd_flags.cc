// phubd's flags, bound group by group to the options struct each belongs to (phubd_flags.h).
#include "phub/server/phubd_flags.h"

#include "absl/strings/str_cat.h"
#include "phub/kernels/optimizer_flags.h"
#include "phub/placement/nics.h"
#include "phub/transport/transport_flags.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace {

void AddListeningFlags(CLI::App& group, ServerOptions& options, PhubdFlags& flags) {
  CoreOptions& cores = options.cores;
  group.add_option("--listen", cores.listen_address, "Address to listen on (control and data)")
      ->capture_default_str();
  group.add_option("--port", options.port,
                   "Control-plane TCP port workers connect to; 0 = any free port")
      ->capture_default_str();
  group.add_option("--port-file", options.port_file,
                   "Write the control port here once listening (useful with --port 0)");
  group.add_option("--data-port-base", cores.data_port_base,
                   "A running job's data connections to core i come to the first free of this "
                   "port + i + k * --cores, k < --max-jobs; 0 = any free port (workers learn "
                   "the ports in the handshake)")
      ->capture_default_str();
  group.add_option("--cores", cores.count,
                   "Server cores: one pinned thread each, owning its share of the chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  group.add_flag("--no-pin", flags.no_pin, "Do not pin core threads to physical cores");
  group.add_option("--first-core", cores.first_core,
                   "Search free physical cores from this one on (with one NIC whose NUMA node is "
                   "unknown: server core i on physical core first+i)")
      ->capture_default_str();
  group.add_flag("--one-job", options.one_job, "Exit when the first job ends");
}

// Limits: what any peer can make phubd hold, and for how long (docs/operations.md "Limits").
void AddLimitFlags(CLI::App& group, ServerOptions& options, PhubdFlags& flags) {
  ControlLimits& control = options.control;
  JobSizeLimits& job = options.admission.limits;
  JobDeadlines& deadlines = options.jobs.deadlines;
  group.add_option("--max-world-size", job.max_world_size,
                   "Most workers a job may have; each job's own world size comes with its "
                   "workers' Hellos (default: up to --max-connections)")
      ->check(CLI::Range(1, 65536));
  flags.deprecated_world_size =
      group.add_option("--world-size", job.max_world_size,
                       "Deprecated: the old name of --max-world-size (a cap, not the job's size)")
          ->check(CLI::Range(1, 65536));
  group.add_option("--max-control-frame-bytes", control.max_control_frame_bytes,
                   "Largest control message (a Hello) phubd reads; its bytes are buffered only "
                   "as they arrive")
      ->capture_default_str()
      ->check(CLI::Range(1024u, 1u << 30));
  group.add_option("--max-tensors", job.max_tensors, "Most tensors a job's model may have")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000000u));
  group.add_option("--max-model-bytes", job.max_model_bytes,
                   "Largest model a job may ask for, in bytes (+256 per chunk of bookkeeping); "
                   "default: 80% of physical memory / (--max-world-size + 3), or / 4 without it");
  group.add_option("--max-connections", control.max_connections,
                   "Most open control connections; per job's data port on each core, most data "
                   "connections not yet attached. More are closed at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  group.add_option("--max-pending-per-source", control.pending.per_source,
                   "Most control connections one address may hold before its Hello is accepted; "
                   "more from it are closed at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  group.add_option("--max-pending-connections", control.pending.total,
                   "Most control connections, all addresses together, before their Hello is "
                   "accepted; past it the oldest is closed for the newest")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  group.add_option("--max-data-pending-per-source", control.data_pending_per_source,
                   "Per job's data port on each core, most data connections one address may hold "
                   "before their ATTACH; "
                   "past --max-connections the oldest is closed for the newest")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  group.add_option("--hello-timeout-ms", control.hello_timeout_ms,
                   "A control connection must send its Hello within this time or is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  group.add_option("--attach-timeout-ms", deadlines.attach_timeout_ms,
                   "A data connection must send its ATTACH within this time or is closed; and "
                   "every worker must be attached to every core this long after the job starts, "
                   "or the job stalls")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  group.add_option("--form-timeout-ms", deadlines.form_timeout_ms,
                   "A job must have all its workers this long after the first joined, or every "
                   "member is refused (TIMEOUT) and the ranks are freed")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  group.add_option("--stalled-job-timeout-ms", deadlines.stalled_job_timeout_ms,
                   "After a job stalls, members still connected this long are closed and the "
                   "job ends")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  group.add_option("--stalled-name-memory-ms", deadlines.stalled_name_memory_ms,
                   "After an elastic job stalls (and ends with its weights), a new job under its "
                   "name is refused this long, so that workers a launcher restarts late do not "
                   "silently start it again from their initial weights; 0: never refused")
      ->capture_default_str()
      ->check(CLI::Range(0, 604800000));
  group.add_option("--leave-timeout-ms", deadlines.leave_timeout_ms,
                   "Once one worker has said goodbye, the others must say theirs (or disconnect) "
                   "within this time, or they are closed (TIMEOUT) and the job ends")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  group.add_option("--rejoin-timeout-ms", deadlines.rejoin_timeout_ms,
                   "A worker lost mid-job may be restarted with the same rank and rejoin within "
                   "this time; the others wait. Past it (or with 0) the job stalls")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400000));
  group.add_option("--liveness-timeout-ms", deadlines.liveness_timeout_ms,
                   "A worker heard nothing from (heartbeats every quarter of this) for this long "
                   "is lost (stopped, hung, link cut); workers apply it to phubd too. 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  // For tests: a job's install as slow as a large model's, on a small one.
  group.add_option("--test-install-delay-ms", options.jobs.test_install_delay_ms,
                   "Tests only: each core's install of a job's shard waits this long first (as "
                   "a large model's install takes seconds); 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
}

void AddCheckpointFlags(CLI::App& group, CheckpointOptions& checkpoint) {
  group.add_option("--checkpoint-dir", checkpoint.dir,
                   "Write the running job's checkpoints (weights, optimizer state, iterations) "
                   "here: every --checkpoint-every iterations and on SIGTERM; the two newest "
                   "kept");
  group.add_option("--checkpoint-every", checkpoint.every,
                   "Iterations between checkpoints (with --checkpoint-dir); 0: only on SIGTERM")
      ->capture_default_str();
  group.add_option("--resume", checkpoint.resume_dir,
                   "Resume every job from the newest good checkpoint in its folder here (the "
                   "--checkpoint-dir of before: this directory for the job 'default', DIR/NAME "
                   "for job NAME; corrupt ones are skipped, named in the log); the workers go "
                   "on from it. A job with none of its own while another folder holds one of its "
                   "model is refused, naming it");
}

void AddMetricsFlags(CLI::App& group, MetricsOptions& metrics) {
  group.add_option("--metrics-port", metrics.port,
                   "Serve Prometheus metrics on this port at /metrics (0: any free port; see "
                   "--metrics-port-file). Without it, no endpoint")
      ->check(CLI::Range(0, 65535));
  group.add_option("--metrics-address", metrics.address,
                   "Address the metrics endpoint listens on (default: 127.0.0.1, this machine "
                   "only: the series name every job; give an address to scrape from elsewhere)");
  group.add_option("--metrics-port-file", metrics.port_file,
                   "Write the metrics port here once listening (useful with --metrics-port 0)");
}

// A PBox's NICs (docs/operations.md "A PBox's NICs").
void AddNicFlags(CLI::App& group, NicOptions& nics, PhubdFlags& flags) {
  group.add_option("--nics", flags.nics,
                   "The data plane's NICs, comma-separated interfaces or addresses (eth0,eth1 or "
                   "10.0.0.5,10.0.1.5): the cores are spread over them, each listening on one "
                   "NIC and placed on a physical core of that NIC's NUMA node; workers are told "
                   "each core's address. With --transport verbs each NIC's RDMA device is the "
                   "one on that interface, or --rdma-device lists one per NIC. Default: --listen "
                   "alone");
  group.add_option("--core-map", nics.core_map,
                   "Overrides the placement: P@N per server core, comma-separated (0@0,8@1: core "
                   "0 on physical core 0 serving NIC 0, core 1 on physical core 8 serving NIC "
                   "1); phubd logs the map it chose at start");
  group.add_option("--machine-xml", nics.machine_xml,
                   "Place cores on the machine this hwloc XML describes (lstopo box.xml) "
                   "instead of this one: with --print-core-map, to plan a PBox from elsewhere")
      ->check(CLI::ExistingFile);
  group.add_flag("--print-core-map", flags.print_core_map,
                 "Print each server core's physical core, CPU, NUMA node, NIC, address, RDMA "
                 "device and queue as a table (deploy/pbox/tune-nics.sh reads it) and exit");
  group.add_option("--nic-gbps", flags.nic_gbps,
                   "What phubd's sends may use of its NIC(s), Gbit/s, all cores together: while "
                   "jobs share phubd each core paces their sends to its share of it, so the "
                   "NIC's bandwidth is split by --job-weight. Set it a few percent below line "
                   "rate (what TCP achieves). 0: not paced")
      ->check(CLI::Range(0.0, 100000.0));
}

void AddModelFlags(CLI::App& group, ServerOptions& options) {
  group.add_option("--chunk-bytes", options.admission.chunk_bytes,
                   "Tensors are cut into chunks of this many bytes (multiple of 4); each chunk "
                   "is owned by one core")
      ->capture_default_str();
  group.add_option("--init-weights", options.jobs.initial_weights_path,
                   "Raw float32 file with the model's initial weights (tensors in table order); "
                   "without it rank 0 sends its weights");
  kernels::AddOptimizerFlags(group, options.admission.optimizer, /*summation_mode=*/true);
}

void AddSharingFlags(CLI::App& group, SharingOptions& sharing, PhubdFlags& flags) {
  group.add_option("--max-jobs", sharing.max_jobs, "Most jobs forming or running at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  group.add_option("--max-forming-jobs-per-source", sharing.max_forming_jobs_per_source,
                   "Most jobs forming at once whose first worker came from one address")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  group.add_option("--memory-budget-bytes", sharing.memory_budget_bytes,
                   "Memory all jobs together may hold; each is charged its model x (world size "
                   "+ 3) from the moment it forms (all its workers in) to its end, and one that "
                   "would pass the budget then is refused (RESOURCE_EXHAUSTED). Default: 80% of "
                   "physical memory");
  group.add_option("--token-file", flags.token_file,
                   "File holding the job token; workers must present the same token");
  group.add_option("--job-tokens", sharing.job_tokens_dir,
                   "Directory of per-job tokens: job NAME's workers must present the contents "
                   "of DIR/NAME (read at the job's first Hello); a job without a file is "
                   "refused. Overrides --token-file")
      ->check(CLI::ExistingDirectory);
  group.add_flag("--allow-remote-without-token", sharing.allow_remote_without_token,
                 "Without --token-file or --job-tokens phubd serves only workers on this machine "
                 "(loopback); this lets ANYONE who reaches its port join and read any job's "
                 "weights. Use a token instead");
  group.add_option("--job-weight", flags.job_weights,
                   "NAME=W: job NAME's share of every core's sends against other jobs' (weighted "
                   "fair queueing; default 1). Repeatable");
}

void AddRacksFlags(CLI::App& group, PhubdFlags& flags) {
  group.add_option("--topology", flags.topology_file,
                   "Racks of racks: the file listing the cluster's racks, their PBoxes and hosts "
                   "(docs/operations.md \"Racks of racks\"); jobs whose workers span several "
                   "racks then sum each rack here and reduce across the racks' PBoxes");
  group.add_option("--rack", flags.rack_name, "With --topology: the rack this phubd serves");
}

// Rarely used: to measure what a default is worth, or to tune a kernel's TCP by hand.
void AddExperimentFlags(CLI::App& group, DataPlaneOptions& data_plane, PhubdFlags& flags) {
  group.add_option("--busy-poll-us", data_plane.tcp.busy_poll_us,
                   "TCP: SO_BUSY_POLL on every data connection, microseconds a read with nothing "
                   "there polls the NIC queue before sleeping (lower latency, busier cores; "
                   "above sysctl net.core.busy_read it needs CAP_NET_ADMIN). 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  group.add_flag("--tcp-nagle", flags.nagle,
                 "Leave Nagle's algorithm on (no TCP_NODELAY); only to measure what NODELAY is "
                 "worth");
  transport::AddSendWindowFlag(group, data_plane.send_window_bytes);
  group.add_option("--socket-buffer-bytes", data_plane.tcp.buffer_bytes,
                   "Fixed SO_SNDBUF/SO_RCVBUF per connection; 0 = Linux autotuning "
                   "(recommended)")
      ->capture_default_str();
}

}  // namespace

void AddPhubdFlags(CLI::App& app, ServerOptions& options, PhubdFlags& flags) {
  app.add_option("--log-level", flags.log_level,
                 "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  AddListeningFlags(*app.add_option_group("Listening and cores"), options, flags);
  AddLimitFlags(*app.add_option_group("Limits and deadlines",
                                      "What any peer can make phubd hold, and for how long"),
                options, flags);
  AddModelFlags(*app.add_option_group("Jobs' model and default optimizer",
                                      "The optimizer applies to jobs that do not name their own"),
                options);
  AddSharingFlags(*app.add_option_group("Sharing a PBox", "Several jobs on one phubd"),
                  options.admission.sharing, flags);
  AddCheckpointFlags(*app.add_option_group("Checkpoints"), options.jobs.checkpoint);
  AddMetricsFlags(*app.add_option_group("Metrics"), options.metrics);
  AddNicFlags(*app.add_option_group("NICs and placement"), options.nics, flags);
  CLI::App& rdma = *app.add_option_group("RDMA and the data plane");
  transport::AddTransportFlag(
      rdma, options.data_plane.transport,
      "Data plane: tcp, verbs (RDMA: InfiniBand or RoCE) or shm (shared memory: every "
      "worker on this host); workers follow phubd's choice");
  transport::AddRdmaFlags(rdma, {&options.data_plane.rdma});
  AddRacksFlags(*app.add_option_group("Racks of racks"), flags);
  AddExperimentFlags(*app.add_option_group("Experiment knobs",
                                           "Rarely needed: to measure what a default is worth"),
                     options.data_plane, flags);
}

Status ApplyFlags(const PhubdFlags& flags, ServerOptions& options) {
  if (flags.deprecated_world_size != nullptr && flags.deprecated_world_size->count() > 0) {
    spdlog::warn("--world-size is deprecated: it is a cap, now --max-world-size (the largest "
                 "world size phubd accepts; each job brings its own); use --max-world-size {}",
                 options.admission.limits.max_world_size);
  }
  options.cores.pin = !flags.no_pin;
  options.nics.bytes_per_s = flags.nic_gbps * 1e9 / 8;
  options.nics.names = placement::SplitList(flags.nics);
  options.data_plane.tcp.no_delay = !flags.nagle;
  for (const std::string& w : flags.job_weights) {
    const auto eq = w.find('=');
    double weight = 0;
    try {
      weight = eq == std::string::npos ? 0 : std::stod(w.substr(eq + 1));
    } catch (const std::exception&) {
    }
    if (eq == std::string::npos || eq == 0 || weight == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job-weight '", w, "': expected NAME=W with a number W, e.g. --job-weight big=2"));
    }
    options.admission.sharing.job_weights[w.substr(0, eq)] = weight;
  }
  return absl::OkStatus();
}

}  // namespace phub::server
