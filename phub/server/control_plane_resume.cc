// --resume (ControlPlane, control_plane.h): every job's checkpoint folder under the directory,
// loaded at start, and the one each job resumes from when it forms.
#include "phub/server/control_plane.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/common/plain_name.h"
#include "phub/server/admission/job_role.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;

namespace {

// The checkpoint folders under --resume D, by the job key that resumes each: D itself for the
// job "default", D/NAME for job NAME, D/NAME@racks for a job's home part over racks.
std::vector<std::pair<std::string, std::string>> ResumeFolders(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> folders = {{"default", dir}};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    std::string_view job = name;
    if (job.ends_with("@racks")) job.remove_suffix(6);
    // "default" is D itself; other folders are no job's (logs, a copy put aside).
    if (job == "default" || !PlainNameFault(job).empty()) continue;
    folders.emplace_back(name, entry.path().string());
  }
  std::sort(folders.begin() + 1, folders.end());
  return folders;
}

}  // namespace

Status ControlPlane::LoadResume() {
  const CheckpointOptions& options = options_.jobs.checkpoint;
  if (options.resume_dir.empty()) return absl::OkStatus();
  for (const auto& [job, folder] : ResumeFolders(options.resume_dir)) {
    PHUB_RETURN_IF_ERROR(LoadResumeFolder(job, folder));
  }
  if (resumes_.empty()) {
    // Killed before its first checkpoint (or a first start under a restart policy): the jobs
    // start afresh, and workers that reconnect start over with them.
    spdlog::warn("--resume {}: no checkpoint there nor in any job's folder in it; every job "
                 "starts afresh", options.resume_dir);
  }
  return absl::OkStatus();
}

Status ControlPlane::LoadResumeFolder(const std::string& job, const std::string& folder) {
  StatusOr<LoadedCheckpoint> newest = LoadNewestCheckpoint(folder);
  if (absl::IsNotFound(newest.status())) return absl::OkStatus();
  PHUB_RETURN_IF_ERROR(newest.status());
  LoadedCheckpoint loaded = *std::move(newest);
  const JobSnapshot& s = loaded.snapshot;
  auto mismatch = [&](const std::string& what, const std::string& flag) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: checkpoint ", loaded.path, " ",
                                                   what, ": start phubd with ", flag,
                                                   ", or without --resume"));
  };
  const std::uint32_t max_world = options_.admission.limits.max_world_size;
  if (max_world > 0 && s.world_size > max_world) {
    return mismatch(absl::StrCat("is of a job of ", s.world_size, " workers, phubd takes at most ",
                                 max_world),
                    absl::StrCat("--max-world-size ", s.world_size));
  }
  // A home part's chunks are its count elements longer than the flag (JobRole::ChunkBytes);
  // which part a checkpoint is of is known when its job forms, which checks the size again
  // (Job::BuildKeyTable).
  const std::uint64_t chunk_bytes = options_.admission.chunk_bytes;
  if (s.chunk_bytes != chunk_bytes && s.chunk_bytes != chunk_bytes + JobRole::kCountBytes) {
    return mismatch(absl::StrCat("cut the model in chunks of ", s.chunk_bytes, " bytes, phubd ",
                                 chunk_bytes),
                    absl::StrCat("--chunk-bytes ", s.chunk_bytes));
  }
  // The job's optimizer (the workers' or phubd's flags) is checked against the checkpoint's
  // when the workers say Hello (CheckResumedModel).
  std::uint64_t low = UINT64_MAX;
  for (const ChunkSnapshot& chunk : s.chunks) low = std::min(low, chunk.iteration);
  for (const ChunkSnapshot& chunk : s.chunks) {
    if (chunk.iteration > low + 1 || (chunk.iteration == low + 1 && chunk.previous.empty())) {
      return absl::DataLossError(absl::StrCat(
          "--resume: checkpoint ", loaded.path, " has chunk ", chunk.chunk, " at iteration ",
          chunk.iteration, " beside chunks at ", low,
          " without the weights to go back to: it cannot be resumed; use an older one"));
    }
  }
  ResumeState& resume = resumes_[job];
  resume.iteration = s.chunks.empty() ? 0 : low;
  resume.snapshot = std::make_shared<const JobSnapshot>(std::move(loaded.snapshot));
  resume.path = loaded.path;
  spdlog::info("job '{}': resuming from {}: iteration {}, {} tensors, {} chunks{} (when it forms)",
               job, loaded.path, resume.iteration, resume.snapshot->tensors.size(),
               resume.snapshot->chunks.size(),
               loaded.refused.empty() ? ""
                                      : absl::StrCat(" (", loaded.refused.size(),
                                                     " newer checkpoint(s) refused)"));
  return absl::OkStatus();
}

ResumeState& ControlPlane::ResumeFor(const std::string& job) {
  auto own = resumes_.find(job);
  if (own != resumes_.end() && own->second.snapshot) return own->second;
  // --resume pointed at a job's own folder (D/NAME, as before every job had its folder under
  // D): the checkpoints in D itself are that job's, not the job "default"'s.
  const std::string& dir = options_.jobs.checkpoint.resume_dir;
  auto in_dir = resumes_.find("default");
  if (job != "default" && in_dir != resumes_.end() && in_dir->second.snapshot &&
      std::filesystem::path(dir).lexically_normal().filename() == job) {
    spdlog::info("job '{}': resuming from {}: --resume {} is named for it", job,
                 in_dir->second.path, dir);
    resumes_[job] = std::move(in_dir->second);
    in_dir->second = {};
  }
  return resumes_[job];
}

}  // namespace phub::server
