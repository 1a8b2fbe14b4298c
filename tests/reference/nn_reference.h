// An independent reference of the neural-network ops in worker/backend/ops.h: naive loops over
// plain vectors, written from the formulas (not from any backend), meant to be run with
// T = double so that the float32 backends (oneDNN, cuDNN) are checked against something with far
// less rounding than themselves. Follows ops.h's conventions exactly:
// - images NCHW, conv weights [Cout, Cin, KH, KW], Linear weights [Out, In] (y = x W^T + b);
// - padding is zero for convolutions; pooling ignores it (max: padding never wins, average:
//   divides by the window's elements inside the image, i.e. PyTorch's count_include_pad=False);
// - LRN as PyTorch's LocalResponseNorm (see LrnForward for the window);
// - BatchNorm normalises with the biased batch variance and updates the running variance with
//   the unbiased one, as PyTorch;
// - softmax cross-entropy is the batch mean.
// The float fields of the specs (eps, momentum, alpha, beta, k) are used at their float value
// converted to T, so a float32 backend and this reference use the same constant.
// Sizes are checked and std::invalid_argument thrown: a wrong size here is a bug in the test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/backend/ops.h"

namespace phub::reference {

namespace detail {

template <class T>
void CheckSize(const std::vector<T>& v, std::int64_t expected, const char* what) {
  if (static_cast<std::int64_t>(v.size()) != expected) {
    throw std::invalid_argument(std::string(what) + ": size " + std::to_string(v.size()) +
                                ", expected " + std::to_string(expected));
  }
}

inline std::size_t Idx(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace detail

// x [N,Cin,H,W], w [Cout,Cin,KH,KW], b [Cout] (not read when !s.bias) -> y [N,Cout,OH,OW].
// Cross-correlation (no kernel flip), as every DL library calls "convolution".
template <class T>
std::vector<T> Conv2dForward(const phub::worker::Conv2dSpec& s, const std::vector<T>& x,
                             const std::vector<T>& w, const std::vector<T>& b) {
  const std::int64_t oh_n = s.out_height(), ow_n = s.out_width();
  detail::CheckSize(x, s.batch * s.in_channels * s.height * s.width, "Conv2dForward x");
  detail::CheckSize(w, s.out_channels * s.in_channels * s.kernel_h * s.kernel_w,
                    "Conv2dForward w");
  if (s.bias) detail::CheckSize(b, s.out_channels, "Conv2dForward b");
  std::vector<T> y(detail::Idx(s.batch * s.out_channels * oh_n * ow_n));
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t co = 0; co < s.out_channels; ++co) {
      for (std::int64_t oh = 0; oh < oh_n; ++oh) {
        for (std::int64_t ow = 0; ow < ow_n; ++ow) {
          T acc = s.bias ? b[detail::Idx(co)] : T(0);
          for (std::int64_t ci = 0; ci < s.in_channels; ++ci) {
            for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
              if (ih < 0 || ih >= s.height) continue;  // zero padding contributes nothing
              for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (iw < 0 || iw >= s.width) continue;
                acc += x[detail::Idx(((n * s.in_channels + ci) * s.height + ih) * s.width + iw)] *
                       w[detail::Idx(((co * s.in_channels + ci) * s.kernel_h + kh) * s.kernel_w +
                                     kw)];
              }
            }
          }
          y[detail::Idx(((n * s.out_channels + co) * oh_n + oh) * ow_n + ow)] = acc;
        }
      }
    }
  }
  return y;
}

// x [N,In], w [Out,In], b [Out] (not read when !s.bias) -> y [N,Out] = x W^T + b.
template <class T>
std::vector<T> LinearForward(const phub::worker::LinearSpec& s, const std::vector<T>& x,
                             const std::vector<T>& w, const std::vector<T>& b) {
  detail::CheckSize(x, s.batch * s.in_features, "LinearForward x");
  detail::CheckSize(w, s.out_features * s.in_features, "LinearForward w");
  if (s.bias) detail::CheckSize(b, s.out_features, "LinearForward b");
  std::vector<T> y(detail::Idx(s.batch * s.out_features));
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t o = 0; o < s.out_features; ++o) {
      T acc = s.bias ? b[detail::Idx(o)] : T(0);
      for (std::int64_t i = 0; i < s.in_features; ++i) {
        acc += x[detail::Idx(n * s.in_features + i)] * w[detail::Idx(o * s.in_features + i)];
      }
      y[detail::Idx(n * s.out_features + o)] = acc;
    }
  }
  return y;
}

