#include "worker/nn/model.h"

#include <random>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace phub::worker {

Model::Model(std::string name, Shape input, std::int64_t input_vocab)
    : name_(std::move(name)), input_vocab_(input_vocab) {
  nodes_.push_back(Node{nullptr, {}, std::move(input), {}, {}, {}});
}

Model::NodeId Model::Add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs) {
  if (backend_ != nullptr) throw std::logic_error("Model::Add after Build");
  for (NodeId in : inputs) {
    if (in < 0 || in > last()) {
      throw std::invalid_argument(absl::StrCat("model ", name_, ": layer '", layer->name(),
                                               "' takes node ", in, ", but only nodes 0..",
                                               last(), " exist"));
    }
  }
  for (const Node& n : nodes_) {
    if (n.layer && n.layer->name() == layer->name()) {
      throw std::invalid_argument(absl::StrCat("model ", name_, ": two layers are named '",
                                               layer->name(), "'"));
    }
  }
  nodes_.push_back(Node{std::move(layer), std::move(inputs), {}, {}, {}, {}});
  return last();
}

void Model::Build(Backend& backend, std::uint64_t seed) {
  if (backend_ != nullptr) throw std::logic_error("Model::Build twice");
  backend_ = &backend;
  std::mt19937_64 rng(seed);
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    std::vector<Shape> in;
    for (NodeId j : n.inputs) in.push_back(nodes_[j].shape);
    n.shape = n.layer->Setup(backend, in);
    n.layer->InitParameters(backend, rng);
    n.y = backend.Allocate(n.shape);
    n.dy = backend.Allocate(n.shape);
  }
  const Shape& out = output_shape();
  if (nodes_.size() < 2 || out.rank() != 2) {
    throw std::invalid_argument(absl::StrCat("model ", name_, ": the last layer must give [N, "
                                             "classes] logits, gives ", out.ToString()));
  }
  loss_ = backend.MakeSoftmaxCrossEntropy({.batch = out[0], .classes = out[1]});
}

const Tensor& Model::Forward(const Tensor& x, bool training,
                             const std::function<void(Layer&)>& before_layer) {
  if (backend_ == nullptr) throw std::logic_error("Model::Forward before Build");
  if (x.shape() != input_shape()) {
    throw std::invalid_argument(absl::StrCat("model ", name_, ": input is ", x.shape().ToString(),
                                             ", built for ", input_shape().ToString()));
  }
  nodes_[kInput].y = x;  // shares the caller's storage: never written
  std::vector<const Tensor*> in;
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    in.clear();
    for (NodeId j : n.inputs) in.push_back(&nodes_[j].y);
    if (before_layer && !n.layer->parameters().empty()) before_layer(*n.layer);
    n.layer->Forward(in, n.y, training);
  }
  return nodes_.back().y;
}

double Model::Loss(const Tensor& labels) { return loss_->Forward(nodes_.back().y, labels); }

void Model::Backward(const Tensor& labels, const std::function<void(Layer&)>& on_gradients) {
  loss_->Backward(labels, nodes_.back().dy);
  // A node's dy is complete once every consumer (a later node) has run its backward: the first
  // consumer writes it, later ones accumulate through the node's scratch.
  std::vector<bool> written(nodes_.size(), false);
  written.back() = true;
  std::vector<const Tensor*> in;
  std::vector<Tensor*> din;
  for (std::size_t i = nodes_.size() - 1; i >= 1; --i) {
    Node& n = nodes_[i];
    in.clear();
    din.clear();
    std::vector<NodeId> accumulate;
    for (NodeId j : n.inputs) {
      in.push_back(&nodes_[j].y);
      if (j == kInput) {
        din.push_back(nullptr);  // nobody needs the gradient of the image
      } else if (!written[j]) {
        din.push_back(&nodes_[j].dy);
        written[j] = true;
      } else {
        Node& src = nodes_[j];
        if (!src.scratch.defined()) src.scratch = backend_->Allocate(src.shape);
        din.push_back(&src.scratch);
        accumulate.push_back(j);
      }
    }
    n.layer->Backward(in, n.y, n.dy, din);
    for (NodeId j : accumulate) backend_->Accumulate(nodes_[j].scratch, nodes_[j].dy);
    if (on_gradients && !n.layer->parameters().empty()) on_gradients(*n.layer);
  }
}

std::vector<Parameter*> Model::parameters() {
  std::vector<Parameter*> out;
  for (Node& n : nodes_) {
    if (!n.layer) continue;
    for (Parameter& p : n.layer->parameters()) out.push_back(&p);
  }
  return out;
}

std::int64_t Model::ParameterCount() const {
  std::int64_t total = 0;
  for (const Node& n : nodes_) {
    if (!n.layer) continue;
    for (const Parameter& p : n.layer->parameters()) total += p.value.numel();
  }
  return total;
}

std::string Model::Describe() const {
  std::string out = absl::StrFormat("%s, input %s\n%-28s %-18s %-22s %14s\n", name_,
                                    input_shape().ToString(), "layer", "kind", "output",
                                    "parameters");
  for (const Node& n : nodes_) {
    if (!n.layer) continue;
    std::int64_t count = 0;
    for (const Parameter& p : n.layer->parameters()) count += p.value.numel();
    out += absl::StrFormat("%-28s %-18s %-22s %14d\n", n.layer->name(), n.layer->Kind(),
                           n.shape.ToString(), count);
  }
  out += absl::StrFormat("total parameters: %d\n", ParameterCount());
  return out;
}

}  // namespace phub::worker
