#include "phub/ctl/plan_model_file.h"

#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace phub::ctl {

namespace {

constexpr std::uint64_t kMostBytes = std::uint64_t{1} << 40;  // a tensor's
constexpr double kMostFlops = 1e21;  // a step of a trillion-parameter model is ~1e19

bool ParseFlops(absl::string_view text, double* flops) {
  return absl::SimpleAtod(text, flops) && std::isfinite(*flops) && *flops >= 0 &&
         *flops <= kMostFlops;
}

}  // namespace

StatusOr<ModelFile> ReadTensorsFile(const std::string& path, double flops_per_second) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensors-file ", path, ": cannot be read (give a file of one tensor's "
                     "bytes a line, backward order; bench/sim/models.py writes them)"));
  }
  ModelFile model;
  bool forward_seen = false;
  double total = 0;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("--tensors-file ", path, " line ", number,
                                                     ": '", line.substr(0, 40), "' ", why));
    };
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    double flops = 0;
    if (!fields.empty() && fields[0] == "forward") {
      if (fields.size() != 2 || !ParseFlops(fields[1], &flops) || forward_seen) {
        return bad("is not one `forward FLOPS` line (0 to 1e21)");
      }
      forward_seen = true;
      model.forward_seconds = flops / flops_per_second;
      continue;
    }
    std::uint64_t bytes = 0;
    if (fields.empty() || fields.size() > 2 || !absl::SimpleAtoi(fields[0], &bytes) ||
        bytes == 0 || bytes > kMostBytes) {
      return bad("is not a tensor's size in bytes (1 to 2^40), then optionally its backward "
                 "FLOPs");
    }
    if (fields.size() == 2 && !ParseFlops(fields[1], &flops)) {
      return bad("has no backward FLOPs after the bytes (0 to 1e21)");
    }
    total += static_cast<double>(bytes);
    if (model.tensors.size() == sim::kMostTensors || total > sim::kMostGradientBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tensors-file ", path, " line ", number, ": more than ", sim::kMostTensors,
          " tensors or 8 TiB of gradient (merge small tensors: a chunk holds one tensor)"));
    }
    model.tensors.push_back({bytes, flops / flops_per_second});
  }
  if (model.tensors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tensors-file ", path, ": no tensors"));
  }
  return model;
}

}  // namespace phub::ctl
