// Layer: one node of a model. It owns its parameters (named tensors with their gradients, in a
// stable order: the PS key table is built from them), asks the Backend for its ops once its
// input shapes are known (Setup), and runs forward and backward through them. The same layer
// object runs on oneDNN or cuDNN: only the Backend differs. Every step returns a Status (the
// backend's, with the layer named in front of a refusal of its ops); nothing throws.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "worker/backend/backend.h"
#include "worker/tensor/tensor.h"

namespace phub::worker {

struct Parameter {
  std::string name;  // "<layer>.weight", "<layer>.bias", ... unique within a model
  Tensor value;
  Tensor grad;       // written by Backward (overwritten each step)
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual std::string Kind() const = 0;  // "Conv2d", "ReLU", ...

  // Checks the input shapes (InvalidArgument naming the layer and what is wrong), makes the
  // backend's ops and the parameters on its device, returns the output shape.
  virtual StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) = 0;
  // Fills the parameters as PyTorch's default initialisation does (host side, then copied).
  virtual Status InitParameters(Backend& backend, std::mt19937_64& rng) { return absl::OkStatus(); }

  // REQUIRES: Setup succeeded; inputs of the shapes it was given.
  virtual Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) = 0;
  // Writes the parameter gradients and dinputs[i] (skipped where null: the image needs none).
  virtual Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                          std::span<Tensor* const> dinputs) = 0;

  std::span<Parameter> parameters() { return params_; }
  std::span<const Parameter> parameters() const { return params_; }

 protected:
  // For Setup: a parameter of `shape` (value and grad, zeros) on the backend's device.
  Status AddParameter(Backend& backend, const std::string& suffix, const Shape& shape);
  // Uniform(-bound, bound) into a parameter, through the host.
  static Status FillUniform(Backend& backend, Parameter& p, double bound, std::mt19937_64& rng);
  static Status FillConstant(Backend& backend, Tensor& t, float value);
  // InvalidArgument("<Kind> '<name>': <what>").
  Status Invalid(const std::string& what) const;
  // `status` (the backend refusing an op this layer asked for) with "<Kind> '<name>': input
  // <shape>: " in front of its message; the code is kept.
  Status InLayer(const Status& status, const Shape& input) const;
  Status ExpectInputs(std::span<const Shape> inputs, std::size_t count, int rank) const;

 private:
  std::string name_;
  std::vector<Parameter> params_;
};

}  // namespace phub::worker
