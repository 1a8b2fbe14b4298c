// Who may join which job: a job's name, as workers give it, and the token phubd expects for it.
// With --job-tokens DIR each job has its own token, the contents of DIR/NAME (read at each first
// Hello of a job, so tenants are added without restarting phubd); else every job presents
// --token-file's (or none). Names are checked before they touch the filesystem.
#pragma once

#include <string>

#include "phub/common/plain_name.h"
#include "phub/common/status.h"
#include "phub/server/admission/admission_options.h"

namespace phub::server {

inline constexpr std::size_t kMaxJobNameBytes = kMaxPlainNameBytes;

// The job a Hello's `job` field names: "default" when empty. InvalidArgument naming the rule
// (1 to 64 characters of [A-Za-z0-9._-], not starting with '.').
StatusOr<std::string> JobName(const std::string& requested);

// How workers are authenticated, for the start-up log and /metrics (phub_authentication).
struct Authentication {
  std::string label;     // job_tokens, token, loopback_only or none
  std::string sentence;  // for the log: what is in force and what it means
  bool warn = false;     // none: anyone who reaches the port may join
};
Authentication AuthenticationMode(const SharingOptions& options);

// The token `job` must present. NotFound naming the file when --job-tokens has none for it.
StatusOr<std::string> ExpectedToken(const SharingOptions& options, const std::string& job);

}  // namespace phub::server
