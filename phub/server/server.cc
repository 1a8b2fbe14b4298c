#include "phub/server/server.h"

#include <algorithm>

#include "phub/server/admission/job_limits.h"
#include "phub/server/admission/job_role.h"
#include "phub/server/admission/job_tokens.h"

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <functional>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "phub/server/core/nic_plan.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/open_device.h"
#include "phub/transport/wire_header.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace {

// Where /metrics listens without --metrics-address: this machine only. The series name every
// job, its size and state, so they are not for whoever reaches the box (a node exporter's
// habit of binding everything is not ours to copy).
constexpr char kMetricsDefaultAddress[] = "127.0.0.1";

// Write then rename, so a reader never sees a half-written port. Nothing for an empty path.
Status WritePortFile(const std::string& path, std::uint16_t port, const char* flag) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", flag, " '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

void Server::LogPlan(const NicPlan& plan) const {
  for (std::size_t i = 0; i < plan.placement.cores.size(); ++i) {
    const placement::CoreSite& site = plan.placement.cores[i];
    const placement::Nic& nic = plan.nics[site.nic];
    spdlog::info("core {}: {} (CPU {}, NUMA node {}), NIC {}: {}{}{} queue {}", i,
                 options_.cores.pin ? absl::StrCat("physical core ", site.physical_core)
                              : std::string("not pinned, placed as physical core ") +
                                    std::to_string(site.physical_core),
                 site.cpu, site.numa_node, site.nic,
                 nic.interface.empty() ? "" : nic.interface + " ", nic.address,
                 nic.rdma_device.empty() ? "" : " (" + nic.rdma_device + ")",
                 plan.queue_of_core[i]);
  }
  spdlog::info("core map: --core-map {} (--print-core-map prints it as a table)",
               placement::FormatCoreMap(plan.placement));
  for (const std::string& warning : plan.placement.warnings) spdlog::warn("{}", warning);
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() {
  exporter_.reset();
  control_.reset();
  cores_.clear();
}

Status Server::Start() {
  AdmissionOptions& admission = options_.admission;
  PHUB_RETURN_IF_ERROR(kernels::Validate(admission.optimizer));
  if (admission.sharing.memory_budget_bytes == 0) {
    admission.sharing.memory_budget_bytes = DefaultMemoryBudgetBytes();
  }
  if (admission.limits.max_model_bytes == 0) {
    admission.limits.max_model_bytes =
        DefaultMaxModelBytes(std::max(admission.limits.max_world_size, 1u));
  }
  if (!admission.sharing.job_weights.empty() && options_.nics.bytes_per_s <= 0) {
    spdlog::warn("--job-weight without --nic-gbps: jobs are served in weighted order but not "
                 "paced, so where phubd's NIC is the bottleneck TCP shares it per connection "
                 "and the weights have little effect (docs/operations.md \"Sharing a PBox\")");
  }
  for (const auto& [name, weight] : admission.sharing.job_weights) {
    if (!(weight > 0) || weight > 1e6) {
      return absl::InvalidArgumentError(absl::StrCat("--job-weight ", name, "=", weight,
                                                     ": a weight is a number in (0, 1e6]"));
    }
  }
  const CoreOptions& cores = options_.cores;
  if (cores.count == 0) return absl::InvalidArgumentError("--cores must be at least 1");
  // A home part's chunks (racks of racks) are 4 bytes longer: they carry their count.
  const std::uint64_t max_chunk_bytes =
      transport::kMaxPayloadBytes - (admission.racks.topology ? JobRole::kCountBytes : 0);
  if (admission.chunk_bytes == 0 || admission.chunk_bytes % sizeof(float) != 0 ||
      admission.chunk_bytes > max_chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk-bytes ", admission.chunk_bytes, " must be a positive multiple of 4 up to ",
        max_chunk_bytes, " (e.g. 1048576)"));
  }
  const DataPlaneOptions& data_plane = options_.data_plane;
  PHUB_ASSIGN_OR_RETURN(NicPlan plan, PlanNics(cores, options_.nics, data_plane));
  LogPlan(plan);
  std::vector<std::string> rdma_devices;
  for (const placement::Nic& nic : plan.nics) rdma_devices.push_back(nic.rdma_device);
  PHUB_ASSIGN_OR_RETURN(
      std::vector<std::shared_ptr<transport::Device>> device_of_nic,
      transport::OpenDevicePerNic({data_plane.transport,
                                   transport::ForScheduling(data_plane.tcp,
                                                            data_plane.send_window_bytes),
                                   data_plane.rdma},
                                  rdma_devices));
  for (std::size_t k = 0; k < device_of_nic.size(); ++k) {
    spdlog::info("data plane of NIC {}: {}", k, device_of_nic[k]->Describe());
  }
  for (std::uint32_t i = 0; i < cores.count; ++i) {
    const placement::CoreSite& site = plan.placement.cores[i];
    CorePlace place{
        .address = plan.nics[site.nic].address,
        .port = cores.data_port_base == 0 ? std::uint16_t{0}
                                          : static_cast<std::uint16_t>(cores.data_port_base + i),
        .pin_core = cores.pin ? site.physical_core : -1,
        .nic = site.nic,
        .queue = plan.queue_of_core[i]};
    // Each job's lane on core i listens on base + i + k x cores, k < --max-jobs (server_core.h).
    const CorePorts ports{.stride = cores.count,
                          .slots = std::max<std::uint32_t>(admission.sharing.max_jobs, 1)};
    double top_weight = 1;
    for (const auto& [name, weight] : admission.sharing.job_weights) {
      top_weight = std::max(top_weight, weight);
    }
    PHUB_ASSIGN_OR_RETURN(
        auto core, ServerCore::Create(i, place, device_of_nic[site.nic], options_.core_limits(),
                                      ports, AddCoreMetrics(metrics_, i),
                                      options_.nics.bytes_per_s / cores.count, top_weight));
    cores_.push_back(std::move(core));
  }
  control_ = std::make_unique<ControlPlane>(context_, options_, cores_, [this] {
    if (options_.one_job) Stop();
  });
  PHUB_RETURN_IF_ERROR(control_->LoadResume());
  PHUB_RETURN_IF_ERROR(control_->Start());
  control_->AddMetrics(metrics_);
  AddDaemonMetrics(metrics_);
  const MetricsOptions& m = options_.metrics;
  if (m.port >= 0) {
    PHUB_ASSIGN_OR_RETURN(
        exporter_,
        metrics::HttpExporter::Start(
            context_, metrics_,
            {.address = m.address.empty() ? std::string(kMetricsDefaultAddress) : m.address,
             .port = static_cast<std::uint16_t>(m.port)}));
    spdlog::info("metrics at http://{}:{}/metrics", m.address.empty() ? kMetricsDefaultAddress
                                                                         : m.address,
                 exporter_->port());
    PHUB_RETURN_IF_ERROR(WritePortFile(m.port_file, exporter_->port(), "--metrics-port-file"));
  }
  PHUB_RETURN_IF_ERROR(WritePortFile(options_.port_file, control_->port(), "--port-file"));
  // Each job gets a data port on every core when it starts (its lane's; the Welcome says which).
  std::string data_ports = cores.data_port_base == 0 ? "any free port" : "";
  for (auto& core : cores_) {
    if (cores.data_port_base == 0) break;
    absl::StrAppend(&data_ports, data_ports.empty() ? "" : "; ", "core ", core->index(), ": ",
                    core->DescribePorts());
  }
  spdlog::info("phubd listening on {}:{} (data ports, per job: {}), {} cores{}; jobs of {} "
               "workers, at most {} at once, memory budget {} bytes{}",
               cores.listen_address, control_->port(), data_ports, cores.count,
               cores.pin ? ", pinned" : "",
               admission.limits.max_world_size > 0
                   ? absl::StrCat("up to ", admission.limits.max_world_size)
                   : std::string("any number of"),
               admission.sharing.max_jobs, admission.sharing.memory_budget_bytes,
               admission.sharing.job_tokens_dir.empty()
                   ? std::string()
                   : absl::StrCat(", per-job tokens in ", admission.sharing.job_tokens_dir));
  const Authentication auth = AuthenticationMode(admission.sharing);
  if (auth.warn) {
    spdlog::warn("{}", auth.sentence);
  } else {
    spdlog::info("{}", auth.sentence);
  }
  return absl::OkStatus();
}

