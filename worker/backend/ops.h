// The operations a backend provides, one interface per op. A layer (worker/nn/) holds its
// parameters and asks its Backend for the op objects it needs, once, for its shapes; the op
// object keeps whatever the library wants to keep per shape (oneDNN primitives, cuDNN
// descriptors and the autotuned algorithm, workspaces). Same ops for oneDNN and cuDNN: a model
// is built once and runs on either.
//
// Conventions (the float64 reference in tests/reference/nn_reference.h follows them exactly):
// - Images are [N, C, H, W]; weights of a convolution [Cout, Cin, KH, KW]; a Linear layer's
//   weights [Out, In] (y = x W^T + b), x is [N, In] (trailing dims flattened by the caller).
// - Backward ops take dy and write dx (when asked: dx may be null for the first layer) and
//   OVERWRITE the parameter gradients (accumulation across layers is the model's job).
// - Every tensor is on the backend's device; specs are checked once when the op is made
//   (Validate below), the tensors of each call by the op (ops_checks.h, shared by the backends).
// Errors: every call returns a Status, never throws. A spec that cannot be made, or a tensor of
// the wrong shape or device, is InvalidArgument naming the op, the argument and what it should
// be; the library's own failures keep the library's meaning (ResourceExhausted out of memory,
// Internal for a failed kernel, ...). A failed call leaves its outputs unspecified.
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"
#include "worker/tensor/tensor.h"

namespace phub::worker {

struct Conv2dSpec {
  std::int64_t batch = 1, in_channels = 1, height = 1, width = 1;
  std::int64_t out_channels = 1, kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool bias = true;
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

class Conv2dOp {
 public:
  virtual ~Conv2dOp() = default;
  // x [N,Cin,H,W], w [Cout,Cin,KH,KW], b [Cout] (ignored without bias) -> y [N,Cout,OH,OW].
  virtual Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dx (if non-null), dw, db (if bias).
  virtual Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                          Tensor& dw, Tensor& db) = 0;
};

struct LinearSpec {
  std::int64_t batch = 1, in_features = 1, out_features = 1;
  bool bias = true;
};

class LinearOp {
 public:
  virtual ~LinearOp() = default;
  // x [N,In], w [Out,In], b [Out] -> y [N,Out].
  virtual Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                          Tensor& dw, Tensor& db) = 0;
};

// Batch normalisation over N, H, W per channel (x [N,C,H,W], or [N,C] with height = width = 1).
// Training: normalises with the batch's mean and biased variance, saves them for backward and
// updates running stats as PyTorch does (running = (1-m) running + m batch, the running variance
// with the unbiased batch variance). Inference: normalises with the running stats.
struct BatchNormSpec {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  float eps = 1e-5f;
  float momentum = 0.1f;
};

class BatchNormOp {
 public:
  virtual ~BatchNormOp() = default;
  // gamma, beta, running_mean, running_var: [C]. Training also fills save_mean and
  // save_var ([C], the batch's mean and biased variance) and updates the running stats.
  virtual Status ForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& y, Tensor& save_mean, Tensor& save_var,
                                 Tensor& running_mean, Tensor& running_var) = 0;
  virtual Status ForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  Tensor& y) = 0;
  // After ForwardTraining with the same x: dx, dgamma, dbeta.
  virtual Status Backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                          const Tensor& save_var, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                          Tensor& dbeta) = 0;
};

// Elementwise activation on any shape; y may be x (in place). Backward uses y, not x:
// ReLU dx = dy * (y > 0), sigmoid dx = dy * y * (1 - y); dx may be dy (in place).
enum class ActivationKind { kRelu, kSigmoid };

