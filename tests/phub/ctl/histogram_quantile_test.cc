#include "phub/ctl/histogram_quantile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace phub::ctl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// An independent reference: the histogram's piecewise-linear CDF (observations spread evenly
// inside each bucket, the first bucket starting at 0), inverted by bisection: the smallest x
// with CDF(x) >= q * total. A rank past the last finite bucket gives that bucket's bound.
// REQUIRES: bounds sorted, > 0, distinct, last finite; counts[i] non-cumulative, for
// (bounds[i-1], bounds[i]], plus one more count for +Inf.
double ReferenceQuantile(double q, const std::vector<double>& bounds,
                         const std::vector<double>& counts) {
  double total = 0;
  for (double c : counts) total += c;
  const double rank = q * total;
  const auto cdf = [&](double x) {
    double below = 0;
    double lo = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      if (x >= bounds[i]) {
        below += counts[i];
      } else {
        if (x > lo) below += counts[i] * (x - lo) / (bounds[i] - lo);
        break;
      }
      lo = bounds[i];
    }
    return below;
  };
  if (cdf(bounds.back()) < rank) return bounds.back();
  double lo = 0, hi = bounds.back();
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (cdf(mid) >= rank ? hi : lo) = mid;
  }
  return hi;
}

std::vector<Bucket> Cumulative(const std::vector<double>& bounds,
                               const std::vector<double>& counts) {
  std::vector<Bucket> out;
  double sum = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    sum += counts[i];
    out.push_back({bounds[i], sum});
  }
  out.push_back({kInf, sum + counts.back()});
  return out;
}

TEST(HistogramQuantile, MatchesAPiecewiseLinearReferenceOnRandomBuckets) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    // 1 to 20 finite bounds, some buckets empty, an occasional +Inf-heavy tail.
    const std::size_t n = 1 + rng() % 20;
    std::vector<double> bounds;
    double b = std::ldexp(1.0 + rng() % 100, -static_cast<int>(rng() % 20));
    for (std::size_t i = 0; i < n; ++i) {
      bounds.push_back(b);
      b *= 1.01 + (rng() % 300) / 100.0;  // distinct bounds
    }
    std::vector<double> counts(n + 1);
    for (double& c : counts) c = rng() % 3 == 0 ? 0 : static_cast<double>(rng() % 1000);
    if (trial % 7 == 0) counts.back() = 5000;
    if (std::all_of(counts.begin(), counts.end(), [](double c) { return c == 0; })) counts[0] = 1;

    std::vector<Bucket> buckets = Cumulative(bounds, counts);
    std::shuffle(buckets.begin(), buckets.end(), rng);  // order must not matter
    for (double q : {0.01, 0.25, 0.5, 0.9, 0.99, 1.0, (rng() % 1000 + 1) / 1000.0}) {
      const double got = BucketQuantile(q, buckets);
      const double want = ReferenceQuantile(q, bounds, counts);
      ASSERT_NEAR(got, want, 1e-9 * bounds.back()) << "trial " << trial << " q " << q;
    }
  }
}

TEST(HistogramQuantile, IsNaNWithoutObservationsOrInfBucketOrSecondBucket) {
  EXPECT_TRUE(std::isnan(BucketQuantile(0.5, {})));
  EXPECT_TRUE(std::isnan(BucketQuantile(0.5, {{0.1, 0}, {kInf, 0}})));
  EXPECT_TRUE(std::isnan(BucketQuantile(0.5, {{0.1, 3}, {0.2, 4}})));  // no +Inf
  EXPECT_TRUE(std::isnan(BucketQuantile(0.5, {{kInf, 4}})));
  EXPECT_TRUE(std::isnan(BucketQuantile(std::nan(""), {{0.1, 3}, {kInf, 4}})));
}

TEST(HistogramQuantile, RankInTheInfBucketGivesTheHighestFiniteBound) {
  EXPECT_EQ(BucketQuantile(0.99, {{0.001, 1}, {0.01, 2}, {kInf, 100}}), 0.01);
}

TEST(HistogramQuantile, InterpolatesInsideTheBucket) {
  // 10 in (0, 1], 10 in (1, 3]: the median is the top of the first, p75 half-way up the second.
  EXPECT_DOUBLE_EQ(BucketQuantile(0.5, {{1, 10}, {3, 20}, {kInf, 20}}), 1.0);
  EXPECT_DOUBLE_EQ(BucketQuantile(0.75, {{1, 10}, {3, 20}, {kInf, 20}}), 2.0);
}

TEST(HistogramQuantile, SurvivesHostileBuckets) {
  // NaN bounds dropped, duplicated bounds merged, a count that goes down raised to its
  // predecessor's: the answer is a number, and never a crash.
  const std::vector<Bucket> hostile = {{std::nan(""), 5}, {1, 10}, {1, 2}, {2, 3}, {kInf, 40}};
  const auto normalized = NormalizeBuckets(hostile);
  ASSERT_EQ(normalized.size(), 3u);
  EXPECT_EQ(normalized[0].count, 12);
  EXPECT_EQ(normalized[1].count, 12);
  EXPECT_EQ(normalized[2].count, 40);
  EXPECT_FALSE(std::isnan(BucketQuantile(0.5, hostile)));
  EXPECT_TRUE(std::isnan(BucketQuantile(0.5, {{1, std::nan("")}, {kInf, std::nan("")}})));
}

TEST(HistogramQuantile, DeltasAreTheObservationsBetweenScrapes) {
  const std::vector<Bucket> a = {{1, 2}, {2, 5}, {kInf, 6}};
  const std::vector<Bucket> b = {{1, 4}, {2, 9}, {kInf, 10}};
  const auto d = BucketDeltas(a, b);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ((*d)[0].count, 2);
  EXPECT_EQ((*d)[1].count, 4);
  EXPECT_EQ(ObservationCount(*d), 4);
  EXPECT_FALSE(BucketDeltas(b, a).has_value());                             // went down
  EXPECT_FALSE(BucketDeltas(a, {{1, 4}, {3, 9}, {kInf, 10}}).has_value());  // other bounds
  EXPECT_FALSE(BucketDeltas({}, b).has_value());
}

TEST(HistogramQuantile, AddBucketsSumsMatchingBoundsOnly) {
  std::vector<Bucket> sum;
  EXPECT_TRUE(AddBuckets(sum, {{1, 2}, {kInf, 3}}));
  EXPECT_TRUE(AddBuckets(sum, {{1, 1}, {kInf, 5}}));
  EXPECT_EQ(sum[0].count, 3);
  EXPECT_EQ(sum[1].count, 8);
  EXPECT_FALSE(AddBuckets(sum, {{2, 1}, {kInf, 5}}));
  EXPECT_EQ(sum[1].count, 8);
}

}  // namespace
}  // namespace phub::ctl
