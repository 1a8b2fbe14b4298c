#include "phub/server/admission/job_tokens.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/plain_name.h"
#include "phub/common/token_file.h"

namespace phub::server {

StatusOr<std::string> JobName(const std::string& requested) {
  if (requested.empty()) return std::string("default");
  const std::string fault = PlainNameFault(requested);
  if (fault.empty()) return requested;
  return absl::InvalidArgumentError(absl::StrCat("job name '", Bounded(requested, 80), "' ", fault,
                                                 ": a job name is ", kPlainNameRule));
}

Authentication AuthenticationMode(const SharingOptions& options) {
  if (!options.job_tokens_dir.empty()) {
    return {"job_tokens",
            absl::StrCat("authentication: per-job tokens in ", options.job_tokens_dir,
                         " (job NAME's workers prove they hold DIR/NAME; the token never "
                         "travels)"),
            false};
  }
  if (!options.job_token.empty()) {
    return {"token",
            "authentication: one token for every job (--token-file; workers prove they hold it, "
            "the token never travels)",
            false};
  }
  if (!options.allow_remote_without_token) {
    return {"loopback_only",
            "authentication: none, so phubd serves only workers on this machine (loopback); give "
            "--token-file or --job-tokens to serve other hosts",
            false};
  }
  return {"none",
          "authentication: NONE and --allow-remote-without-token: anyone who reaches the control "
          "port may join a job and read its weights; give --token-file or --job-tokens",
          true};
}

StatusOr<std::string> ExpectedToken(const SharingOptions& options, const std::string& job) {
  if (options.job_tokens_dir.empty()) return options.job_token;
  // JobName already refused '/', '..' and the like: the path stays inside the directory.
  const std::filesystem::path path = std::filesystem::path(options.job_tokens_dir) / job;
  StatusOr<std::string> token = ReadTokenFile(path.string());
  if (absl::IsNotFound(token.status())) {
    return absl::NotFoundError(absl::StrCat("phubd holds no token for job '", job, "' (no file ",
                                            path.string(), " in --job-tokens)"));
  }
  return token;
}

}  // namespace phub::server