class ActivationOp {
 public:
  virtual ~ActivationOp() = default;
  virtual Status Forward(const Tensor& x, Tensor& y) = 0;
  virtual Status Backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

enum class PoolKind { kMax, kAverage };

// Average pooling divides by the window's elements inside the image (padding excluded).
// Max pooling sends each window's gradient to its first maximum.
struct PoolSpec {
  PoolKind kind = PoolKind::kMax;
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
};

class PoolOp {
 public:
  virtual ~PoolOp() = default;
  virtual Status Forward(const Tensor& x, Tensor& y) = 0;
  // After Forward with the same x (max pooling keeps the argmax from it).
  virtual Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

// Across-channel local response normalisation as in AlexNet and PyTorch's LocalResponseNorm:
// y = x / (k + alpha/size * sum over the `size` channels centred on c of x^2)^beta.
struct LrnSpec {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  std::int64_t size = 5;
  float alpha = 1e-4f, beta = 0.75f, k = 2.0f;
};

class LrnOp {
 public:
  virtual ~LrnOp() = default;
  virtual Status Forward(const Tensor& x, Tensor& y) = 0;
  virtual Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

// Softmax over the last dimension of logits [N, K] with cross-entropy against class labels;
// the loss is the batch mean. Labels are a host tensor of N class indices stored as floats
// (exact up to 2^24 classes), so the Tensor type stays one.
struct SoftmaxCrossEntropySpec {
  std::int64_t batch = 1, classes = 1;
};

class SoftmaxCrossEntropyOp {
 public:
  virtual ~SoftmaxCrossEntropyOp() = default;
  // Returns the mean loss; keeps the probabilities for Backward. InvalidArgument naming a label
  // that is not a class index in [0, classes).
  virtual StatusOr<double> Forward(const Tensor& logits, const Tensor& labels) = 0;
  // dlogits = (softmax - onehot(labels)) / N.
  virtual Status Backward(const Tensor& labels, Tensor& dlogits) = 0;
};

// Inverted dropout: in training each element is kept with probability 1 - p and scaled by
// 1/(1 - p), else zeroed; Backward applies the same mask to dy. The mask is drawn from `seed`
// (the layer passes a new one each step), so runs are reproducible. Inference is a copy.
class DropoutOp {
 public:
  virtual ~DropoutOp() = default;
  virtual Status Forward(const Tensor& x, Tensor& y, std::uint64_t seed) = 0;
  virtual Status Backward(const Tensor& dy, Tensor& dx) = 0;
};

// The parameter-free shortcut of CIFAR ResNets (He et al. 2016, option A): x subsampled by
// `stride` (every stride-th row and column from the first, as x[:, :, ::s, ::s]) and padded
// with zero channels, (out - in) / 2 before and the rest after.
struct ShortcutSpec {
  std::int64_t batch = 1, in_channels = 1, height = 1, width = 1;
  std::int64_t out_channels = 1, stride = 1;
  std::int64_t out_height() const { return (height + stride - 1) / stride; }
  std::int64_t out_width() const { return (width + stride - 1) / stride; }
  std::int64_t pad_front() const { return (out_channels - in_channels) / 2; }
};

class ShortcutOp {
 public:
  virtual ~ShortcutOp() = default;
  virtual Status Forward(const Tensor& x, Tensor& y) = 0;
  virtual Status Backward(const Tensor& dy, Tensor& dx) = 0;
};

// One unidirectional LSTM layer over a whole sequence, PyTorch's nn.LSTM equations with gate
// order i, f, g, o (as oneDNN and cuDNN order them too) and ONE bias per gate (oneDNN has one;
// PyTorch's b_ih + b_hh is the same function with a redundant parameter). Every sequence starts
// from zero state (h0 = c0 = 0), so a mini-batch is self-contained.
//   x [T, N, I], w_ih [4H, I], w_hh [4H, H], bias [4H] (rows in gate blocks) -> y [T, N, H].
// Stacked layers are stacked ops (input size may differ from the hidden size in the first).
struct LstmSpec {
  std::int64_t seq_len = 1, batch = 1, input_size = 1, hidden_size = 1;
};

class LstmOp {
 public:
  virtual ~LstmOp() = default;
  // training keeps what Backward needs (the library's workspace).
  virtual Status Forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                         const Tensor& bias, Tensor& y, bool training) = 0;
  // After Forward(training) with the same x and weights: dx (if non-null), dw_ih, dw_hh, dbias.
  virtual Status Backward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                          const Tensor& bias, const Tensor& y, const Tensor& dy, Tensor* dx,
                          Tensor& dw_ih, Tensor& dw_hh, Tensor& dbias) = 0;
};

// A lookup table: ids [count] (token indices stored as floats, on the device like every
// input) pick rows of table [vocab, dim] -> y [count, dim]. Backward writes the dense table
// gradient (zero, then each dy row added to its id's row): the PS exchanges it as any tensor.
// An id outside [0, vocab) is InvalidArgument naming it and its position (checked on the host
// side before anything is written).
struct EmbeddingSpec {
  std::int64_t count = 1, vocab = 1, dim = 1;
};

class EmbeddingOp {
 public:
  virtual ~EmbeddingOp() = default;
  virtual Status Forward(const Tensor& ids, const Tensor& table, Tensor& y) = 0;
  virtual Status Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) = 0;
};

// InvalidArgument naming the bad field and its value (non-positive sizes, a kernel larger than
// the padded input, negative padding, padding >= kernel, an even LRN size...).
Status Validate(const Conv2dSpec& spec);
Status Validate(const LinearSpec& spec);
Status Validate(const BatchNormSpec& spec);
Status Validate(const PoolSpec& spec);
Status Validate(const LrnSpec& spec);
Status Validate(const SoftmaxCrossEntropySpec& spec);
Status Validate(const ShortcutSpec& spec);
Status Validate(const LstmSpec& spec);
Status Validate(const EmbeddingSpec& spec);
// The elementwise ops' (activation, dropout): a non-empty shape, and p in [0, 1) for dropout.
Status ValidateActivation(const Shape& shape);
Status ValidateDropout(const Shape& shape, float p);

}  // namespace phub::worker
