// Logging: spdlog with levels. Binaries call SetUpLogging once from main(); libraries just log.
#pragma once

#include <string>

#include "phub/common/status.h"
#include "spdlog/spdlog.h"

namespace phub {

// `level` is one of trace, debug, info, warn, error, critical, off. `process` prefixes each line
// (e.g. "phubd", "worker 3") so interleaved logs of several processes stay readable.
Status SetUpLogging(const std::string& level, const std::string& process);

}  // namespace phub
