// Quantiles from Prometheus histogram buckets, as PromQL's histogram_quantile computes them:
// linear interpolation inside the bucket where the rank falls, the lower bound of the first
// bucket taken as 0, and a rank in the +Inf bucket answered with the highest finite bound. The
// buckets come from a peer's /metrics, so any list is accepted: unsorted, duplicated bounds,
// counts that go down, NaN; what cannot give a quantile gives NaN.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <vector>

namespace phub::ctl {

// Observations <= le, cumulative (Prometheus's NAME_bucket{le="..."}).
struct Bucket {
  double le = 0;
  double count = 0;
};

// Sorted by le, NaN bounds dropped, equal bounds merged (counts added), counts made
// non-decreasing (each at least the one before, as Prometheus does for a torn scrape).
std::vector<Bucket> NormalizeBuckets(std::vector<Bucket> buckets);

// The q-quantile (0 <= q <= 1) of the observations. NaN when there is none, when the last
// bucket is not +Inf, or with fewer than two buckets.
double BucketQuantile(double q, std::vector<Bucket> buckets);

// The +Inf bucket's count (all observations), or 0 if there is no +Inf bucket.
double ObservationCount(const std::vector<Bucket>& normalized);

// later - earlier per bucket: the observations made between two scrapes. nullopt if the bounds
// differ or a count went down (the process restarted: the deltas would mean nothing).
// REQUIRES: both normalized.
std::optional<std::vector<Bucket>> BucketDeltas(const std::vector<Bucket>& earlier,
                                                const std::vector<Bucket>& later);

// Adds `more` into `sum` bucket by bucket (the histogram of all cores together); false, and
// `sum` unchanged, if the bounds differ. An empty `sum` takes `more`. REQUIRES: both normalized.
bool AddBuckets(std::vector<Bucket>& sum, const std::vector<Bucket>& more);

}  // namespace phub::ctl