// Per channel over N, H, W: y = gamma (x - mean) / sqrt(var + eps) + beta with the batch mean and
// BIASED variance (divide by M = N*H*W), which is what is normalised with in training in PyTorch,
// oneDNN and cuDNN. mean_out / var_out (if given) receive them: ops.h's save_mean / save_var.
template <class T>
std::vector<T> BatchNormTrainingForward(const phub::worker::BatchNormSpec& s,
                                        const std::vector<T>& x, const std::vector<T>& gamma,
                                        const std::vector<T>& beta,
                                        std::vector<T>* mean_out = nullptr,
                                        std::vector<T>* var_out = nullptr) {
  const std::int64_t hw = s.height * s.width, m = s.batch * hw;
  detail::CheckSize(x, m * s.channels, "BatchNormTrainingForward x");
  detail::CheckSize(gamma, s.channels, "BatchNormTrainingForward gamma");
  detail::CheckSize(beta, s.channels, "BatchNormTrainingForward beta");
  const T eps = static_cast<T>(s.eps);
  std::vector<T> y(x.size()), mean(detail::Idx(s.channels)), var(detail::Idx(s.channels));
  auto at = [&](std::int64_t n, std::int64_t c, std::int64_t i) {
    return detail::Idx((n * s.channels + c) * hw + i);
  };
  for (std::int64_t c = 0; c < s.channels; ++c) {
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, whose cancellation
    // would make the reference less accurate than what it checks.
    T sum = 0;
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t i = 0; i < hw; ++i) sum += x[at(n, c, i)];
    const T mu = sum / static_cast<T>(m);
    T sq = 0;
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t i = 0; i < hw; ++i) sq += (x[at(n, c, i)] - mu) * (x[at(n, c, i)] - mu);
    const T v = sq / static_cast<T>(m);
    const T inv_std = T(1) / std::sqrt(v + eps);
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t i = 0; i < hw; ++i)
        y[at(n, c, i)] = gamma[detail::Idx(c)] * (x[at(n, c, i)] - mu) * inv_std +
                         beta[detail::Idx(c)];
    mean[detail::Idx(c)] = mu;
    var[detail::Idx(c)] = v;
  }
  if (mean_out) *mean_out = std::move(mean);
  if (var_out) *var_out = std::move(var);
  return y;
}

// y = gamma (x - running_mean) / sqrt(running_var + eps) + beta, per channel.
template <class T>
std::vector<T> BatchNormInferenceForward(const phub::worker::BatchNormSpec& s,
                                         const std::vector<T>& x, const std::vector<T>& gamma,
                                         const std::vector<T>& beta,
                                         const std::vector<T>& running_mean,
                                         const std::vector<T>& running_var) {
  const std::int64_t hw = s.height * s.width;
  detail::CheckSize(x, s.batch * s.channels * hw, "BatchNormInferenceForward x");
  detail::CheckSize(gamma, s.channels, "BatchNormInferenceForward gamma");
  detail::CheckSize(beta, s.channels, "BatchNormInferenceForward beta");
  detail::CheckSize(running_mean, s.channels, "BatchNormInferenceForward running_mean");
  detail::CheckSize(running_var, s.channels, "BatchNormInferenceForward running_var");
  const T eps = static_cast<T>(s.eps);
  std::vector<T> y(x.size());
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const std::size_t ci = detail::Idx(c);
      const T inv_std = T(1) / std::sqrt(running_var[ci] + eps);
      for (std::int64_t i = 0; i < hw; ++i) {
        const std::size_t k = detail::Idx((n * s.channels + c) * hw + i);
        y[k] = gamma[ci] * (x[k] - running_mean[ci]) * inv_std + beta[ci];
      }
    }
  }
  return y;
}

