// What the pieces of phub._phub share: the PhubError every failure raises, running a blocking
// call without the GIL, and the optimizer spec dict. Included by phub_module.cc and
// device_client.cc only.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::python {

namespace py = pybind11;

// Raised for every non-OK Status; registered as phub._phub.PhubError (a RuntimeError).
class PhubError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void ThrowIfError(const Status& status, const char* what) {
  if (status.ok()) return;
  // "phub" first: DDP re-raises a hook's error as a RuntimeError quoting only this text.
  throw PhubError(absl::StrCat("phub ", what, ": ", absl::StatusCodeToString(status.code()), ": ",
                               status.message()));
}

// Runs `call`, a PsClient call that may block on the network, without the GIL; raises its error.
template <typename Call>
void Blocking(const char* what, Call call) {
  Status status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  ThrowIfError(status, what);
}

// A spec dict {kind, lr, momentum, weight_decay, beta1, beta2, eps} as phubd's optimizer.
inline StatusOr<kernels::OptimizerConfig> ParseOptimizer(const py::dict& spec) {
  kernels::OptimizerConfig config;
  for (auto [key, value] : spec) {
    const std::string name = py::cast<std::string>(key);
    if (name == "kind") {
      auto kind = kernels::ParseOptimizerKind(py::cast<std::string>(value));
      if (!kind.ok()) return kind.status();
      config.kind = *kind;
    } else if (name == "lr") {
      config.lr = py::cast<float>(value);
    } else if (name == "momentum") {
      config.momentum = py::cast<float>(value);
    } else if (name == "weight_decay") {
      config.weight_decay = py::cast<float>(value);
    } else if (name == "beta1") {
      config.beta1 = py::cast<float>(value);
    } else if (name == "beta2") {
      config.beta2 = py::cast<float>(value);
    } else if (name == "eps") {
      config.eps = py::cast<float>(value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer: unknown key '", name,
                       "'; the keys are kind, lr, momentum, weight_decay, beta1, beta2, eps"));
    }
  }
  PHUB_RETURN_IF_ERROR(kernels::Validate(config));
  return config;
}

// device_client.cc: phub._phub.DeviceClient (the staging pipeline for CUDA tensors).
void RegisterDeviceClient(py::module_& m);

}  // namespace phub::python
