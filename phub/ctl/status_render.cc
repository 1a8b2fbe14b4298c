#include "phub/ctl/status_render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "phub/common/bounded_text.h"
#include "phub/ctl/json_text.h"

namespace phub::ctl {
namespace {

// printf for one number; "-" for NaN, so no caller has to remember.
std::string Format(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Integral counts print as integers up to 2^53; anything else (a peer's 1e300, 2.5) as %g.
std::string Count(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return Format("%.0f", v);
  }
  return Format("%g", v);
}

std::string Bytes(double v) {
  if (!std::isfinite(v) || v < 0) return Format("%g B", v);
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return Format("%.0f B", v);
  return Format("%.1f ", v) + units[unit];
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return Format("%g s", s);
  if (s < 1e-3) return Format("%.1fus", s * 1e6);
  if (s < 1) return Format("%.2fms", s * 1e3);
  return Format("%.2fs", s);
}

std::string QuantileCell(const Quantile& q) {
  if (std::isnan(q.seconds)) return "-";
  return Duration(q.seconds) + (q.since_start ? "*" : "");
}

std::string Uptime(double s) {
  if (!std::isfinite(s) || s < 0 || s > 1e12) return Format("%g s", s);
  const auto total = static_cast<long long>(s);
  const long long days = total / 86400, hours = total / 3600 % 24, minutes = total / 60 % 60,
                  seconds = total % 60;
  char buf[64];
  if (days > 0) {
    std::snprintf(buf, sizeof buf, "%lldd %02lldh %02lldm", days, hours, minutes);
  } else {
    std::snprintf(buf, sizeof buf, "%lldh %02lldm %02llds", hours, minutes, seconds);
  }
  return buf;
}

std::vector<std::string> Row(const CoreStatus& c) {
  return {c.core,
          Count(c.chunks),
          Format("%.1f", c.received_bytes_per_s / 1e6),
          Format("%.1f", c.sent_bytes_per_s / 1e6),
          Format("%.1f", c.pushes_per_s),
          Format("%.1f", c.aggregations_per_s),
          QuantileCell(c.aggregation_p50),
          QuantileCell(c.aggregation_p99),
          QuantileCell(c.round_p50)};
}

// Columns as wide as their widest cell (a peer may send any core or job label): the first
// `left` (names, words) left-aligned, the numbers after them right-aligned.
std::string Table(const std::vector<std::vector<std::string>>& rows, std::size_t left = 1) {
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      const std::string gap = i == 0 ? "" : "  ";
      out += i < left ? gap + row[i] + pad : gap + pad + row[i];
    }
    out += '\n';
  }
  return out;
}

// The jobs line, then a row per job and a blank line when there are jobs.
std::string JobsText(const StatusReport& r) {
  if (!r.jobs_known) return "jobs:     unknown (no phub_job_* series)\n";
  if (r.jobs.empty()) {
    return "jobs:     none (memory budget " + Bytes(r.memory_budget_bytes) + ")\n";
  }
  std::string out = "jobs:     " + Count(static_cast<double>(r.jobs.size())) + " (memory charged " +
                    Bytes(r.memory_charged_bytes) + " of " + Bytes(r.memory_budget_bytes) +
                    " budget)\n";
  std::vector<std::vector<std::string>> rows = {{"job", "state", "world", "connected", "missing",
                                                 "iteration", "it/s", "MB/s in", "MB/s out",
                                                 "model", "charge", "weight", "rejoin"}};
  for (const JobStatus& j : r.jobs) {
    // Names and states are the endpoint's label values: anything, escaped for the terminal.
    rows.push_back(
        {Escaped(j.name), Escaped(j.state), Count(j.world_size), Count(j.workers_connected),
         Count(j.workers_missing), Count(j.iteration), Format("%.2f", j.iterations_per_second),
         Format("%.1f", j.received_bytes_per_s / 1e6), Format("%.1f", j.sent_bytes_per_s / 1e6),
         Bytes(j.model_bytes), Bytes(j.memory_charge_bytes), Count(j.weight),
         j.rejoin_left_s >= 0 ? Format("%.0fs", j.rejoin_left_s) : "-"});
  }
  return out + Table(rows, 2) + "\n";
}

std::string JsonJob(const JobStatus& j) {
  return "{\"name\":" + JsonString(j.name) + ",\"state\":" + JsonString(j.state) +
         ",\"world_size\":" + JsonNumber(j.world_size) +
         ",\"workers_connected\":" + JsonNumber(j.workers_connected) +
         ",\"workers_missing\":" + JsonNumber(j.workers_missing) +
         ",\"model_bytes\":" + JsonNumber(j.model_bytes) +
         ",\"memory_charge_bytes\":" + JsonNumber(j.memory_charge_bytes) +
         ",\"weight\":" + JsonNumber(j.weight) + ",\"members\":" + JsonNumber(j.members) +
         ",\"iteration\":" + JsonNumber(j.iteration) +
         ",\"iterations_per_second\":" + JsonNumber(j.iterations_per_second) +
         ",\"received_bytes_per_s\":" + JsonNumber(j.received_bytes_per_s) +
         ",\"sent_bytes_per_s\":" + JsonNumber(j.sent_bytes_per_s) +
         ",\"rejoin_deadline_unix_s\":" + JsonNumber(j.rejoin_deadline_unix_s) + "}";
}

bool AnySinceStart(const CoreStatus& c) {
  return (c.aggregation_p50.since_start && !std::isnan(c.aggregation_p50.seconds)) ||
         (c.aggregation_p99.since_start && !std::isnan(c.aggregation_p99.seconds)) ||
         (c.round_p50.since_start && !std::isnan(c.round_p50.seconds));
}

std::string JsonQuantile(const Quantile& q) {
  return "{\"seconds\":" + JsonNumber(q.seconds) +
         ",\"since_start\":" + (q.since_start ? "true" : "false") + "}";
}

std::string JsonCore(const CoreStatus& c) {
  return "{\"core\":" + JsonString(c.core) + ",\"chunks\":" + JsonNumber(c.chunks) +
         ",\"received_bytes_per_s\":" + JsonNumber(c.received_bytes_per_s) +
         ",\"sent_bytes_per_s\":" + JsonNumber(c.sent_bytes_per_s) +
         ",\"pushes_per_s\":" + JsonNumber(c.pushes_per_s) +
         ",\"aggregations_per_s\":" + JsonNumber(c.aggregations_per_s) +
         ",\"aggregation_p50\":" + JsonQuantile(c.aggregation_p50) +
         ",\"aggregation_p99\":" + JsonQuantile(c.aggregation_p99) +
         ",\"round_p50\":" + JsonQuantile(c.round_p50) + "}";
}

}  // namespace

