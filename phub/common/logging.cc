#include "phub/common/logging.h"

#include "spdlog/sinks/stdout_color_sinks.h"

namespace phub {

Status SetUpLogging(const std::string& level, const std::string& process) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str maps anything unknown to `off`; only accept `off` when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + level +
                                      "': use trace, debug, info, warn, error, critical or off");
  }
  // Again for the same process (a Python program connecting twice): the same logger.
  std::shared_ptr<spdlog::logger> logger = spdlog::get(process);
  if (!logger) logger = spdlog::stderr_color_mt(process);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

}  // namespace phub
