// phubd: the PHub parameter-server daemon. Flags are parsed here, once, into ServerOptions
// (phubd_flags.h binds them); then the files they name are read and the Server runs.
#include <CLI/CLI.hpp>

#include "phub/common/logging.h"
#include "phub/common/token_file.h"
#include "phub/server/core/nic_plan.h"
#include "phub/server/phubd_flags.h"
#include "phub/server/server.h"

int main(int argc, char** argv) {
  phub::server::ServerOptions options;
  phub::server::PhubdFlags flags;
  CLI::App app{
      "phubd: PHub parameter server. Workers (PsClient / phub-worker) connect to --port, send "
      "their model's tensor table, and push gradients; each server core sums all workers' "
      "copies of its chunks fused with the optimizer step and sends the fresh weights back."};
  phub::server::AddPhubdFlags(app, options, flags);
  CLI11_PARSE(app, argc, argv);

  if (auto s = phub::SetUpLogging(flags.log_level, "phubd"); !s.ok()) {
    std::fprintf(stderr, "phubd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (auto s = phub::server::ApplyFlags(flags, options); !s.ok()) {
    std::fprintf(stderr, "phubd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.print_core_map) {
    auto plan = phub::server::PlanNics(options.cores, options.nics, options.data_plane);
    if (!plan.ok()) {
      spdlog::error("{}", plan.status().message());
      return 2;
    }
    for (const std::string& warning : plan->placement.warnings) spdlog::warn("{}", warning);
    std::fputs(phub::server::CoreMapTable(*plan).c_str(), stdout);
    return 0;
  }
  const phub::server::ControlLimits& control = options.control;
  const phub::server::JobDeadlines& deadlines = options.jobs.deadlines;
  spdlog::debug("limits: control frame {} B, {} tensors, model {} B, {} connections; Hello {} ms, "
                "ATTACH {} ms, forming {} ms, stalled {} ms, leaving {} ms",
                control.max_control_frame_bytes, options.admission.limits.max_tensors,
                options.admission.limits.max_model_bytes, control.max_connections,
                control.hello_timeout_ms, deadlines.attach_timeout_ms, deadlines.form_timeout_ms,
                deadlines.stalled_job_timeout_ms, deadlines.leave_timeout_ms);
  const std::string& token_file = flags.token_file;
  if (!token_file.empty()) {
    auto token = phub::ReadTokenFile(token_file);
    if (!token.ok()) {
      spdlog::error("--token-file: {}", token.status().message());
      return 2;
    }
    options.admission.sharing.job_token = *token;
  }

  const std::string& topology_file = flags.topology_file;
  const std::string& rack_name = flags.rack_name;
  phub::server::RacksOptions& racks = options.admission.racks;
  if (!topology_file.empty() || !rack_name.empty()) {
    if (topology_file.empty() || rack_name.empty()) {
      spdlog::error("--topology and --rack go together: give the racks file and this phubd's "
                    "rack in it");
      return 2;
    }
    if (!options.jobs.initial_weights_path.empty()) {
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
    racks.rack = *rack;
    racks.topology = std::make_shared<const phub::topology::Topology>(*std::move(topology));
    spdlog::info("racks of racks: this phubd is the PBox of rack '{}' ({} of {} racks, {} workers "
                 "in all)",
                 rack_name, *rack + 1, racks.topology->racks().size(),
                 racks.topology->world_size());
  }

  phub::server::Server server(std::move(options));
  if (auto s = server.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.message());
    return 1;
  }
  return server.Run();
}