std::string RenderStatusText(const StatusReport& r, std::string_view target) {
  const ProcessStatus& p = r.process;
  const LifetimeCounters& l = r.lifetime;
  std::string out = "phubd " + (p.version.empty() ? "?" : Escaped(p.version)) + " (protocol " +
                    (p.protocol.empty() ? "?" : Escaped(p.protocol)) + ") at " + Escaped(target) +
                    ": up " + Uptime(p.uptime_s) + ", RSS " + Bytes(p.resident_bytes) + ", CPU " +
                    Format("%.2f", p.cpu_cores) + " cores, " + Count(p.open_fds) + " of " +
                    Count(p.max_fds) + " fds\n";
  out += JobsText(r);
  out += "lifetime: jobs " + Count(l.jobs_formed) + " formed / " + Count(l.jobs_stalled) +
         " stalled / " + Count(l.jobs_ended) + " ended, workers " + Count(l.workers_lost) +
         " lost / " + Count(l.workers_rejoined) + " rejoined, " + Count(l.checkpoints_written) +
         " checkpoints (" + Count(l.checkpoint_failures) + " failed), " + Count(l.hellos_refused) +
         " Hellos refused, " + Count(l.jobs_refused_for_memory) + " refused for memory\n\n";
  if (r.cores.empty()) {
    out += "no per-core series (phub_core_*) in the response\n";
    return out;
  }
  std::vector<std::vector<std::string>> rows = {{"core", "chunks", "MB/s in", "MB/s out",
                                                 "pushes/s", "aggr/s", "aggr p50", "aggr p99",
                                                 "round p50"}};
  bool since_start = AnySinceStart(r.total);
  for (const CoreStatus& c : r.cores) {
    rows.push_back(Row(c));
    since_start = since_start || AnySinceStart(c);
  }
  rows.push_back(Row(r.total));
  out += Table(rows);
  out += "rates over " + Format("%.2f", r.interval_s) + " s";
  if (since_start) out += "; * nothing observed in that time: the quantile is since phubd started";
  out += "\n";
  return out;
}

std::string RenderStatusJson(const StatusReport& r, std::string_view target) {
  const ProcessStatus& p = r.process;
  const LifetimeCounters& l = r.lifetime;
  std::string out =
      "{\"target\":" + JsonString(target) + ",\"interval_s\":" + JsonNumber(r.interval_s);
  out += ",\"process\":{\"version\":" + JsonString(p.version) +
         ",\"protocol\":" + JsonString(p.protocol) + ",\"uptime_s\":" + JsonNumber(p.uptime_s) +
         ",\"resident_bytes\":" + JsonNumber(p.resident_bytes) +
         ",\"virtual_bytes\":" + JsonNumber(p.virtual_bytes) +
         ",\"cpu_cores\":" + JsonNumber(p.cpu_cores) + ",\"open_fds\":" + JsonNumber(p.open_fds) +
         ",\"max_fds\":" + JsonNumber(p.max_fds) + "}";
  out += ",\"jobs_known\":";
  out += r.jobs_known ? "true" : "false";
  out += ",\"jobs\":[";
  for (std::size_t i = 0; i < r.jobs.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonJob(r.jobs[i]);
  }
  out += "],\"memory\":{\"budget_bytes\":" + JsonNumber(r.memory_budget_bytes) +
         ",\"charged_bytes\":" + JsonNumber(r.memory_charged_bytes) + "}";
  out += ",\"lifetime\":{\"jobs_formed\":" + JsonNumber(l.jobs_formed) +
         ",\"jobs_stalled\":" + JsonNumber(l.jobs_stalled) +
         ",\"jobs_ended\":" + JsonNumber(l.jobs_ended) +
         ",\"workers_lost\":" + JsonNumber(l.workers_lost) +
         ",\"workers_rejoined\":" + JsonNumber(l.workers_rejoined) +
         ",\"checkpoints_written\":" + JsonNumber(l.checkpoints_written) +
         ",\"checkpoint_failures\":" + JsonNumber(l.checkpoint_failures) +
         ",\"hellos_refused\":" + JsonNumber(l.hellos_refused) +
         ",\"jobs_refused_for_memory\":" + JsonNumber(l.jobs_refused_for_memory) + "}";
  out += ",\"cores\":[";
  for (std::size_t i = 0; i < r.cores.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonCore(r.cores[i]);
  }
  out += "],\"total\":" + JsonCore(r.total) + "}\n";
  return out;
}

}  // namespace phub::ctl