// PyTorch's update: running = (1 - momentum) running + momentum batch, where the variance fed in
// is the UNBIASED one, biased * M / (M - 1) with M = N*H*W. M = 1 has no unbiased variance
// (PyTorch refuses to train BatchNorm on one value per channel), so it throws here too.
template <class T>
void BatchNormRunningUpdate(const phub::worker::BatchNormSpec& s, const std::vector<T>& batch_mean,
                            const std::vector<T>& batch_biased_var, std::vector<T>& running_mean,
                            std::vector<T>& running_var) {
  detail::CheckSize(batch_mean, s.channels, "BatchNormRunningUpdate batch_mean");
  detail::CheckSize(batch_biased_var, s.channels, "BatchNormRunningUpdate batch_biased_var");
  detail::CheckSize(running_mean, s.channels, "BatchNormRunningUpdate running_mean");
  detail::CheckSize(running_var, s.channels, "BatchNormRunningUpdate running_var");
  const std::int64_t m = s.batch * s.height * s.width;
  if (m < 2) throw std::invalid_argument("BatchNormRunningUpdate: needs N*H*W >= 2");
  const T mom = static_cast<T>(s.momentum);
  const T bessel = static_cast<T>(m) / static_cast<T>(m - 1);
  for (std::size_t c = 0; c < running_mean.size(); ++c) {
    running_mean[c] = (T(1) - mom) * running_mean[c] + mom * batch_mean[c];
    running_var[c] = (T(1) - mom) * running_var[c] + mom * batch_biased_var[c] * bessel;
  }
}

// max(x, 0) elementwise. Written as "x < 0 ? 0 : x" so that a NaN stays NaN (as in PyTorch and
// oneDNN) instead of silently becoming 0.
template <class T>
std::vector<T> SigmoidForward(const std::vector<T>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = T(1) / (T(1) + std::exp(-x[i]));
  return y;
}

template <class T>
std::vector<T> ReluForward(const std::vector<T>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
  return y;
}

// x [N,C,H,W] -> y [N,C,OH,OW]. Only elements inside the image take part: max ignores padding
// (an all-negative border window gives its largest element, not 0), average divides by the count
// of in-image elements. Requires pad < kernel, so that every window holds at least one element
// (PyTorch is stricter still: pad <= kernel / 2).
template <class T>
std::vector<T> PoolForward(const phub::worker::PoolSpec& s, const std::vector<T>& x) {
  detail::CheckSize(x, s.batch * s.channels * s.height * s.width, "PoolForward x");
  if (s.pad_h >= s.kernel_h || s.pad_w >= s.kernel_w) {
    throw std::invalid_argument("PoolForward: padding must be smaller than the kernel");
  }
  const std::int64_t oh_n = s.out_height(), ow_n = s.out_width();
  std::vector<T> y(detail::Idx(s.batch * s.channels * oh_n * ow_n));
  for (std::int64_t nc = 0; nc < s.batch * s.channels; ++nc) {
    const T* plane = x.data() + nc * s.height * s.width;
    for (std::int64_t oh = 0; oh < oh_n; ++oh) {
      for (std::int64_t ow = 0; ow < ow_n; ++ow) {
        // Clip the window to the image; only the clipped part takes part.
        const std::int64_t h0 = std::max<std::int64_t>(oh * s.stride_h - s.pad_h, 0);
        const std::int64_t h1 = std::min(oh * s.stride_h - s.pad_h + s.kernel_h, s.height);
        const std::int64_t w0 = std::max<std::int64_t>(ow * s.stride_w - s.pad_w, 0);
        const std::int64_t w1 = std::min(ow * s.stride_w - s.pad_w + s.kernel_w, s.width);
        T acc = s.kind == phub::worker::PoolKind::kMax ? -std::numeric_limits<T>::infinity()
                                                       : T(0);
        for (std::int64_t ih = h0; ih < h1; ++ih) {
          for (std::int64_t iw = w0; iw < w1; ++iw) {
            const T v = plane[ih * s.width + iw];
            if (s.kind == phub::worker::PoolKind::kMax) {
              // Strict ">" keeps the first maximum in row-major window order, the element ops.h
              // sends the gradient to.
              if (v > acc) acc = v;
            } else {
              acc += v;
            }
          }
        }
        if (s.kind == phub::worker::PoolKind::kAverage) {
          acc /= static_cast<T>((h1 - h0) * (w1 - w0));
        }
        y[detail::Idx((nc * oh_n + oh) * ow_n + ow)] = acc;
      }
    }
  }
  return y;
}

