// `phubctl status` output: a text page for people and one JSON object for scripts, both from a
// StatusReport (status_report.h). Unknown numbers (NaN) are "-" in text and null in JSON.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "phub/ctl/status_report.h"

namespace phub::ctl {

// Several lines, '\n'-terminated: the process, the jobs (a count and the memory budget, then a
// table with a row per job), the lifetime counters, then a table with a row per core and a
// total row. `target` (HOST:PORT) names what was asked.
std::string RenderStatusText(const StatusReport& report, std::string_view target);

// One JSON object on one line, '\n'-terminated; its fields are listed in docs/operations.md.
std::string RenderStatusJson(const StatusReport& report, std::string_view target);

}  // namespace phub::ctl
