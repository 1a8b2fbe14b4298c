#include "phub/server/admission/job_limits.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"

namespace phub::server {

std::uint64_t DefaultMemoryBudgetBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  // Unknown memory (never on Linux): a conservative 1 GiB rather than no limit.
  if (pages <= 0 || page_size <= 0) return std::uint64_t{1} << 30;
  const std::uint64_t memory = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  return memory / 10 * 8;
}

std::uint64_t DefaultMaxModelBytes(std::uint32_t world_size) {
  const std::uint64_t copies = std::uint64_t{world_size} + 3;
  return std::max<std::uint64_t>(DefaultMemoryBudgetBytes() / copies, 1);
}

std::optional<std::uint64_t> JobChargeBytes(const proto::Hello& hello, std::uint64_t chunk_bytes) {
  const std::optional<std::uint64_t> model = JobModelBytes(hello, chunk_bytes);
  const std::uint64_t copies = std::uint64_t{hello.world_size()} + 3;
  if (!model || *model > UINT64_MAX / copies) return std::nullopt;
  return *model * copies;
}

std::optional<std::uint64_t> JobModelBytes(const proto::Hello& hello, std::uint64_t chunk_bytes) {
  const std::uint64_t per_chunk = std::max<std::uint64_t>(chunk_bytes / sizeof(float), 1);
  std::uint64_t total = 0;
  for (const proto::TensorSpec& t : hello.tensors()) {
    const std::uint64_t e = t.elements();
    if (e > UINT64_MAX / sizeof(float)) return std::nullopt;
    const std::uint64_t chunks = e / per_chunk + (e % per_chunk != 0 ? 1 : 0);
    if (chunks > UINT64_MAX / kChunkBookkeepingBytes) return std::nullopt;
    const std::uint64_t bytes = e * sizeof(float);
    const std::uint64_t bookkeeping = chunks * kChunkBookkeepingBytes;
    if (bytes > UINT64_MAX - bookkeeping || bytes + bookkeeping > UINT64_MAX - total) {
      return std::nullopt;
    }
    total += bytes + bookkeeping;
  }
  return total;
}

std::optional<proto::Error> CheckWorldSize(const proto::Hello& hello, const JobSizeLimits& limits,
                                           std::uint32_t max_connections) {
  const std::uint32_t world = hello.world_size();
  const bool capped = limits.max_world_size > 0;
  const std::uint32_t max_world = capped ? limits.max_world_size : max_connections;
  if (world > 0 && world <= max_world) return std::nullopt;
  return MakeError(proto::Error::WORLD_SIZE_MISMATCH,
                   absl::StrCat("worker says world size ", world, "; phubd takes jobs of 1 to ",
                                max_world, " workers (",
                                capped ? "--max-world-size " : "--max-connections ", max_world,
                                ")"),
                   "start the job's workers with a world size phubd accepts, or raise the flag");
}

std::optional<proto::Error> CheckJobLimits(const proto::Hello& hello,
                                           const AdmissionOptions& options) {
  const JobSizeLimits& limits = options.limits;
  if (static_cast<std::uint64_t>(hello.tensors_size()) > limits.max_tensors) {
    return MakeError(proto::Error::LIMIT_EXCEEDED,
                     absl::StrCat("the model has ", hello.tensors_size(),
                                  " tensors; phubd accepts at most ", limits.max_tensors),
                     "raise phubd's --max-tensors, or register fewer, larger tensors");
  }
  const std::optional<std::uint64_t> bytes = JobModelBytes(hello, options.chunk_bytes);
  if (!bytes || *bytes > limits.max_model_bytes) {
    return MakeError(
        proto::Error::LIMIT_EXCEEDED,
        absl::StrCat("the model needs ", bytes ? absl::StrCat(*bytes) : "more than 2^64",
                     " bytes (tensors plus ", kChunkBookkeepingBytes, " bytes per chunk of ",
                     options.chunk_bytes, "); phubd accepts at most ", limits.max_model_bytes,
                     " per job"),
        "raise phubd's --max-model-bytes (its default is 80 % of memory over world size + 3), "
        "or a larger --chunk-bytes if the chunks are what is too many");
  }
  return std::nullopt;
}

}  // namespace phub::server