// y = x / (k + alpha / size * sum_{c'} x[c']^2)^beta, across channels at each (n, h, w).
// The window matches PyTorch's torch.nn.functional.local_response_norm (checked in its source,
// torch 1.13: it zero-pads the squared input with size // 2 channels BEFORE and (size - 1) // 2
// AFTER, then average-pools `size` channels), so channel c sums channels
//   c - size/2 .. c + (size-1)/2   (integer division, clipped to [0, C)),
// and the divisor stays `size` even where the window is clipped. For odd size that is centred;
// for even size the window reaches one channel further BEFORE c than after it.
template <class T>
std::vector<T> LrnForward(const phub::worker::LrnSpec& s, const std::vector<T>& x) {
  detail::CheckSize(x, s.batch * s.channels * s.height * s.width, "LrnForward x");
  const std::int64_t hw = s.height * s.width;
  const T alpha = static_cast<T>(s.alpha), beta = static_cast<T>(s.beta), k = static_cast<T>(s.k);
  std::vector<T> y(x.size());
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const std::int64_t c0 = std::max<std::int64_t>(c - s.size / 2, 0);
      const std::int64_t c1 = std::min(c + (s.size - 1) / 2, s.channels - 1);
      for (std::int64_t i = 0; i < hw; ++i) {
        T sum = 0;
        for (std::int64_t cc = c0; cc <= c1; ++cc) {
          const T v = x[detail::Idx((n * s.channels + cc) * hw + i)];
          sum += v * v;
        }
        const std::size_t at = detail::Idx((n * s.channels + c) * hw + i);
        y[at] = x[at] / std::pow(k + alpha / static_cast<T>(s.size) * sum, beta);
      }
    }
  }
  return y;
}

// logits [N,K], labels [N] (class indices stored as T, checked to be integers in [0, K)):
// mean over the batch of logsumexp(logits_n) - logits_n[label_n]. The log-sum-exp subtracts the
// row's maximum first, so large logits do not overflow.
// Option-A shortcut, written as its definition: output channel c holds input channel
// c - pad_front subsampled as x[:, :, ::stride, ::stride], or zeros.
template <class T>
std::vector<T> ShortcutForward(const phub::worker::ShortcutSpec& s, const std::vector<T>& x) {
  detail::CheckSize(x, s.batch * s.in_channels * s.height * s.width, "ShortcutForward x");
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::vector<T> y(detail::Idx(s.batch * s.out_channels * oh * ow), T(0));
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t c = 0; c < s.out_channels; ++c) {
      const std::int64_t src = c - s.pad_front();
      if (src < 0 || src >= s.in_channels) continue;
      for (std::int64_t h = 0; h < oh; ++h)
        for (std::int64_t w = 0; w < ow; ++w)
          y[detail::Idx(((n * s.out_channels + c) * oh + h) * ow + w)] =
              x[detail::Idx(((n * s.in_channels + src) * s.height + h * s.stride) * s.width +
                            w * s.stride)];
    }
  return y;
}

template <class T>
T SoftmaxCrossEntropyForward(const phub::worker::SoftmaxCrossEntropySpec& s,
                             const std::vector<T>& logits, const std::vector<T>& labels) {
  detail::CheckSize(logits, s.batch * s.classes, "SoftmaxCrossEntropyForward logits");
  detail::CheckSize(labels, s.batch, "SoftmaxCrossEntropyForward labels");
  T total = 0;
  for (std::int64_t n = 0; n < s.batch; ++n) {
    const T label = labels[detail::Idx(n)];
    if (!(label >= T(0) && label < static_cast<T>(s.classes)) || std::floor(label) != label) {
      throw std::invalid_argument("SoftmaxCrossEntropyForward: label " + std::to_string(label) +
                                  " is not a class index");
    }
    const T* row = logits.data() + n * s.classes;
    const T mx = *std::max_element(row, row + s.classes);
    T sum = 0;
    for (std::int64_t j = 0; j < s.classes; ++j) sum += std::exp(row[j] - mx);
    total += mx + std::log(sum) - row[static_cast<std::int64_t>(label)];
  }
  return total / static_cast<T>(s.batch);
}

