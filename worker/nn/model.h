// Model: layers wired as a graph in the order they were added (each layer's inputs are earlier
// nodes, so that order is a topological one), with softmax cross-entropy on the last node.
// Forward runs the nodes in order; Backward runs them in reverse and calls a hook the moment a
// layer's parameter gradients are final — the trainer hands them to the exchange right there,
// while backward goes on with the layers below (the overlap of the PS design).
//
// Errors: Build, Forward, Loss and Backward return a Status (a layer's or the backend's, with
// the layer named; a bad model definition or input is InvalidArgument, a call out of order
// FailedPrecondition). The one assertion: Add after Build (a bug in the code building the model;
// no input reaches it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "worker/backend/backend.h"
#include "worker/nn/layer.h"

namespace phub::worker {

class Model {
 public:
  using NodeId = int;
  static constexpr NodeId kInput = 0;
  static constexpr NodeId kInvalid = -1;  // what a refused Add returns
  // Called on a layer just before its forward or just after its backward; an error stops the
  // pass and is returned by it.
  using LayerHook = std::function<Status(Layer&)>;

  // `input` includes the batch: [N, C, H, W] for images, [N, F] for features, [T, N] for token
  // sequences, whose ids lie in [0, input_vocab) (0: the input is real-valued).
  Model(std::string name, Shape input, std::int64_t input_vocab = 0);

  // Adds a layer fed by earlier nodes; returns its node. Layer names must be unique and inputs
  // existing nodes: otherwise the layer is refused, kInvalid returned, and Build returns that
  // first error (InvalidArgument naming the layer), so a model is written as a plain sequence
  // of Adds. REQUIRES: not built yet (checked: aborts).
  NodeId Add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs);
  NodeId Add(std::unique_ptr<Layer> layer, NodeId input) {
    return Add(std::move(layer), std::vector<NodeId>{input});
  }
  NodeId last() const { return static_cast<NodeId>(nodes_.size()) - 1; }

  // Sets every layer up on `backend` (shape checks, ops, parameters, activations), initialises
  // the parameters from `seed`. The last node's output must be [N, classes] logits. Returns
  // the first refused Add, a layer's refusal of its input, or the backend's failure;
  // FailedPrecondition if built already. A model whose Build failed is not usable.
  Status Build(Backend& backend, std::uint64_t seed);

  // x: the batch on the backend's device, of the input shape (InvalidArgument otherwise).
  // Returns the logits (a handle on the model's own tensor, overwritten by the next Forward).
  // `before_layer(layer)` runs just before each layer with parameters reads them: the trainer
  // waits there for that layer's fresh weights, so the first layers compute while the last
  // ones' weights are still on their way.
  StatusOr<Tensor> Forward(const Tensor& x, bool training, const LayerHook& before_layer = {});
  // Mean cross-entropy of the last Forward's logits against labels (host, N class indices;
  // InvalidArgument naming a label that is not a class).
  StatusOr<double> Loss(const Tensor& labels);
  // After Forward and Loss: every parameter's gradient, last layer first; `on_gradients(layer)`
  // runs as soon as that layer's gradients are final (never for layers without parameters).
  Status Backward(const Tensor& labels, const LayerHook& on_gradients = {});

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return nodes_[kInput].shape; }
  const Shape& output_shape() const { return nodes_.back().shape; }
  std::int64_t input_vocab() const { return input_vocab_; }
  // Every parameter in a stable order (layers as added; weight before bias): the key table's.
  std::vector<Parameter*> parameters();
  std::int64_t ParameterCount() const;
  // A table: layer, kind, output shape, parameters; and the total.
  std::string Describe() const;

 private:
  struct Node {
    std::unique_ptr<Layer> layer;  // null for the input
    std::vector<NodeId> inputs;
    Shape shape;
    Tensor y, dy, scratch;  // scratch: a second gradient to accumulate (fan-out)
  };

  // FailedPrecondition naming `call` unless Build succeeded.
  Status Built(const char* call) const;

  std::string name_;
  std::int64_t input_vocab_;
  std::vector<Node> nodes_;
  Backend* backend_ = nullptr;  // set by Build (even one that failed)
  bool built_ = false;          // Build succeeded
  Status definition_;           // the first refused Add
  std::unique_ptr<SoftmaxCrossEntropyOp> loss_;
};

}  // namespace phub::worker
