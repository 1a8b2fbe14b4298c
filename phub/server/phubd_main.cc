// phubd: the PHub parameter-server daemon. Flags are parsed here, once, into ServerOptions.
#include <CLI/CLI.hpp>
#include <fstream>
#include <sstream>

#include "phub/common/logging.h"
#include "phub/common/token_file.h"
#include "phub/kernels/optimizer_flags.h"
#include "phub/placement/nics.h"
#include "phub/server/admission/job_limits.h"
#include "phub/server/core/nic_plan.h"
#include "phub/server/server.h"
#include "phub/transport/transport_flags.h"

int main(int argc, char** argv) {
  phub::server::ServerOptions options;
  std::string token_file;
  std::string log_level = "info";
  bool no_pin = false;

  CLI::App app{
      "phubd: PHub parameter server. Workers (PsClient / phub-worker) connect to --port, send "
      "their model's tensor table, and push gradients; each server core sums all workers' "
      "copies of its chunks fused with the optimizer step and sends the fresh weights back."};
  app.add_option("--listen", options.listen_address, "Address to listen on (control and data)")
      ->capture_default_str();
  app.add_option("--port", options.port, "Control-plane TCP port workers connect to; 0 = any free port")
      ->capture_default_str();
  app.add_option("--port-file", options.port_file,
                 "Write the control port here once listening (useful with --port 0)");
  app.add_option("--data-port-base", options.data_port_base,
                 "Core i takes data connections on this port + i; 0 = any free port (workers learn "
                 "the ports in the handshake)")
      ->capture_default_str();
  app.add_option("--cores", options.cores,
                 "Server cores: one pinned thread each, owning its share of the chunks")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_flag("--no-pin", no_pin, "Do not pin core threads to physical cores");
  app.add_option("--first-core", options.first_core,
                 "Search free physical cores from this one on (with one NIC whose NUMA node is "
                 "unknown: server core i on physical core first+i)")
      ->capture_default_str();
  // A PBox's NICs (docs/operations.md "A PBox's NICs").
  std::string nics;
  app.add_option("--nics", nics,
                 "The data plane's NICs, comma-separated interfaces or addresses (eth0,eth1 or "
                 "10.0.0.5,10.0.1.5): the cores are spread over them, each listening on one NIC "
                 "and placed on a physical core of that NIC's NUMA node; workers are told each "
                 "core's address. With --transport verbs each NIC's RDMA device is the one on "
                 "that interface, or --rdma-device lists one per NIC. Default: --listen alone");
  app.add_option("--core-map", options.nics.core_map,
                 "Overrides the placement: P@N per server core, comma-separated (0@0,8@1: core 0 "
                 "on physical core 0 serving NIC 0, core 1 on physical core 8 serving NIC 1); "
                 "phubd logs the map it chose at start");
  app.add_option("--machine-xml", options.nics.machine_xml,
                 "Place cores on the machine this hwloc XML describes (lstopo box.xml) instead of "
                 "this one: with --print-core-map, to plan a PBox from elsewhere")
      ->check(CLI::ExistingFile);
  bool print_core_map = false;
  app.add_flag("--print-core-map", print_core_map,
               "Print each server core's physical core, CPU, NUMA node, NIC, address, RDMA "
               "device and queue as a table (deploy/pbox/tune-nics.sh reads it) and exit");
  app.add_option("--busy-poll-us", options.tcp.busy_poll_us,
                 "TCP: SO_BUSY_POLL on every data connection, microseconds a read with nothing "
                 "there polls the NIC queue before sleeping (lower latency, busier cores; above "
                 "sysctl net.core.busy_read it needs CAP_NET_ADMIN). 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--world-size", options.world_size,
                 "Most workers a job may have; each job's own world size comes with its "
                 "workers' Hellos (default: up to --max-connections)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--chunk-bytes", options.chunk_bytes,
                 "Tensors are cut into chunks of this many bytes (multiple of 4); each chunk is "
                 "owned by one core")
      ->capture_default_str();
  phub::kernels::AddOptimizerFlags(app, options.optimizer, /*summation_mode=*/true);
  app.add_option("--token-file", token_file,
                 "File holding the job token; workers must present the same token");
  app.add_option("--job-tokens", options.job_tokens_dir,
                 "Directory of per-job tokens: job NAME's workers must present the contents of "
                 "DIR/NAME (read at the job's first Hello); a job without a file is refused. "
                 "Overrides --token-file")
      ->check(CLI::ExistingDirectory);
  std::vector<std::string> weights;
  app.add_option("--job-weight", weights,
                 "NAME=W: job NAME's share of every core's sends against other jobs' (weighted "
                 "fair queueing; default 1). Repeatable");
  double nic_gbps = 0;
  app.add_option("--nic-gbps", nic_gbps,
                 "What phubd's sends may use of its NIC(s), Gbit/s, all cores together: while "
                 "jobs share phubd each core paces their sends to its share of it, so the NIC's "
                 "bandwidth is split by --job-weight. Set it a few percent below line rate (what "
                 "TCP achieves). 0: not paced")
      ->check(CLI::Range(0.0, 100000.0));
  app.add_option("--init-weights", options.initial_weights_path,
                 "Raw float32 file with the model's initial weights (tensors in table order); "
                 "without it rank 0 sends its weights");
  std::string topology_file, rack_name;
  app.add_option("--topology", topology_file,
                 "Racks of racks: the file listing the cluster's racks, their PBoxes and hosts "
                 "(docs/operations.md \"Racks of racks\"); jobs whose workers span several racks "
                 "then sum each rack here and reduce across the racks' PBoxes");
  app.add_option("--rack", rack_name, "With --topology: the rack this phubd serves");
  app.add_flag("--one-job", options.one_job, "Exit when the first job ends");
  bool nagle = false;
  app.add_flag("--tcp-nagle", nagle,
               "Leave Nagle's algorithm on (no TCP_NODELAY); only to measure what NODELAY is worth");
  phub::transport::AddSendWindowFlag(app, options.send_window_bytes);
  app.add_option("--socket-buffer-bytes", options.tcp.buffer_bytes,
                 "Fixed SO_SNDBUF/SO_RCVBUF per connection; 0 = Linux autotuning (recommended)")
      ->capture_default_str();
  phub::transport::AddTransportFlag(
      app, options.transport,
      "Data plane: tcp, or verbs (RDMA: InfiniBand or RoCE; workers follow phubd's choice)");
  phub::transport::AddRdmaFlags(app, {&options.rdma});
  // Limits: what any peer can make phubd hold, and for how long (docs/operations.md "Limits").
  phub::server::ServerLimits& limits = options.limits;
  app.add_option("--max-control-frame-bytes", limits.max_control_frame_bytes,
                 "Largest control message (a Hello) phubd reads; its bytes are buffered only as "
                 "they arrive")
      ->capture_default_str()
      ->check(CLI::Range(1024u, 1u << 30));
  app.add_option("--max-tensors", limits.max_tensors, "Most tensors a job's model may have")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000000u));
  app.add_option("--max-model-bytes", limits.max_model_bytes,
                 "Largest model a job may ask for, in bytes (+256 per chunk of bookkeeping); "
                 "default: 80% of physical memory / (--world-size + 3), or / 4 without it");
  app.add_option("--max-jobs", limits.max_jobs, "Most jobs forming or running at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--memory-budget-bytes", limits.memory_budget_bytes,
                 "Memory all jobs together may hold; each is charged its model x (world size + "
                 "3) from its first Hello to its end, and one that would pass the budget is "
                 "refused (RESOURCE_EXHAUSTED). Default: 80% of physical memory");
  app.add_option("--max-connections", limits.max_connections,
                 "Most open control connections; per core, most data connections not yet "
                 "attached. More are closed at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--hello-timeout-ms", limits.hello_timeout_ms,
                 "A control connection must send its Hello within this time or is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  app.add_option("--attach-timeout-ms", limits.attach_timeout_ms,
                 "A data connection must send its ATTACH within this time or is closed; and "
                 "every worker must be attached to every core this long after the job starts, "
                 "or the job stalls")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  app.add_option("--form-timeout-ms", limits.form_timeout_ms,
                 "A job must have all its workers this long after the first joined, or every "
                 "member is refused (TIMEOUT) and the ranks are freed")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  app.add_option("--stalled-job-timeout-ms", limits.stalled_job_timeout_ms,
                 "After a job stalls, members still connected this long are closed and the job "
                 "ends")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  app.add_option("--leave-timeout-ms", limits.leave_timeout_ms,
                 "Once one worker has said goodbye, the others must say theirs (or disconnect) "
                 "within this time, or they are closed (TIMEOUT) and the job ends")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400000));
  app.add_option("--rejoin-timeout-ms", limits.rejoin_timeout_ms,
                 "A worker lost mid-job may be restarted with the same rank and rejoin within "
                 "this time; the others wait. Past it (or with 0) the job stalls")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400000));
  app.add_option("--liveness-timeout-ms", limits.liveness_timeout_ms,
                 "A worker heard nothing from (heartbeats every quarter of this) for this long "
                 "is lost (stopped, hung, link cut); workers apply it to phubd too. 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  app.add_option("--checkpoint-dir", options.checkpoint.dir,
                 "Write the running job's checkpoints (weights, optimizer state, iterations) "
                 "here: every --checkpoint-every iterations and on SIGTERM; the two newest kept");
  app.add_option("--checkpoint-every", options.checkpoint.every,
                 "Iterations between checkpoints (with --checkpoint-dir); 0: only on SIGTERM")
      ->capture_default_str();
  app.add_option("--resume", options.checkpoint.resume_dir,
                 "Resume the first job from the newest good checkpoint in this directory "
                 "(corrupt ones are skipped, named in the log); the workers go on from it");
  app.add_option("--metrics-port", options.metrics.port,
                 "Serve Prometheus metrics on this port at /metrics (0: any free port; see "
                 "--metrics-port-file). Without it, no endpoint")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", options.metrics.address,
                 "Address the metrics endpoint listens on (default: --listen's)");
  app.add_option("--metrics-port-file", options.metrics.port_file,
                 "Write the metrics port here once listening (useful with --metrics-port 0)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (auto s = phub::SetUpLogging(log_level, "phubd"); !s.ok()) {
    std::fprintf(stderr, "phubd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  options.pin = !no_pin;
  options.nic_bytes_per_s = nic_gbps * 1e9 / 8;
  options.nics.names = phub::placement::SplitList(nics);
  if (print_core_map) {
    auto plan = phub::server::PlanNics(options);
    if (!plan.ok()) {
      spdlog::error("{}", plan.status().message());
      return 2;
    }
    for (const std::string& warning : plan->placement.warnings) spdlog::warn("{}", warning);
    std::fputs(phub::server::CoreMapTable(*plan).c_str(), stdout);
    return 0;
  }
  for (const std::string& w : weights) {
    const auto eq = w.find('=');
    double weight = 0;
    try {
      weight = eq == std::string::npos ? 0 : std::stod(w.substr(eq + 1));
    } catch (const std::exception&) {
    }
    if (eq == std::string::npos || eq == 0 || weight == 0) {
      std::fprintf(stderr, "phubd: --job-weight '%s': expected NAME=W with a number W, e.g. "
                           "--job-weight big=2\n", w.c_str());
      return 2;
    }
    options.job_weights[w.substr(0, eq)] = weight;
  }
  spdlog::debug("limits: control frame {} B, {} tensors, model {} B, {} connections; Hello {} ms, "
                "ATTACH {} ms, forming {} ms, stalled {} ms, leaving {} ms",
                limits.max_control_frame_bytes, limits.max_tensors, limits.max_model_bytes,
                limits.max_connections, limits.hello_timeout_ms, limits.attach_timeout_ms,
                limits.form_timeout_ms, limits.stalled_job_timeout_ms, limits.leave_timeout_ms);
  options.tcp.no_delay = !nagle;
  if (!token_file.empty()) {
    auto token = phub::ReadTokenFile(token_file);
    if (!token.ok()) {
      spdlog::error("--token-file: {}", token.status().message());
      return 2;
    }
    options.job_token = *token;
  }

  if (!topology_file.empty() || !rack_name.empty()) {
    if (topology_file.empty() || rack_name.empty()) {
      spdlog::error("--topology and --rack go together: give the racks file and this phubd's "
                    "rack in it");
      return 2;
    }
    if (!options.initial_weights_path.empty()) {
      spdlog::error("--init-weights with --topology: not supported; rank 0 of the first rack "
                    "sends the initial weights of a job over several racks");
      return 2;
    }
    auto topology = phub::topology::Topology::Load(topology_file);
    if (!topology.ok()) {
      spdlog::error("{}", topology.status().message());
      return 2;
    }
    auto rack = topology->RackIndex(rack_name);
    if (!rack.ok()) {
      spdlog::error("--rack: {}", rack.status().message());
      return 2;
    }
    options.rack = *rack;
    options.topology =
        std::make_shared<const phub::topology::Topology>(*std::move(topology));
    spdlog::info("racks of racks: this phubd is the PBox of rack '{}' ({} of {} racks, {} workers "
                 "in all)",
                 rack_name, *rack + 1, options.topology->racks().size(),
                 options.topology->world_size());
  }

  phub::server::Server server(std::move(options));
  if (auto s = server.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.message());
    return 1;
  }
  server.Run();
  return 0;
}
