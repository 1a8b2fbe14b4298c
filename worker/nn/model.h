// Model: layers wired as a graph in the order they were added (each layer's inputs are earlier
// nodes, so that order is a topological one), with softmax cross-entropy on the last node.
// Forward runs the nodes in order; Backward runs them in reverse and calls a hook the moment a
// layer's parameter gradients are final — the trainer hands them to the exchange right there,
// while backward goes on with the layers below (the overlap of the PS design).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/backend/backend.h"
#include "worker/nn/layer.h"

namespace phub::worker {

class Model {
 public:
  using NodeId = int;
  static constexpr NodeId kInput = 0;

  // `input` includes the batch: [N, C, H, W] for images, [N, F] for features, [T, N] for token
  // sequences, whose ids lie in [0, input_vocab) (0: the input is real-valued).
  Model(std::string name, Shape input, std::int64_t input_vocab = 0);

  // Adds a layer fed by earlier nodes; returns its node. Layer names must be unique.
  NodeId Add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs);
  NodeId Add(std::unique_ptr<Layer> layer, NodeId input) {
    return Add(std::move(layer), std::vector<NodeId>{input});
  }
  NodeId last() const { return static_cast<NodeId>(nodes_.size()) - 1; }

  // Sets every layer up on `backend` (shape checks, ops, parameters, activations), initialises
  // the parameters from `seed`. The last node's output must be [N, classes] logits.
  void Build(Backend& backend, std::uint64_t seed);

  // x: the batch on the backend's device, of the input shape. Returns the logits.
  // `before_layer(layer)` runs just before each layer with parameters reads them: the trainer
  // waits there for that layer's fresh weights, so the first layers compute while the last
  // ones' weights are still on their way.
  const Tensor& Forward(const Tensor& x, bool training,
                        const std::function<void(Layer&)>& before_layer = {});
  // Mean cross-entropy of the last Forward's logits against labels (host, N class indices).
  double Loss(const Tensor& labels);
  // After Forward and Loss: every parameter's gradient, last layer first; `on_gradients(layer)`
  // runs as soon as that layer's gradients are final (never for layers without parameters).
  void Backward(const Tensor& labels, const std::function<void(Layer&)>& on_gradients = {});

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

  std::string name_;
  std::int64_t input_vocab_;
  std::vector<Node> nodes_;
  Backend* backend_ = nullptr;
  std::unique_ptr<SoftmaxCrossEntropyOp> loss_;
};

}  // namespace phub::worker
