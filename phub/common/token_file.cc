#include "phub/common/token_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace phub {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string HowToMakeOne(const std::string& path) {
  return absl::StrCat("create one (e.g. `head -c 16 /dev/urandom | base64 > ", path,
                      "`) and give the same file to phubd and every worker of the job");
}

}  // namespace

std::string TrimToken(std::string text) {
  while (!text.empty() && IsAsciiSpace(text.back())) text.pop_back();
  return text;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read token file '", path, "' (",
                                            std::strerror(errno), "): ", HowToMakeOne(path)));
  }
  std::string text(kMaxTokenFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat("reading token file '", path, "' failed: check the file and its disk"));
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxTokenFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file '", path, "' is over ", kMaxTokenFileBytes,
                     " bytes: not a token file; give the file that holds the job's token"));
  }
  std::string token = TrimToken(std::move(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' holds no token (it is empty or whitespace only): ",
                     HowToMakeOne(path), "; to run without a token, give no token file at all"));
  }
  return token;
}

}  // namespace phub
