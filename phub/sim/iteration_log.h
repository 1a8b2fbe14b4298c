// When each worker group finished each iteration, in simulated seconds: what the actors record
// and Simulate turns into a Prediction. With jobs sharing the PS hosts (Scenario::jobs) each
// group belongs to one, and each job has its own number of iterations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace phub::sim {

struct IterationLog {
  double start = 0;                          // the first iteration's start
  std::vector<std::vector<double>> ends;     // [group][iteration]: its end
  std::vector<std::uint32_t> job;            // [group]: its job

  void Resize(std::size_t groups, std::uint32_t iterations) {
    ends.assign(groups, std::vector<double>(iterations, 0));
    job.assign(groups, 0);
  }
  // Group g of job job_of_group[g], with iterations_of_job[that job] iterations.
  void Resize(const std::vector<std::uint32_t>& job_of_group,
              const std::vector<std::uint32_t>& iterations_of_job) {
    job = job_of_group;
    ends.clear();
    for (std::uint32_t j : job) ends.emplace_back(iterations_of_job[j], 0);
  }
  // The time of iteration i of job `of` (-1: every group, one job): from when every group of
  // it ended i - 1 (or the start) to when every group of it ended i.
  double Duration(std::uint32_t i, int of = -1) const {
    double before = start, end = 0;
    for (std::size_t g = 0; g < ends.size(); ++g) {
      if (of >= 0 && job[g] != static_cast<std::uint32_t>(of)) continue;
      if (i > 0) before = std::max(before, ends[g][i - 1]);
      end = std::max(end, ends[g][i]);
    }
    return end - before;
  }
  // Jobs' time an iteration while they all ran: per job, the median of its timed iterations
  // (all but the first) that ended before any job had finished; its first timed one if none.
  std::vector<double> SharedSecondsPerIteration(std::uint32_t jobs) const {
    std::vector<double> last(jobs, 0);
    for (std::size_t g = 0; g < ends.size(); ++g) last[job[g]] = std::max(last[job[g]], ends[g].back());
    const double window = *std::min_element(last.begin(), last.end());
    std::vector<double> out;
    for (std::uint32_t j = 0; j < jobs; ++j) {
      std::size_t iterations = 0;
      for (std::size_t g = 0; g < ends.size(); ++g) {
        if (job[g] == j) iterations = ends[g].size();
      }
      std::vector<double> timed;
      for (std::uint32_t i = 1; i < iterations; ++i) {
        double end = 0;
        for (std::size_t g = 0; g < ends.size(); ++g) {
          if (job[g] == j) end = std::max(end, ends[g][i]);
        }
        if (end <= window * (1 + 1e-9) || timed.empty()) timed.push_back(Duration(i, static_cast<int>(j)));
        if (end > window) break;
      }
      out.push_back(timed.empty() ? Duration(0, static_cast<int>(j)) : Median(timed));
    }
    return out;
  }

  static double Median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

}  // namespace phub::sim
