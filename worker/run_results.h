// What one phub-worker run did, as `--results` writes it (a JSON object: the bench drivers and
// the tests read it): the time per mini-batch, each epoch's test accuracy and, in an elastic
// job, every iteration this worker trained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"

namespace phub::worker {

struct EpochRecord {
  std::int64_t epoch;
  double seconds, accuracy, test_loss, train_loss;
};

// An elastic job's record of one iteration this worker trained: its member count and the
// global batch it took, so that a run can be checked for batches taken twice. `at`: when the
// step returned, in seconds of the system clock (a benchmark lines it up with when it started
// or killed a worker: bench/elastic).
struct TrainedIteration {
  std::int64_t iteration;
  std::uint32_t world;
  std::int64_t batch;
  double at;
};

struct RunResults {
  std::string model, mode, backend;
  std::int64_t batch = 0;
  std::uint32_t rank = 0, world = 0;
  bool overlap = true;
  double median_ms = 0, samples_per_s = 0, comm_share = 0;
  std::size_t timed_steps = 0;
  std::vector<EpochRecord> epochs;
  bool elastic = false;
  std::vector<TrainedIteration> trained;  // elastic
  bool left = false;                      // elastic: it left the job before the end
};

// Writes `results` to `path`; InvalidArgument when it cannot be opened, Internal when writing
// fails.
Status WriteRunResults(const std::string& path, const RunResults& results);

}  // namespace phub::worker
