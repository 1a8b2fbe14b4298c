// phubctl: the operator's command-line tool for a running phubd. Flags are parsed here, once,
// into StatusOptions. `phubctl status HOST:PORT` reads phubd's /metrics twice (--interval-ms
// apart) and prints the job, the lifetime counters, the process and a per-core table.
//
// Exit codes: 0 ok; 1 phubd cannot be read (unreachable, timed out, not phubd's metrics, a
// malformed body); 2 usage (bad flags or HOST:PORT).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "phub/ctl/http_get.h"
#include "phub/ctl/metrics_text.h"
#include "phub/ctl/plan.h"
#include "phub/ctl/scrape.h"
#include "phub/ctl/status_render.h"
#include "phub/ctl/status_report.h"

namespace {

using phub::ctl::HostPort;
using Clock = std::chrono::steady_clock;

constexpr const char* kMetricsPath = "/metrics";

// The knobs of `phubctl status`, each declared once (bound in main, listed in
// docs/operations.md).
struct StatusOptions {
  std::string target;      // HOST:PORT of phubd's --metrics-port
  int interval_ms = 1000;  // between the two scrapes that rates are taken over
  int timeout_ms = 3000;   // each scrape: connect + request + response
  bool json = false;
};

// What to try, for each way a scrape fails: the message says what and where, this says what to
// do about it. Anything but a failure to reach the port (a non-200, not HTTP, too big, not
// Prometheus text, no phub_build_info) means something else answers there.
std::string Advice(const absl::Status& s, const HostPort& where) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      if (s.message().find("cannot resolve") != absl::string_view::npos) {
        return "check the host name '" + where.host + "', or give phubd's IP address";
      }
      break;
    case absl::StatusCode::kUnavailable:
      return "is phubd running on " + where.host + " with --metrics-port " + where.port +
             "? (without that flag it serves no metrics)";
    case absl::StatusCode::kDeadlineExceeded:
      return "is " + where.port + " phubd's --metrics-port (not the workers' --port), and " +
             where.host + " reachable from here? --timeout-ms waits longer";
    default:
      break;
  }
  return "is " + where.port +
         " phubd's --metrics-port? (the workers' --port, 7070 by default, "
         "is not)";
}

// One scrape: GET /metrics, parsed. Errors are what the operator reads, advice included.
phub::StatusOr<phub::ctl::Scrape> Fetch(const HostPort& where, const StatusOptions& options) {
  const std::string url = "http://" + where.ToString() + kMetricsPath;
  phub::ctl::HttpGetOptions http;
  http.timeout = std::chrono::milliseconds(options.timeout_ms);
  auto body = phub::ctl::HttpGet(where, kMetricsPath, http);
  if (!body.ok()) {
    return absl::Status(body.status().code(), std::string(body.status().message()) + "\n  " +
                                                  Advice(body.status(), where));
  }
  auto samples = phub::ctl::ParseMetricsText(*body);
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        "the response of " + url +
                            " is not Prometheus text: " + std::string(samples.status().message()) +
                            "\n  " + Advice(samples.status(), where));
  }
  return phub::ctl::Scrape(std::move(*samples));
}

