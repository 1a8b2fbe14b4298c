// `phubctl plan`'s command line: every flag bound to its field of PlanOptions (plan.h), with
// the ranges CLI11 checks as it parses; what needs more than a range (--jobs' list, the jobs'
// workers against --workers) ScenarioFor checks, naming the flag. Only phubctl_main.cc and the
// tests use it.
#pragma once

#include <CLI/CLI.hpp>

#include "phub/ctl/plan.h"

namespace phub::ctl {

void AddPlanFlags(CLI::App& app, PlanOptions& options);

}  // namespace phub::ctl
