#include "phub/server/job/initial_weights.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace phub::server {

StatusOr<std::vector<float>> LoadInitialWeights(const std::string& path,
                                                const keys::KeyTable& table) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("initial weights file '", path, "': ", ec.message(),
                                            "; pass an existing file to --init-weights"));
  }
  const std::uint64_t expected = table.total_elements() * sizeof(float);
  if (size != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial weights file '", path, "' has ", size, " bytes; the workers' model needs ",
        expected, " (", table.total_elements(),
        " float32 values, tensors concatenated in table order)"));
  }
  std::vector<float> weights(table.total_elements());
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(weights.data()), static_cast<std::streamsize>(expected))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read initial weights file '", path, "': ", std::strerror(errno)));
  }
  return weights;
}

}  // namespace phub::server
