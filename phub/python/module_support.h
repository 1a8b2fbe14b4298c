// What the pieces of phub._phub share: the PhubError every failure raises, running a blocking
// call without the GIL, the optimizer spec dict and the wire format. Included by phub_module.cc and
// device_client.cc only.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "phub/common/member_schedule.h"
#include "phub/common/status.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/kernels/wire_options.h"

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

// An iteration's members as members_of returns them: {member, index, world,
// member_iterations_before}.
inline py::dict MembersDict(const IterationMembers& m) {
  py::dict d;
  d["member"] = m.member;
  d["index"] = m.index;
  d["world"] = m.world;
  d["member_iterations_before"] = m.member_iterations_before;
  return d;
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

// Sets `config`'s hyper-parameter `name` (a spec dict's key other than kind).
inline Status SetHyperParameter(kernels::OptimizerConfig& config, const std::string& name,
                                const py::handle& value) {
  float* field = name == "lr"             ? &config.lr
                 : name == "momentum"     ? &config.momentum
                 : name == "weight_decay" ? &config.weight_decay
                 : name == "beta1"        ? &config.beta1
                 : name == "beta2"        ? &config.beta2
                 : name == "eps"          ? &config.eps
                                          : nullptr;
  if (field == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer: unknown key '", name,
                     "'; the keys are kind, lr, momentum, weight_decay, beta1, beta2, eps"));
  }
  *field = py::cast<float>(value);
  return absl::OkStatus();
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
    } else {
      PHUB_RETURN_IF_ERROR(SetHyperParameter(config, name, value));
    }
  }
  PHUB_RETURN_IF_ERROR(kernels::Validate(config));
  return config;
}

// One iteration's values (step_with) of a job running `job` (the connect's optimizer): a spec
// dict without its kind (or with the job's); keys not given keep `job`'s values. lr may be 0.
inline StatusOr<kernels::StepValues> ParseStepValues(const py::dict& values,
                                                     const kernels::OptimizerConfig& job) {
  kernels::OptimizerConfig config = job;
  for (auto [key, value] : values) {
    const std::string name = py::cast<std::string>(key);
    if (name == "kind") {
      if (py::cast<std::string>(value) != kernels::OptimizerName(job.kind)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step_with: kind '", py::cast<std::string>(value), "', the job runs ",
            kernels::OptimizerName(job.kind), ": a schedule changes values, not the optimizer"));
      }
      continue;
    }
    PHUB_RETURN_IF_ERROR(SetHyperParameter(config, name, value));
  }
  const kernels::StepValues step = kernels::ValuesOf(config);
  PHUB_RETURN_IF_ERROR(kernels::ValidateStepValues(job.kind, step));
  return step;
}

// A StepValues as a spec dict of its values (resume_values).
inline py::dict StepValuesDict(const kernels::StepValues& v) {
  py::dict d;
  d["lr"] = v.lr;
  d["momentum"] = v.momentum;
  d["weight_decay"] = v.weight_decay;
  d["beta1"] = v.beta1;
  d["beta2"] = v.beta2;
  d["eps"] = v.eps;
  return d;
}

// The compact wire from the Python API's `wire` ("fp32", "bf16", "fp16") and `wire_weights`
// (the weights come back in it too, as phub-worker's --wire-weights wire); ValueError naming the
// accepted formats otherwise.
inline kernels::WireOptions ParseWire(const std::string& wire, bool wire_weights) {
  auto format = kernels::ParseWireFormat(wire);
  if (!format.ok()) throw py::value_error(absl::StrCat("wire: ", format.status().message()));
  kernels::WireOptions options;
  options.format = *format;
  options.weights = wire_weights;
  return options;
}

// device_client.cc: phub._phub.DeviceClient (the staging pipeline for CUDA tensors).
void RegisterDeviceClient(py::module_& m);

}  // namespace phub::python
