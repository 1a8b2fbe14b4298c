// The layers models are built from. Each .cc next to this file implements one.
#pragma once

#include <memory>

#include "worker/nn/layer.h"

namespace phub::worker {

struct Conv2dOptions {
  std::int64_t out_channels = 1;
  std::int64_t kernel = 3;  // square kernels: every dlbench model uses them
  std::int64_t stride = 1;
  std::int64_t pad = 0;
  bool bias = true;
};

class Conv2d final : public Layer {
 public:
  Conv2d(std::string name, Conv2dOptions options) : Layer(std::move(name)), o_(options) {}
  std::string Kind() const override { return "Conv2d"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  Conv2dOptions o_;
  std::int64_t fan_in_ = 1;
  std::unique_ptr<Conv2dOp> op_;
  Tensor no_bias_;  // an empty tensor passed as the bias when there is none
};

// y = x W^T + b; a rank-4 input [N, C, H, W] is flattened to [N, C*H*W]; a rank-3 sequence
// [T, N, F] is applied at every step, as rows [T*N, F] (the output stays [T*N, Out], the shape
// the sequence loss wants).
class Linear final : public Layer {
 public:
  Linear(std::string name, std::int64_t out_features, bool bias = true)
      : Layer(std::move(name)), out_(out_features), bias_(bias) {}
  std::string Kind() const override { return "Linear"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  std::int64_t out_;
  bool bias_;
  Shape flat_;
  std::unique_ptr<LinearOp> op_;
  Tensor no_bias_;
};

// Parameters weight (gamma, init 1) and bias (beta, init 0); running mean and variance are
// buffers (not parameters: they are not exchanged, as in PyTorch DDP).
class BatchNorm final : public Layer {
 public:
  explicit BatchNorm(std::string name, float eps = 1e-5f, float momentum = 0.1f)
      : Layer(std::move(name)), eps_(eps), momentum_(momentum) {}
  std::string Kind() const override { return "BatchNorm"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 private:
  float eps_, momentum_;
  Backend* backend_ = nullptr;
  std::unique_ptr<BatchNormOp> op_;
  Tensor running_mean_, running_var_, save_mean_, save_var_;
  Tensor dx_scratch_;  // dx nobody wants (the layer sees the image), made at first need
};

class Activation : public Layer {
 public:
  Activation(std::string name, ActivationKind kind) : Layer(std::move(name)), kind_(kind) {}
  std::string Kind() const override { return kind_ == ActivationKind::kRelu ? "ReLU" : "Sigmoid"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  ActivationKind kind_;
  std::unique_ptr<ActivationOp> op_;
};

class Relu final : public Activation {
 public:
  explicit Relu(std::string name) : Activation(std::move(name), ActivationKind::kRelu) {}
};

class Sigmoid final : public Activation {
 public:
  explicit Sigmoid(std::string name) : Activation(std::move(name), ActivationKind::kSigmoid) {}
};

struct PoolOptions {
  PoolKind kind = PoolKind::kMax;
  std::int64_t kernel = 2, stride = 2, pad = 0;
  bool global = false;  // kernel = the whole image: [N, C, H, W] -> [N, C, 1, 1]
};

class Pool final : public Layer {
 public:
  Pool(std::string name, PoolOptions options) : Layer(std::move(name)), o_(options) {}
  std::string Kind() const override {
    return o_.global ? "GlobalAvgPool" : o_.kind == PoolKind::kMax ? "MaxPool" : "AvgPool";
  }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  PoolOptions o_;
  std::unique_ptr<PoolOp> op_;
};

class LocalResponseNorm final : public Layer {
 public:
  LocalResponseNorm(std::string name, LrnSpec params) : Layer(std::move(name)), p_(params) {}
  std::string Kind() const override { return "LocalResponseNorm"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  LrnSpec p_;  // size, alpha, beta, k; the shape fields are filled by Setup
  std::unique_ptr<LrnOp> op_;
};

// Inverted dropout in training (a new mask every step, from the model's seed), identity in
// inference.
class Dropout final : public Layer {
 public:
  Dropout(std::string name, float p) : Layer(std::move(name)), p_(p) {}
  std::string Kind() const override { return "Dropout"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override {
    seed_ = rng();
    return absl::OkStatus();
  }
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  float p_;
  std::uint64_t seed_ = 0, step_ = 0;
  bool trained_ = false;  // whether the last forward applied a mask
  Backend* backend_ = nullptr;
  std::unique_ptr<DropoutOp> op_;
};

// CIFAR ResNets' parameter-free shortcut (option A): subsample by `stride`, zero-pad channels.
class Shortcut final : public Layer {
 public:
  Shortcut(std::string name, std::int64_t out_channels, std::int64_t stride)
      : Layer(std::move(name)), out_(out_channels), stride_(stride) {}
  std::string Kind() const override { return "Shortcut"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  std::int64_t out_, stride_;
  std::unique_ptr<ShortcutOp> op_;
};

// y = a + b (residual connections).
class Add final : public Layer {
 public:
  explicit Add(std::string name) : Layer(std::move(name)) {}
  std::string Kind() const override { return "Add"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  Backend* backend_ = nullptr;
};

// A lookup table: token ids [T, N] (floats holding whole numbers, the model's input) ->
// [T, N, dim]. Initialised uniform(-0.1, 0.1), the PTB language models' init_range.
class Embedding final : public Layer {
 public:
  Embedding(std::string name, std::int64_t vocab, std::int64_t dim)
      : Layer(std::move(name)), vocab_(vocab), dim_(dim) {}
  std::string Kind() const override { return "Embedding"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  std::int64_t vocab_, dim_;
  Shape ids_, flat_y_;
  std::unique_ptr<EmbeddingOp> op_;
};

// One LSTM layer over the sequence, [T, N, In] -> [T, N, hidden], from zero state each
// mini-batch; parameters weight_ih [4H, In], weight_hh [4H, H], bias [4H] (gate order i, f, g, o;
// one bias, see ops.h), initialised uniform(-1/sqrt(H), 1/sqrt(H)) as PyTorch does. Stack
// layers for a multi-layer LSTM: each layer's gradients are final, and handed to the exchange,
// as soon as its own backward is done.
class Lstm final : public Layer {
 public:
  Lstm(std::string name, std::int64_t hidden) : Layer(std::move(name)), hidden_(hidden) {}
  std::string Kind() const override { return "LSTM"; }
  StatusOr<Shape> Setup(Backend& backend, std::span<const Shape> inputs) override;
  Status InitParameters(Backend& backend, std::mt19937_64& rng) override;
  Status Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) override;
  Status Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                  std::span<Tensor* const> dinputs) override;

 private:
  std::int64_t hidden_;
  std::unique_ptr<LstmOp> op_;
};

}  // namespace phub::worker
