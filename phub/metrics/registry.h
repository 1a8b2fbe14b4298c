// The metrics a process exports, by name, and their rendering in the Prometheus text format
// (version 0.0.4: https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// A family is one metric name with its help text and type; its series differ by labels. A
// series is either a value object the Registry owns (Counter, Gauge, Histogram: the code that
// measures updates it) or a callback evaluated at each Render (for values another owner keeps,
// read where they live: the control plane's state, /proc).
//
// Thread-safety: registration and Render may be called from any thread (a mutex; neither is on
// a hot path). The value objects are updated lock-free (metric_types.h). A callback runs on the
// thread that calls Render: register only callbacks that are safe there (phubd renders on its
// control thread, so callbacks may read the control plane's state directly).
// Lifetime: references returned stay valid for the Registry's life.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "phub/metrics/metric_types.h"

namespace phub::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;  // in the order rendered

class Registry {
 public:
  // REQUIRES: `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
  // (not "le" for histograms); a name keeps the type it was first registered with; no two
  // series of a family have the same labels. Violations are programming errors (asserted).
  Counter& AddCounter(const std::string& name, const std::string& help, Labels labels = {});
  Gauge& AddGauge(const std::string& name, const std::string& help, Labels labels = {});
  Histogram& AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> upper_bounds, Labels labels = {});
  // Evaluated at each Render, on Render's thread.
  void AddCallbackGauge(const std::string& name, const std::string& help, Labels labels,
                        std::function<double()> read);
  void AddCallbackCounter(const std::string& name, const std::string& help, Labels labels,
                          std::function<double()> read);
  // A gauge family whose series come and go (one per running job): `read` returns them all at
  // each Render, each with labels of its own.
  using Samples = std::vector<std::pair<Labels, double>>;
  void AddCallbackGaugeFamily(const std::string& name, const std::string& help,
                              std::function<Samples()> read);
  // The same for counters (a job's bytes: each series counts up while its job lives).
  void AddCallbackCounterFamily(const std::string& name, const std::string& help,
                                std::function<Samples()> read);

  // Every family in name order, each with one # HELP and one # TYPE line.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    const Counter* counter = nullptr;
    const Gauge* gauge = nullptr;
    const Histogram* histogram = nullptr;
    std::function<double()> read;
    std::function<Samples()> read_many;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<Series> series;
  };
  Family& FamilyFor(const std::string& name, const std::string& help, Type type,
                    const Labels& labels);  // REQUIRES: mutex_ held

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  // Owned values; deques so references stay put as more are added.
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
};

// Label values and help text escaped as the text format requires (\\, \" in label values, \n).
// Longest label value rendered (a peer's string is cut there, saying its length).
inline constexpr std::size_t kMaxLabelValueBytes = 256;
std::string EscapeLabelValue(const std::string& value);
std::string EscapeHelp(const std::string& help);
// A sample value as the text format writes it: integers exactly, +Inf, -Inf, NaN.
std::string FormatValue(double value);

}  // namespace phub::metrics