int Server::Run() {
  int exit_status = 0;
  boost::asio::signal_set signals(context_, SIGINT, SIGTERM, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        if (signal == SIGHUP) {
          // Not a stop: systemd sends SIGHUP only when asked to (systemctl kill -s HUP, a
          // reload), and a terminal that hangs up must not end the jobs phubd serves.
          spdlog::warn("signal {} (SIGHUP): ignored; phubd has no configuration to reload "
                       "(--job-tokens files are read at each Hello); stop it with SIGTERM",
                       signal);
          signals.async_wait(on_signal);
          return;
        }
        spdlog::info("signal {} ({}): shutting down", signal,
                     signal == SIGTERM ? "SIGTERM" : "SIGINT");
        // The jobs' state goes to disk before their connections close (--checkpoint-dir).
        if (signal == SIGTERM && !control_->CheckpointBeforeStop()) {
          spdlog::error("a checkpoint on stop was not written (above): exiting with status 1");
          exit_status = 1;
        }
        Stop();
      };
  signals.async_wait(on_signal);
  transport::RunSurvivingExceptions(context_, "control plane");
  spdlog::info("phubd stopped");
  return exit_status;
}

void Server::Stop() {
  boost::asio::post(context_, [this] {
    control_->Stop();
    context_.stop();
  });
}

}  // namespace phub::server
