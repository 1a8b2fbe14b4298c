#include "worker/nn/model.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/tensor/check.h"

namespace phub::worker {

Model::Model(std::string name, Shape input, std::int64_t input_vocab)
    : name_(std::move(name)), input_vocab_(input_vocab) {
  nodes_.push_back(Node{nullptr, {}, std::move(input), {}, {}, {}});
}

Model::NodeId Model::Add(std::unique_ptr<Layer> layer, std::vector<NodeId> inputs) {
  // Building the model and then adding to it is a bug in the code that builds it: nothing a
  // user passes reaches here (the zoo's builders Add before they return the model).
  PHUB_WORKER_CHECK(backend_ == nullptr,
                    absl::StrCat("Model::Add('", layer->name(), "') after Build of model ", name_));
  Status refused;
  for (NodeId in : inputs) {
    if (in < 0 || in > last()) {
      refused = absl::InvalidArgumentError(absl::StrCat("model ", name_, ": layer '", layer->name(),
                                                        "' takes node ", in, ", but only nodes 0..",
                                                        last(), " exist"));
      break;
    }
  }
  for (const Node& n : nodes_) {
    if (refused.ok() && n.layer && n.layer->name() == layer->name()) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("model ", name_, ": two layers are named '", layer->name(), "'"));
    }
  }
  if (!refused.ok()) {
    if (definition_.ok()) definition_ = refused;
    return kInvalid;
  }
  nodes_.push_back(Node{std::move(layer), std::move(inputs), {}, {}, {}, {}});
  return last();
}

Status Model::Build(Backend& backend, std::uint64_t seed) {
  if (backend_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", name_, ": Build called twice (build a new model instead)"));
  }
  backend_ = &backend;
  PHUB_RETURN_IF_ERROR(definition_);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    std::vector<Shape> in;
    for (NodeId j : n.inputs) in.push_back(nodes_[j].shape);
    PHUB_ASSIGN_OR_RETURN(n.shape, n.layer->Setup(backend, in));
    PHUB_RETURN_IF_ERROR(n.layer->InitParameters(backend, rng));
    PHUB_ASSIGN_OR_RETURN(n.y, backend.Allocate(n.shape));
    PHUB_ASSIGN_OR_RETURN(n.dy, backend.Allocate(n.shape));
  }
  const Shape& out = output_shape();
  if (nodes_.size() < 2 || out.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("model ", name_,
                                                   ": the last layer must give [N, classes] "
                                                   "logits, gives ",
                                                   out.ToString()));
  }
  PHUB_ASSIGN_OR_RETURN(loss_,
                        backend.MakeSoftmaxCrossEntropy({.batch = out[0], .classes = out[1]}));
  built_ = true;
  return absl::OkStatus();
}

Status Model::Built(const char* call) const {
  if (built_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("model ", name_, ": ", call, " before a ", "successful Build"));
}

StatusOr<Tensor> Model::Forward(const Tensor& x, bool training, const LayerHook& before_layer) {
  PHUB_RETURN_IF_ERROR(Built("Forward"));
  if (x.shape() != input_shape() || x.device() != backend_->device()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", name_, ": input is ", x.ToString(),
                                                   ", built for ", input_shape().ToString(), " ",
                                                   DeviceName(backend_->device())));
  }
  nodes_[kInput].y = x;  // shares the caller's storage: never written
  std::vector<const Tensor*> in;
  for (std::size_t i = 1; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    in.clear();
    for (NodeId j : n.inputs) in.push_back(&nodes_[j].y);
    if (before_layer && !n.layer->parameters().empty()) {
      PHUB_RETURN_IF_ERROR(before_layer(*n.layer));
    }
    PHUB_RETURN_IF_ERROR(n.layer->Forward(in, n.y, training));
  }
  return nodes_.back().y;
}

StatusOr<double> Model::Loss(const Tensor& labels) {
  PHUB_RETURN_IF_ERROR(Built("Loss"));
  return loss_->Forward(nodes_.back().y, labels);
}

Status Model::Backward(const Tensor& labels, const LayerHook& on_gradients) {
  PHUB_RETURN_IF_ERROR(Built("Backward"));
  PHUB_RETURN_IF_ERROR(loss_->Backward(labels, nodes_.back().dy));
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
        if (!src.scratch.defined()) {
          PHUB_ASSIGN_OR_RETURN(src.scratch, backend_->Allocate(src.shape));
        }
        din.push_back(&src.scratch);
        accumulate.push_back(j);
      }
    }
    PHUB_RETURN_IF_ERROR(n.layer->Backward(in, n.y, n.dy, din));
    for (NodeId j : accumulate) {
      PHUB_RETURN_IF_ERROR(backend_->Accumulate(nodes_[j].scratch, nodes_[j].dy));
    }
    if (on_gradients && !n.layer->parameters().empty()) {
      PHUB_RETURN_IF_ERROR(on_gradients(*n.layer));
    }
  }
  return absl::OkStatus();
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
