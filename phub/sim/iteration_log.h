// When each worker group finished each iteration, in simulated seconds: what the actors record
// and Simulate turns into a Prediction.
#pragma once

#include <cstdint>
#include <vector>

namespace phub::sim {

struct IterationLog {
  double start = 0;                          // the first iteration's start
  std::vector<std::vector<double>> ends;     // [group][iteration]: its end

  void Resize(std::size_t groups, std::uint32_t iterations) {
    ends.assign(groups, std::vector<double>(iterations, 0));
  }
  // The time of iteration i: from when every group ended i - 1 (or the start) to when every
  // group ended i.
  double Duration(std::uint32_t i) const {
    double before = start, end = 0;
    for (const auto& g : ends) {
      if (i > 0) before = std::max(before, g[i - 1]);
      end = std::max(end, g[i]);
    }
    return end - before;
  }
};

}  // namespace phub::sim
