// RunResults (run_results.h) as JSON.
#include "worker/run_results.h"

#include <fstream>

#include "fmt/format.h"

namespace phub::worker {
namespace {

template <typename T, typename Field>
void List(std::ofstream& out, const std::vector<T>& rows, Field field) {
  out << "[";
  for (std::size_t i = 0; i < rows.size(); ++i) out << (i ? ", " : "") << field(rows[i]);
  out << "]";
}

}  // namespace

Status WriteRunResults(const std::string& path, const RunResults& r) {
  std::ofstream out(path);
  if (!out) return absl::InvalidArgumentError("cannot write --results '" + path + "'");
  out << "{\"model\": \"" << r.model << "\", \"batch\": " << r.batch << ", \"rank\": " << r.rank
      << ", \"world\": " << r.world << ", \"mode\": \"" << r.mode
      << "\", \"overlap\": " << (r.overlap ? "true" : "false") << ", \"backend\": \""
      << r.backend << "\", \"median_ms\": " << r.median_ms
      << ", \"samples_per_s\": " << r.samples_per_s << ", \"comm_share\": " << r.comm_share
      << ", \"timed_steps\": " << r.timed_steps << ", \"epochs\": [";
  for (std::size_t i = 0; i < r.epochs.size(); ++i) {
    const EpochRecord& e = r.epochs[i];
    out << (i ? ", " : "") << "{\"epoch\": " << e.epoch << ", \"seconds\": " << e.seconds
        << ", \"test_accuracy\": " << e.accuracy << ", \"test_loss\": " << e.test_loss
        << ", \"train_loss\": " << e.train_loss << "}";
  }
  out << "]";
  if (r.elastic) {
    out << ", \"elastic\": {\"iterations\": ";
    List(out, r.trained, [](const TrainedIteration& t) { return t.iteration; });
    out << ", \"worlds\": ";
    List(out, r.trained, [](const TrainedIteration& t) { return t.world; });
    out << ", \"batches\": ";
    List(out, r.trained, [](const TrainedIteration& t) { return t.batch; });
    out << ", \"at\": ";
    List(out, r.trained, [](const TrainedIteration& t) { return fmt::format("{:.6f}", t.at); });
    out << ", \"left\": " << (r.left ? "true" : "false") << "}";
  }
  out << "}\n";
  out.flush();
  if (!out) return absl::InternalError("writing --results '" + path + "' failed");
  return absl::OkStatus();
}

}  // namespace phub::worker