int RunStatus(const StatusOptions& options) {
  const auto where = phub::ctl::ParseHostPort(options.target);
  if (!where.ok()) {
    std::fprintf(stderr, "phubctl status: %s\n", std::string(where.status().message()).c_str());
    return 2;
  }
  const auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "phubctl status: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  auto first = Fetch(*where, options);
  if (!first.ok()) return fail(first.status());
  const Clock::time_point first_at = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(options.interval_ms));
  auto second = Fetch(*where, options);
  if (!second.ok()) return fail(second.status());
  // Rates are over the time between the two responses' arrivals: the server's own time between
  // its two snapshots is not known, and this is as close as the client can see.
  const double interval_s = std::chrono::duration<double>(Clock::now() - first_at).count();
  const double now_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto report = phub::ctl::BuildStatusReport(*first, *second, interval_s, now_unix_s);
  if (!report.ok()) {
    return fail(absl::Status(report.status().code(), std::string(report.status().message()) +
                                                         "\n  " + Advice(report.status(), *where)));
  }
  const std::string out = options.json ? phub::ctl::RenderStatusJson(*report, where->ToString())
                                       : phub::ctl::RenderStatusText(*report, where->ToString());
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"phubctl: look at a running phubd (status), or size a cluster before it exists (plan)."};
  app.require_subcommand(1);

  StatusOptions status;
  CLI::App* status_command = app.add_subcommand(
      "status",
      "Read phubd's /metrics twice, --interval-ms apart, and print the job, the lifetime "
      "counters, the process, and per core the chunks, MB/s in and out, pushes/s, "
      "aggregations/s and the aggregation and round latency quantiles");
  status_command
      ->add_option("HOST:PORT", status.target,
                   "phubd's metrics endpoint: the host and its --metrics-port")
      ->required();
  status_command
      ->add_option("--interval-ms", status.interval_ms,
                   "Time between the two scrapes that rates and quantiles are taken over")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  status_command
      ->add_option("--timeout-ms", status.timeout_ms,
                   "Limit on each scrape, connecting and reading together")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  status_command->add_flag("--json", status.json, "Print one JSON object instead of the table");

  phub::ctl::PlanOptions plan;
  CLI::App* plan_command = app.add_subcommand(
      "plan",
      "Predict, with the simulator calibrated on this project's measurements (SimGrid), the "
      "time an iteration of the gradient exchange takes per scheme on a cluster of --workers "
      "workers, what each worker moves, and what bounds it (docs/operations.md \"Sizing a "
      "PBox\")");
  plan_command->add_option("--schemes", plan.schemes,
                           "ps-pbox, ps-cloud, ps-multi, ps-racks, ring, tree")
      ->delimiter(',')
      ->capture_default_str();
  plan_command->add_option("--workers", plan.workers, "Workers (N)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  plan_command->add_option("--mib", plan.mib, "The gradient's size, MiB")->capture_default_str();
  plan_command->add_option("--tensors-file", plan.tensors_file,
                           "A model's gradient instead: one tensor's bytes a line, in the order "
                           "backward produces them (bench/sim/models.py)");
  plan_command->add_option("--gbps", plan.gbps, "Each worker's link, Gbit/s")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e5));
  plan_command->add_option("--latency-us", plan.latency_us, "One-way latency of each link, us")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  plan_command->add_option("--ps-cores", plan.ps_cores, "The PBox's cores serving the job")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  plan_command->add_option("--ps-hosts", plan.ps_hosts,
                           "ps-multi: PS hosts the keys spread over (each with one worker's link)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  plan_command->add_option("--racks", plan.racks,
                           "Racks of --workers / --racks workers each, a PBox in each")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  plan_command->add_option("--uplink-gbps", plan.uplink_gbps,
                           "With --racks above 1: each rack's uplink to the core, Gbit/s")
      ->check(CLI::Range(1e-3, 1e6));
  plan_command->add_option("--chunk-bytes", plan.chunk_bytes, "phubd's --chunk-bytes")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{4}, std::uint64_t{1} << 32));
  plan_command->add_option("--bucket-mib", plan.bucket_mib,
                           "ring, tree: allreduce the gradient in buckets of this many MiB as "
                           "backward fills them (DDP's bucket_cap_mb); 0: one allreduce")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  plan_command->add_option("--iterations", plan.iterations,
                           "Iterations simulated (the first, filling the pipeline, is not timed)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  plan_command->add_flag("--verbs", plan.verbs, "The PBox on verbs (its CPU per byte), not TCP");
  plan_command->add_flag("--json", plan.json, "Print one JSON object instead of the table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError too, with exit code 0; anything else is a usage error.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (status_command->parsed()) return RunStatus(status);
  if (plan_command->parsed()) {
    auto rows = phub::ctl::Plan(plan);
    if (!rows.ok()) {
      std::fprintf(stderr, "phubctl plan: %s\n", std::string(rows.status().message()).c_str());
      return rows.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    const std::string out = plan.json ? phub::ctl::RenderPlanJson(plan, *rows)
                                      : phub::ctl::RenderPlanText(plan, *rows);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  return 2;
}
