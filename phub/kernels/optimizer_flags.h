// The optimizer's command-line flags, declared once for every program that takes them: phubd
// (the PS applies the optimizer) and the workers (the ring applies it on the worker), so the
// same flags mean the same training whichever exchange runs.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"

namespace phub::kernels {

// Adds --optimizer --lr --momentum --weight-decay --beta1 --beta2 --eps, writing `config`.
// Range checks happen later, in Validate(config), which names the bad hyper-parameter.
// `summation_mode`: phubd's flags also accept --optimizer average (phubd returns the mean gradient
// and the workers step); a worker's own optimizer cannot be "average".
inline void AddOptimizerFlags(CLI::App& app, OptimizerConfig& config,
                              bool summation_mode = false) {
  std::vector<std::string> names = {"sgd", "momentum", "nesterov", "adam"};
  if (summation_mode) names.push_back("average");
  app.add_option_function<std::string>(
         "--optimizer",
         [&config](const std::string& name) { config.kind = *ParseOptimizerKind(name); },
         summation_mode ? "sgd, momentum, nesterov or adam; or average (summation mode: "
                          "workers get the mean gradient and step themselves)"
                        : "sgd, momentum, nesterov or adam")
      ->check(CLI::IsMember(names))
      ->default_str(OptimizerName(config.kind));
  app.add_option("--lr", config.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", config.momentum, "Momentum (momentum, nesterov)")
      ->capture_default_str();
  app.add_option("--weight-decay", config.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--beta1", config.beta1, "Adam beta1")->capture_default_str();
  app.add_option("--beta2", config.beta2, "Adam beta2")->capture_default_str();
  app.add_option("--eps", config.eps, "Adam epsilon")->capture_default_str();
}

}  // namespace phub::kernels
