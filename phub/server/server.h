// phubd as a library object: the cores (one pinned shard thread each) and the control plane
// on the calling thread. phubd_main.cc parses flags into ServerOptions and calls Run(); tests
// may embed a Server too.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <vector>

#include "phub/metrics/http_exporter.h"
#include "phub/metrics/registry.h"
#include "phub/server/control_plane.h"
#include "phub/server/core/server_core.h"
#include "phub/server/server_options.h"

namespace phub::server {

struct NicPlan;  // nic_plan.h

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Starts the cores and binds every port; errors (port in use, bad address, bad optimizer)
  // come back here, before anything runs.
  Status Start();
  std::uint16_t control_port() const { return control_->port(); }
  // 0 without --metrics-port.
  std::uint16_t metrics_port() const { return exporter_ ? exporter_->port() : 0; }
  // Serves on the calling thread until SIGINT/SIGTERM, Stop(), or the first job's end with
  // --one-job. SIGHUP is logged and ignored (docs/operations.md "Failures": phubd has nothing
  // to reload, and a terminal's hangup must not end a training job). Returns phubd's exit
  // status: 0, or 1 when SIGTERM's checkpoint could not be written.
  int Run();
  // Thread-safe: asks Run() to return.
  void Stop();

 private:
  // Each core's physical core, NUMA node, NIC and queue, and the plan's warnings.
  void LogPlan(const NicPlan& plan) const;

  ServerOptions options_;
  boost::asio::io_context context_;
  metrics::Registry metrics_;  // before the cores and the control plane, whose series it holds
  std::vector<std::unique_ptr<ServerCore>> cores_;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<metrics::HttpExporter> exporter_;  // renders control_'s series: goes first
};

}  // namespace phub::server
