#include "phub/server/admission/job_tokens.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/plain_name.h"

namespace phub::server {

namespace {
// A token file larger than this is not a token (and is not read whole).
constexpr std::size_t kMaxTokenBytes = 4096;
}  // namespace

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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("phubd holds no token for job '", job, "' (no file ",
                                            path.string(), " in --job-tokens)"));
  }
  std::string token(kMaxTokenBytes + 1, '\0');
  in.read(token.data(), static_cast<std::streamsize>(token.size()));
  token.resize(static_cast<std::size_t>(in.gcount()));
  if (token.size() > kMaxTokenBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path.string(), " is over ", kMaxTokenBytes, " bytes: not a token file"));
  }
  // As --token-file: trailing whitespace is not part of the token (`echo secret > f` works).
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
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