// One LSTM layer from zero state, PyTorch's equations with one bias b (= b_ih + b_hh):
//   gates = W_ih x_t + W_hh h_{t-1} + b, split into i, f, g, o blocks of H rows;
//   c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g);  h_t = sigmoid(o) tanh(c_t).
// x [T,N,I], w_ih [4H,I], w_hh [4H,H], b [4H] -> y [T,N,H] (the h_t).
template <class T>
std::vector<T> LstmForward(const phub::worker::LstmSpec& s, const std::vector<T>& x,
                           const std::vector<T>& w_ih, const std::vector<T>& w_hh,
                           const std::vector<T>& b) {
  const std::int64_t H = s.hidden_size, I = s.input_size, N = s.batch;
  detail::CheckSize(x, s.seq_len * N * I, "LstmForward x");
  detail::CheckSize(w_ih, 4 * H * I, "LstmForward w_ih");
  detail::CheckSize(w_hh, 4 * H * H, "LstmForward w_hh");
  detail::CheckSize(b, 4 * H, "LstmForward b");
  auto sigmoid = [](T v) { return T(1) / (T(1) + std::exp(-v)); };
  std::vector<T> h(detail::Idx(N * H), T(0)), c(detail::Idx(N * H), T(0));
  std::vector<T> y(detail::Idx(s.seq_len * N * H)), gates(detail::Idx(4 * H));
  for (std::int64_t t = 0; t < s.seq_len; ++t) {
    std::vector<T> h_next(h.size());
    for (std::int64_t n = 0; n < N; ++n) {
      const T* xt = x.data() + (t * N + n) * I;
      for (std::int64_t r = 0; r < 4 * H; ++r) {
        T acc = b[detail::Idx(r)];
        for (std::int64_t k = 0; k < I; ++k) acc += w_ih[detail::Idx(r * I + k)] * xt[k];
        for (std::int64_t k = 0; k < H; ++k) acc += w_hh[detail::Idx(r * H + k)] * h[detail::Idx(n * H + k)];
        gates[detail::Idx(r)] = acc;
      }
      for (std::int64_t j = 0; j < H; ++j) {
        const std::size_t k = detail::Idx(n * H + j);
        const T i_g = sigmoid(gates[detail::Idx(j)]), f_g = sigmoid(gates[detail::Idx(H + j)]);
        const T g_g = std::tanh(gates[detail::Idx(2 * H + j)]);
        const T o_g = sigmoid(gates[detail::Idx(3 * H + j)]);
        c[k] = f_g * c[k] + i_g * g_g;
        h_next[k] = o_g * std::tanh(c[k]);
        y[detail::Idx((t * N + n) * H + j)] = h_next[k];
      }
    }
    h = h_next;
  }
  return y;
}

// ids [count] (whole numbers in [0, vocab)) pick rows of table [vocab, dim] -> y [count, dim].
template <class T>
std::vector<T> EmbeddingForward(const phub::worker::EmbeddingSpec& s, const std::vector<T>& ids,
                                const std::vector<T>& table) {
  detail::CheckSize(ids, s.count, "EmbeddingForward ids");
  detail::CheckSize(table, s.vocab * s.dim, "EmbeddingForward table");
  std::vector<T> y;
  y.reserve(detail::Idx(s.count * s.dim));
  for (const T id : ids) {
    if (!(id >= T(0) && id < static_cast<T>(s.vocab)) || std::floor(id) != id) {
      throw std::invalid_argument("EmbeddingForward: id " + std::to_string(id) +
                                  " is not a row of the table");
    }
    const auto row = table.begin() + static_cast<std::ptrdiff_t>(id) * s.dim;
    y.insert(y.end(), row, row + s.dim);
  }
  return y;
}

}  // namespace phub::reference
