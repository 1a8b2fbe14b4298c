#include "phub/ctl/scrape.h"

#include <cmath>
#include <unordered_set>

namespace phub::ctl {
namespace {

// Name and labels other than le, length-prefixed so that no two label sets share a key
// whatever bytes their values hold.
std::string Key(std::string_view name, const Labels& labels) {
  std::string key;
  const auto add = [&key](std::string_view part) {
    key += std::to_string(part.size());
    key += ':';
    key += part;
  };
  add(name);
  for (const auto& [label, value] : labels) {
    if (label == "le") continue;
    add(label);
    add(value);
  }
  return key;
}

}  // namespace

Scrape::Scrape(std::vector<Sample> samples) : samples_(std::move(samples)) {
  for (std::size_t i = 0; i < samples_.size(); ++i) {
    by_series_[Key(samples_[i].name, samples_[i].labels)].push_back(i);
    by_name_[samples_[i].name].push_back(i);
  }
}

const Sample* Scrape::Find(std::string_view name, const Labels& labels) const {
  if (labels.count("le")) return nullptr;
  const auto it = by_series_.find(Key(name, labels));
  if (it == by_series_.end()) return nullptr;
  for (std::size_t i : it->second) {
    if (!samples_[i].labels.count("le")) return &samples_[i];
  }
  return nullptr;
}

std::optional<double> Scrape::Value(std::string_view name, const Labels& labels) const {
  const Sample* s = Find(name, labels);
  if (s == nullptr) return std::nullopt;
  return s->value;
}

const Sample* Scrape::FindAny(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &samples_[it->second.front()];
}

std::vector<Bucket> Scrape::Buckets(std::string_view name, const Labels& labels) const {
  std::vector<Bucket> buckets;
  const auto it = by_series_.find(Key(std::string(name) + "_bucket", labels));
  if (it == by_series_.end()) return buckets;
  for (std::size_t i : it->second) {
    const auto le = samples_[i].labels.find("le");
    if (le == samples_[i].labels.end()) continue;
    buckets.push_back({ParseMetricValue(le->second).value_or(std::nan("")), samples_[i].value});
  }
  return NormalizeBuckets(std::move(buckets));
}

std::vector<std::string> Scrape::LabelValues(std::string_view name,
                                             const std::string& label) const {
  std::vector<std::string> values;
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return values;
  std::unordered_set<std::string> seen;
  for (std::size_t i : it->second) {
    const Labels& labels = samples_[i].labels;
    const auto value = labels.find(label);
    if (value == labels.end()) continue;
    const std::size_t others = labels.size() - 1 - (label != "le" && labels.count("le"));
    if (others == 0 && seen.insert(value->second).second) values.push_back(value->second);
  }
  return values;
}

}  // namespace phub::ctl
