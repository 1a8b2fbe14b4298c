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

bool TokensEqual(const std::string& a, const std::string& b) {
  unsigned char differ = a.size() == b.size() ? 0 : 1;
  const std::string& longer = a.size() >= b.size() ? a : b;
  const std::string& other = a.size() >= b.size() ? b : a;
  for (std::size_t i = 0; i < longer.size(); ++i) {
    differ |= static_cast<unsigned char>(longer[i]) ^
              static_cast<unsigned char>(i < other.size() ? other[i] : 0);
  }
  return differ == 0;
}

}  // namespace phub::server
