#include "phub/ctl/histogram_quantile.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace phub::ctl {

std::vector<Bucket> NormalizeBuckets(std::vector<Bucket> buckets) {
  // NaN bounds first: they would break the strict weak ordering std::sort relies on.
  std::erase_if(buckets, [](const Bucket& b) { return std::isnan(b.le); });
  std::sort(buckets.begin(), buckets.end(),
            [](const Bucket& a, const Bucket& b) { return a.le < b.le; });
  std::vector<Bucket> out;
  for (const Bucket& b : buckets) {
    if (!out.empty() && out.back().le == b.le) {
      out.back().count += b.count;
    } else {
      out.push_back(b);
    }
  }
  for (std::size_t i = 1; i < out.size(); ++i) {
    if (out[i].count < out[i - 1].count) out[i].count = out[i - 1].count;
  }
  return out;
}

double ObservationCount(const std::vector<Bucket>& normalized) {
  if (normalized.empty() || !std::isinf(normalized.back().le) || normalized.back().le < 0) return 0;
  return normalized.back().count;
}

double BucketQuantile(double q, std::vector<Bucket> buckets) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(q)) return kNaN;
  if (q < 0) return -std::numeric_limits<double>::infinity();
  if (q > 1) return std::numeric_limits<double>::infinity();
  buckets = NormalizeBuckets(std::move(buckets));
  if (buckets.size() < 2 || !(std::isinf(buckets.back().le) && buckets.back().le > 0)) return kNaN;
  const double observations = buckets.back().count;
  if (!(observations > 0)) return kNaN;  // none, or NaN
  double rank = q * observations;
  // The first bucket holding the rank; the +Inf bucket (last) if none before it does.
  std::size_t b = 0;
  while (b + 1 < buckets.size() && !(buckets[b].count >= rank)) ++b;
  if (b + 1 == buckets.size()) return buckets[b - 1].le;
  if (b == 0 && buckets[0].le <= 0) return buckets[0].le;
  double start = 0;
  double count = buckets[b].count;
  if (b > 0) {
    start = buckets[b - 1].le;
    count -= buckets[b - 1].count;
    rank -= buckets[b - 1].count;
  }
  return start + (buckets[b].le - start) * (rank / count);
}

std::optional<std::vector<Bucket>> BucketDeltas(const std::vector<Bucket>& earlier,
                                                const std::vector<Bucket>& later) {
  if (earlier.size() != later.size()) return std::nullopt;
  std::vector<Bucket> out(later.size());
  for (std::size_t i = 0; i < later.size(); ++i) {
    if (earlier[i].le != later[i].le) return std::nullopt;
    const double delta = later[i].count - earlier[i].count;
    if (!(delta >= 0)) return std::nullopt;  // went down, or NaN
    out[i] = {later[i].le, delta};
  }
  return out;
}

bool AddBuckets(std::vector<Bucket>& sum, const std::vector<Bucket>& more) {
  if (sum.empty()) {
    sum = more;
    return true;
  }
  if (sum.size() != more.size()) return false;
  for (std::size_t i = 0; i < sum.size(); ++i) {
    if (sum[i].le != more[i].le) return false;
  }
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i].count += more[i].count;
  return true;
}

}  // namespace phub::ctl
