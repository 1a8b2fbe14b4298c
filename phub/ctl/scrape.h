// One scrape of a /metrics endpoint, indexed for the lookups status_report.cc makes: a series'
// value by name and exact label set, a histogram's buckets, the values one label takes. Lookups
// are hash lookups, so a hostile body of 250,000 series (MetricsTextLimits) costs linear time,
// never quadratic.
//
// Thread-safety: immutable after construction; const methods may be called from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "phub/ctl/histogram_quantile.h"
#include "phub/ctl/metrics_text.h"

namespace phub::ctl {

using Labels = std::map<std::string, std::string>;

class Scrape {
 public:
  Scrape() = default;
  explicit Scrape(std::vector<Sample> samples);

  // The value of the series `name` whose labels are exactly `labels` (the first, if a body
  // repeats a series); nullopt if there is none.
  std::optional<double> Value(std::string_view name, const Labels& labels = {}) const;

  // The series `name` whose labels are exactly `labels`, or nullptr. Valid as long as *this.
  const Sample* Find(std::string_view name, const Labels& labels = {}) const;

  // The first series named `name`, whatever its labels, or nullptr (phub_build_info's labels
  // are what is read from it).
  const Sample* FindAny(std::string_view name) const;

  // The buckets of histogram `name` (the series NAME_bucket with `labels` plus le), normalized
  // (histogram_quantile.h); bounds that do not parse as numbers are dropped. Empty if none.
  std::vector<Bucket> Buckets(std::string_view name, const Labels& labels) const;

  // The values label `label` takes in series named `name` whose only other label is le (so
  // histogram buckets count) or nothing, in first-seen order, each once.
  std::vector<std::string> LabelValues(std::string_view name, const std::string& label) const;

  std::size_t size() const { return samples_.size(); }

 private:
  std::vector<Sample> samples_;
  // Key (Key()): the name and the labels other than le -> indices into samples_.
  std::unordered_map<std::string, std::vector<std::size_t>> by_series_;
  std::unordered_map<std::string, std::vector<std::size_t>> by_name_;
};

}  // namespace phub::ctl
