// Every oneDNN op against the float64 reference (tests/reference/nn_reference.h): forward on
// random inputs vs the naive loop, backward vs central finite differences of the reference
// forward, for f = sum(y * r) with a random r (so dy = r).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tests/reference/finite_difference.h"
#include "tests/reference/nn_reference.h"
#include "tests/worker/status_testing.h"
#include "worker/backend/onednn/onednn_backend.h"

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

using reference::CentralDifferenceGradient;
using reference::GradientsNear;
using Vec = std::vector<double>;

// Random values rounded to float, so the float32 op and the float64 reference see the same.
Vec RandomFloats(std::int64_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  Vec v = reference::RandomVector(static_cast<std::size_t>(n), seed, lo, hi);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

Tensor ToTensor(const Vec& v, const Shape& shape) {
  Tensor t = Tensor::Empty(shape);
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = static_cast<float>(v[i]);
  return t;
}

Vec ToVec(const Tensor& t) { return Vec(t.data(), t.data() + t.numel()); }

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d/d(arg) of sum(forward(arg) * r), numerically.
Vec NumericGrad(const std::function<Vec(const Vec&)>& forward, const Vec& arg, const Vec& r) {
  return CentralDifferenceGradient([&](const Vec& a) { return Dot(forward(a), r); }, arg);
}

::testing::AssertionResult ForwardNear(const Tensor& y, const Vec& expected) {
  return GradientsNear(y.span(), expected, 1e-5, 1e-4);
}

// float32 backward sums many products: looser than the forward.
::testing::AssertionResult BackwardNear(const Tensor& g, const Vec& numeric) {
  return GradientsNear(g.span(), numeric, 1e-4, 1e-3);
}

class OnednnOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = testing::ValueOrDie(MakeOnednnBackend());
};

TEST_F(OnednnOpsTest, DescribesItself) {
  EXPECT_THAT(backend_->Describe(), ::testing::StartsWith("oneDNN 2."));
  EXPECT_EQ(backend_->device(), Device::kCpu);
}

struct ConvCase {
  Conv2dSpec spec;
  const char* name;
};

class Conv2dTest : public OnednnOpsTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(Conv2dTest, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const Conv2dSpec s = GetParam().spec;
  const Shape xs{s.batch, s.in_channels, s.height, s.width};
  const Shape ws{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  const Shape ys{s.batch, s.out_channels, s.out_height(), s.out_width()};
  const Vec x = RandomFloats(xs.numel(), 1), w = RandomFloats(ws.numel(), 2),
            b = RandomFloats(s.out_channels, 3), r = RandomFloats(ys.numel(), 4);
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeConv2d(s));
  Tensor xt = ToTensor(x, xs), wt = ToTensor(w, ws), bt = ToTensor(b, {s.out_channels});
  Tensor y = Tensor::Empty(ys);
  PHUB_ASSERT_OK(op->Forward(xt, wt, bt, y));
  EXPECT_TRUE(ForwardNear(y, reference::Conv2dForward(s, x, w, b)));

  Tensor dy = ToTensor(r, ys), dx = Tensor::Empty(xs), dw = Tensor::Empty(ws),
         db = Tensor::Empty({s.out_channels});
  PHUB_ASSERT_OK(op->Backward(xt, wt, dy, &dx, dw, db));
  EXPECT_TRUE(BackwardNear(
      dx, NumericGrad([&](const Vec& v) { return reference::Conv2dForward(s, v, w, b); }, x, r)));
  EXPECT_TRUE(BackwardNear(
      dw, NumericGrad([&](const Vec& v) { return reference::Conv2dForward(s, x, v, b); }, w, r)));
  if (s.bias) {
    EXPECT_TRUE(BackwardNear(
        db, NumericGrad([&](const Vec& v) { return reference::Conv2dForward(s, x, w, v); }, b,
                        r)));
  }
  // Without dx (a first layer): the weight gradient is the same.
  Tensor dw2 = Tensor::Empty(ws);
  PHUB_ASSERT_OK(op->Backward(xt, wt, dy, nullptr, dw2, db));
  EXPECT_TRUE(GradientsNear(dw2.span(), ToVec(dw), 0, 0));
}

Conv2dSpec Conv(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad,
                bool bias) {
  Conv2dSpec s;
  s.batch = n, s.in_channels = c, s.height = h, s.width = w, s.out_channels = k;
  s.kernel_h = kh, s.kernel_w = kw, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
  s.bias = bias;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dTest,
    ::testing::Values(ConvCase{Conv(2, 3, 7, 7, 4, 3, 3, 1, 1, true), "same3x3"},
                      ConvCase{Conv(1, 2, 8, 6, 3, 3, 3, 2, 1, true), "stride2"},
                      ConvCase{Conv(2, 3, 5, 5, 2, 1, 1, 1, 0, false), "pointwise_no_bias"},
                      ConvCase{Conv(1, 2, 9, 9, 3, 5, 3, 2, 2, true), "rect_kernel_pad2"},
                      ConvCase{Conv(1, 1, 5, 5, 2, 2, 2, 2, 0, true), "floor_drops_last_row"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(OnednnOpsTest, LinearForwardAndBackward) {
  for (bool bias : {true, false}) {
    LinearSpec s{.batch = 3, .in_features = 7, .out_features = 5, .bias = bias};
    const Vec x = RandomFloats(21, 5), w = RandomFloats(35, 6), b = RandomFloats(5, 7),
              r = RandomFloats(15, 8);
    PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeLinear(s));
    Tensor xt = ToTensor(x, {3, 7}), wt = ToTensor(w, {5, 7}), bt = ToTensor(b, {5});
    Tensor y = Tensor::Empty({3, 5});
    PHUB_ASSERT_OK(op->Forward(xt, wt, bt, y));
    EXPECT_TRUE(ForwardNear(y, reference::LinearForward(s, x, w, b))) << "bias " << bias;
    Tensor dy = ToTensor(r, {3, 5}), dx = Tensor::Empty({3, 7}), dw = Tensor::Empty({5, 7}),
           db = Tensor::Empty({5});
    PHUB_ASSERT_OK(op->Backward(xt, wt, dy, &dx, dw, db));
    EXPECT_TRUE(BackwardNear(
        dx, NumericGrad([&](const Vec& v) { return reference::LinearForward(s, v, w, b); }, x, r)));
    EXPECT_TRUE(BackwardNear(
        dw, NumericGrad([&](const Vec& v) { return reference::LinearForward(s, x, v, b); }, w, r)));
    if (bias) {
      EXPECT_TRUE(BackwardNear(
          db, NumericGrad([&](const Vec& v) { return reference::LinearForward(s, x, w, v); }, b,
                          r)));
    }
  }
}

TEST_F(OnednnOpsTest, BatchNormTrainingInferenceAndBackward) {
  for (auto [h, w] : {std::pair<std::int64_t, std::int64_t>{3, 4}, {1, 1}}) {
    BatchNormSpec s{.batch = 4, .channels = 3, .height = h, .width = w};
    const Shape xs{4, 3, h, w};
    const Vec x = RandomFloats(xs.numel(), 9, -2, 3), gamma = RandomFloats(3, 10, 0.5, 1.5),
              beta = RandomFloats(3, 11), r = RandomFloats(xs.numel(), 12);
    PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeBatchNorm(s));
    Tensor xt = ToTensor(x, xs), gt = ToTensor(gamma, {3}), bt = ToTensor(beta, {3});
    Tensor y = Tensor::Empty(xs), mean = Tensor::Empty({3}), var = Tensor::Empty({3});
    Tensor run_mean = Tensor::Filled({3}, 0.5f), run_var = Tensor::Filled({3}, 2.0f);
    PHUB_ASSERT_OK(op->ForwardTraining(xt, gt, bt, y, mean, var, run_mean, run_var));
    Vec ref_mean, ref_var;
    EXPECT_TRUE(ForwardNear(
        y, reference::BatchNormTrainingForward(s, x, gamma, beta, &ref_mean, &ref_var)));
    EXPECT_TRUE(ForwardNear(mean, ref_mean));
    EXPECT_TRUE(ForwardNear(var, ref_var));
    Vec ref_run_mean(3, 0.5), ref_run_var(3, 2.0);
    reference::BatchNormRunningUpdate(s, ref_mean, ref_var, ref_run_mean, ref_run_var);
    EXPECT_TRUE(ForwardNear(run_mean, ref_run_mean));
    EXPECT_TRUE(ForwardNear(run_var, ref_run_var));

    Tensor dy = ToTensor(r, xs), dx = Tensor::Empty(xs), dg = Tensor::Empty({3}),
           dbeta = Tensor::Empty({3});
    PHUB_ASSERT_OK(op->Backward(xt, gt, mean, var, dy, dx, dg, dbeta));
    auto train = [&](const Vec& xv, const Vec& gv, const Vec& bv) {
      return reference::BatchNormTrainingForward(s, xv, gv, bv);
    };
    EXPECT_TRUE(BackwardNear(
        dx, NumericGrad([&](const Vec& v) { return train(v, gamma, beta); }, x, r)));
    EXPECT_TRUE(BackwardNear(
        dg, NumericGrad([&](const Vec& v) { return train(x, v, beta); }, gamma, r)));
    EXPECT_TRUE(BackwardNear(
        dbeta, NumericGrad([&](const Vec& v) { return train(x, gamma, v); }, beta, r)));

    Tensor yi = Tensor::Empty(xs);
    PHUB_ASSERT_OK(op->ForwardInference(xt, gt, bt, run_mean, run_var, yi));
    EXPECT_TRUE(ForwardNear(yi, reference::BatchNormInferenceForward(s, x, gamma, beta,
                                                                     ToVec(run_mean),
                                                                     ToVec(run_var))));
  }
}

TEST_F(OnednnOpsTest, ActivationsForwardInPlaceAndBackward) {
  const Shape shape{2, 3, 4, 5};
  Vec x = RandomFloats(shape.numel(), 13, -3, 3);
  for (double& v : x) v = static_cast<float>(v + (v < 0 ? -0.01 : 0.01));  // off ReLU's kink
  const Vec r = RandomFloats(shape.numel(), 14);
  for (ActivationKind kind : {ActivationKind::kRelu, ActivationKind::kSigmoid}) {
    auto reference = [kind](const Vec& v) {
      return kind == ActivationKind::kRelu ? reference::ReluForward(v)
                                           : reference::SigmoidForward(v);
    };
    PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeActivation(kind, shape));
    Tensor t = ToTensor(x, shape);
    PHUB_ASSERT_OK(op->Forward(t, t));  // in place
    EXPECT_TRUE(ForwardNear(t, reference(x)));
    Tensor dy = ToTensor(r, shape);
    PHUB_ASSERT_OK(op->Backward(t, dy, dy));  // in place
    EXPECT_TRUE(BackwardNear(dy, NumericGrad(reference, x, r)));
  }
}

TEST_F(OnednnOpsTest, PoolingMaxAndAverageWithPadding) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    for (auto [k, stride, pad] : {std::tuple<int, int, int>{2, 2, 0}, {3, 2, 1}, {3, 1, 1}}) {
      PoolSpec s{.kind = kind, .batch = 2, .channels = 3, .height = 7, .width = 6,
                 .kernel_h = k, .kernel_w = k, .stride_h = stride, .stride_w = stride,
                 .pad_h = pad, .pad_w = pad};
      const Shape xs{2, 3, 7, 6}, ys{2, 3, s.out_height(), s.out_width()};
      const Vec x = RandomFloats(xs.numel(), 15 + k), r = RandomFloats(ys.numel(), 16);
      PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakePool(s));
      Tensor xt = ToTensor(x, xs), y = Tensor::Empty(ys);
      PHUB_ASSERT_OK(op->Forward(xt, y));
      const std::string what = std::string(kind == PoolKind::kMax ? "max" : "avg") + " k" +
                               std::to_string(k) + " s" + std::to_string(stride) + " p" +
                               std::to_string(pad);
      EXPECT_TRUE(ForwardNear(y, reference::PoolForward(s, x))) << what;
      Tensor dy = ToTensor(r, ys), dx = Tensor::Empty(xs);
      PHUB_ASSERT_OK(op->Backward(xt, y, dy, dx));
      EXPECT_TRUE(BackwardNear(
          dx, NumericGrad([&](const Vec& v) { return reference::PoolForward(s, v); }, x, r)))
          << what;
    }
  }
}

TEST_F(OnednnOpsTest, LocalResponseNormForwardAndBackward) {
  LrnSpec s{.batch = 2, .channels = 7, .height = 3, .width = 2, .size = 5, .alpha = 0.5f,
            .beta = 0.75f, .k = 2.0f};  // a large alpha so the normalisation matters
  const Shape xs{2, 7, 3, 2};
  const Vec x = RandomFloats(xs.numel(), 17, -2, 2), r = RandomFloats(xs.numel(), 18);
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeLrn(s));
  Tensor xt = ToTensor(x, xs), y = Tensor::Empty(xs);
  PHUB_ASSERT_OK(op->Forward(xt, y));
  EXPECT_TRUE(ForwardNear(y, reference::LrnForward(s, x)));
  Tensor dy = ToTensor(r, xs), dx = Tensor::Empty(xs);
  PHUB_ASSERT_OK(op->Backward(xt, y, dy, dx));
  EXPECT_TRUE(BackwardNear(
      dx, NumericGrad([&](const Vec& v) { return reference::LrnForward(s, v); }, x, r)));
}

TEST_F(OnednnOpsTest, LstmForwardAndBackwardThroughTime) {
  // Input size differs from the hidden size (the first layer of a stack); T = 4 so gradients
  // flow back through several steps of the recurrence.
  LstmSpec s{.seq_len = 4, .batch = 3, .input_size = 5, .hidden_size = 6};
  const std::int64_t H = s.hidden_size, I = s.input_size;
  const Vec x = RandomFloats(4 * 3 * I, 40), w_ih = RandomFloats(4 * H * I, 41, -0.5, 0.5),
            w_hh = RandomFloats(4 * H * H, 42, -0.5, 0.5), b = RandomFloats(4 * H, 43),
            r = RandomFloats(4 * 3 * H, 44);
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeLstm(s));
  Tensor xt = ToTensor(x, {4, 3, I}), wi = ToTensor(w_ih, {4 * H, I}),
         wh = ToTensor(w_hh, {4 * H, H}), bt = ToTensor(b, {4 * H});
  Tensor y = Tensor::Empty({4, 3, H});
  PHUB_ASSERT_OK(op->Forward(xt, wi, wh, bt, y, true));
  EXPECT_TRUE(ForwardNear(y, reference::LstmForward(s, x, w_ih, w_hh, b)));
  Tensor dy = ToTensor(r, {4, 3, H}), dx = Tensor::Empty({4, 3, I});
  // Poisoned gradients: oneDNN accumulates into them, ours must overwrite.
  Tensor dwi = Tensor::Filled({4 * H, I}, 7), dwh = Tensor::Filled({4 * H, H}, 7),
         db = Tensor::Filled({4 * H}, 7);
  for (int pass = 0; pass < 2; ++pass) {  // twice: the second must not add to the first
    PHUB_ASSERT_OK(op->Backward(xt, wi, wh, bt, y, dy, &dx, dwi, dwh, db));
  }
  auto f = [&](const Vec& xv, const Vec& wiv, const Vec& whv, const Vec& bv) {
    return reference::LstmForward(s, xv, wiv, whv, bv);
  };
  EXPECT_TRUE(BackwardNear(dx, NumericGrad([&](const Vec& v) { return f(v, w_ih, w_hh, b); }, x, r)));
  EXPECT_TRUE(BackwardNear(dwi, NumericGrad([&](const Vec& v) { return f(x, v, w_hh, b); }, w_ih, r)));
  EXPECT_TRUE(BackwardNear(dwh, NumericGrad([&](const Vec& v) { return f(x, w_ih, v, b); }, w_hh, r)));
  EXPECT_TRUE(BackwardNear(db, NumericGrad([&](const Vec& v) { return f(x, w_ih, w_hh, v); }, b, r)));
  // Without dx (the layer above an embedding still wants it; a first layer may not).
  PHUB_ASSERT_OK(op->Backward(xt, wi, wh, bt, y, dy, nullptr, dwi, dwh, db));
  EXPECT_TRUE(BackwardNear(db, NumericGrad([&](const Vec& v) { return f(x, w_ih, w_hh, v); }, b, r)));
}

TEST_F(OnednnOpsTest, EmbeddingGathersRowsAndScattersGradients) {
  EmbeddingSpec s{.count = 6, .vocab = 4, .dim = 3};
  const Vec ids = {2, 0, 2, 3, 2, 1}, table = RandomFloats(12, 45), r = RandomFloats(18, 46);
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeEmbedding(s));
  Tensor it = ToTensor(ids, {6}), tt = ToTensor(table, {4, 3}), y = Tensor::Empty({6, 3});
  PHUB_ASSERT_OK(op->Forward(it, tt, y));
  EXPECT_TRUE(ForwardNear(y, reference::EmbeddingForward(s, ids, table)));
  Tensor dy = ToTensor(r, {6, 3}), dt = Tensor::Filled({4, 3}, 7);
  PHUB_ASSERT_OK(op->Backward(it, dy, dt));
  EXPECT_TRUE(BackwardNear(
      dt, NumericGrad([&](const Vec& v) { return reference::EmbeddingForward(s, ids, v); }, table,
                      r)));
  // A bad id is refused, naming it, before anything is written.
  Tensor bad = ToTensor({2, 0, 4, 3, 2, 1}, {6});
  Tensor y_before = y.Clone();
  EXPECT_THAT(op->Forward(bad, tt, y),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 4 at position 2")));
  EXPECT_EQ(ToVec(y), ToVec(y_before));
}

TEST_F(OnednnOpsTest, SoftmaxCrossEntropyLossAndGradient) {
  SoftmaxCrossEntropySpec s{.batch = 4, .classes = 10};
  const Vec logits = RandomFloats(40, 19, -3, 3);
  const Vec labels = {3, 0, 9, 3};
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeSoftmaxCrossEntropy(s));
  Tensor lt = ToTensor(logits, {4, 10}), lab = ToTensor(labels, {4});
  PHUB_ASSERT_OK_AND_ASSIGN(const double loss, op->Forward(lt, lab));
  EXPECT_NEAR(loss, reference::SoftmaxCrossEntropyForward(s, logits, labels), 1e-5);
  Tensor d = Tensor::Empty({4, 10});
  PHUB_ASSERT_OK(op->Backward(lab, d));
  const Vec numeric = CentralDifferenceGradient(
      [&](const Vec& v) { return reference::SoftmaxCrossEntropyForward(s, v, labels); }, logits);
  EXPECT_TRUE(BackwardNear(d, numeric));
}

TEST_F(OnednnOpsTest, DropoutKeepsAboutOneMinusPScaledAndBackwardUsesTheSameMask) {
  const Shape shape{4, 1000};
  const float p = 0.3f;
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeDropout(shape, p));
  const Vec x = RandomFloats(shape.numel(), 22, 0.5, 1.5);  // never 0: a zero means dropped
  Tensor xt = ToTensor(x, shape), y = Tensor::Empty(shape);
  PHUB_ASSERT_OK(op->Forward(xt, y, 7));
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    if (y.data()[i] != 0) {
      ++kept;
      EXPECT_FLOAT_EQ(y.data()[i], static_cast<float>(x[i]) / (1 - p)) << i;
    }
  }
  // 4000 Bernoulli(0.7) draws: mean 2800, sd 29; 5 sd either way.
  EXPECT_NEAR(kept, 2800, 145);
  Tensor dy = Tensor::Filled(shape, 2.0f), dx = Tensor::Empty(shape);
  PHUB_ASSERT_OK(op->Backward(dy, dx));
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    EXPECT_FLOAT_EQ(dx.data()[i], y.data()[i] == 0 ? 0.0f : 2.0f / (1 - p)) << i;
  }
  Tensor y2 = Tensor::Empty(shape);
  PHUB_ASSERT_OK(op->Forward(xt, y2, 7));  // same seed, same mask
  EXPECT_TRUE(GradientsNear(y2.span(), ToVec(y), 0, 0));
  PHUB_ASSERT_OK(op->Forward(xt, y2, 8));  // another seed, another mask
  EXPECT_FALSE(GradientsNear(y2.span(), ToVec(y), 0, 0));
  EXPECT_THAT(
      backend_->MakeDropout(shape, 1.0f),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dropout: p = 1, must be in [0, 1)")));
}

TEST_F(OnednnOpsTest, ShortcutSubsamplesPadsAndSendsGradientsBack) {
  for (auto [h, stride, out] : {std::tuple<int, int, int>{6, 2, 8}, {5, 2, 7}, {4, 1, 4}}) {
    ShortcutSpec s{.batch = 2, .in_channels = 4, .height = h, .width = h + 1,
                   .out_channels = out, .stride = stride};
    const Shape xs{2, 4, h, h + 1}, ys{2, out, s.out_height(), s.out_width()};
    const Vec x = RandomFloats(xs.numel(), 23), r = RandomFloats(ys.numel(), 24);
    PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeShortcut(s));
    Tensor xt = ToTensor(x, xs), y = Tensor::Empty(ys);
    PHUB_ASSERT_OK(op->Forward(xt, y));
    EXPECT_TRUE(ForwardNear(y, reference::ShortcutForward(s, x))) << "h " << h;
    Tensor dy = ToTensor(r, ys), dx = Tensor::Empty(xs);
    PHUB_ASSERT_OK(op->Backward(dy, dx));
    EXPECT_TRUE(BackwardNear(
        dx, NumericGrad([&](const Vec& v) { return reference::ShortcutForward(s, v); }, x, r)));
  }
  EXPECT_THAT(backend_->MakeShortcut({.in_channels = 8, .out_channels = 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out_channels = 4 < in_channels = 8")));
}

TEST_F(OnednnOpsTest, AddAndAccumulate) {
  const Vec a = RandomFloats(1000, 20), b = RandomFloats(1000, 21);
  Tensor at = ToTensor(a, {10, 100}), bt = ToTensor(b, {10, 100}), y = Tensor::Empty({10, 100});
  PHUB_ASSERT_OK(backend_->Add(at, bt, y));
  Vec sum(1000);
  for (int i = 0; i < 1000; ++i) sum[i] = static_cast<float>(a[i] + b[i]);
  EXPECT_TRUE(GradientsNear(y.span(), sum, 0, 0));
  PHUB_ASSERT_OK(backend_->Accumulate(bt, at));  // a += b
  EXPECT_TRUE(GradientsNear(at.span(), sum, 0, 0));
}

// The single-worker optimizer step against a float64 loop of aggregate_and_step.h's equations:
// momentum and Adam with weight decay, three steps, so the state carries over.
TEST_F(OnednnOpsTest, OptimizerStepFollowsTheEquationsInFloat64) {
  using kernels::OptimizerKind;
  const std::int64_t n = 1001;
  for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
    const kernels::OptimizerConfig c{.kind = kind, .lr = 0.05f, .weight_decay = 1e-3f};
    const Vec w0 = RandomFloats(n, 30);
    Tensor w = ToTensor(w0, {n});
    std::vector<Tensor> state;
    for (int a = 0; a < kernels::StateArrays(kind); ++a) state.push_back(Tensor::Zeros({n}));
    Vec rw = w0, r0(n, 0.0), r1(n, 0.0);
    for (std::uint64_t t = 1; t <= 3; ++t) {
      const Vec g = RandomFloats(n, 30 + t);
      PHUB_ASSERT_OK(backend_->OptimizerStep(ToTensor(g, {n}), w, state, c, t));
      for (std::int64_t i = 0; i < n; ++i) {
        const double gi = g[i] + double{c.weight_decay} * rw[i];
        if (kind == OptimizerKind::kMomentum) {
          r0[i] = double{c.momentum} * r0[i] + gi;
          rw[i] -= double{c.lr} * r0[i];
        } else {
          r0[i] = double{c.beta1} * r0[i] + (1 - double{c.beta1}) * gi;
          r1[i] = double{c.beta2} * r1[i] + (1 - double{c.beta2}) * gi * gi;
          const double mhat = r0[i] / (1 - std::pow(double{c.beta1}, double(t)));
          const double shat = r1[i] / (1 - std::pow(double{c.beta2}, double(t)));
          rw[i] -= double{c.lr} * mhat / (std::sqrt(shat) + double{c.eps});
        }
      }
    }
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(w.data()[i], rw[i], 1e-5 * (1 + std::abs(rw[i])))
          << kernels::OptimizerName(kind) << " element " << i;
    }
  }
  Tensor w = Tensor::Zeros({4});
  std::vector<Tensor> two = {Tensor::Zeros({4}), Tensor::Zeros({3})};
  EXPECT_THAT(backend_->OptimizerStep(Tensor::Zeros({4}), w, two,
                                      {.kind = OptimizerKind::kAdam}, 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("OptimizerStep: state is [3]")));
  EXPECT_THAT(backend_->OptimizerStep(Tensor::Zeros({4}), w, {}, {}, 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("step counts from 1")));
}

TEST_F(OnednnOpsTest, BadSpecsAndShapesAreRefusedNamingWhatIsWrong) {
  Conv2dSpec bad = Conv(1, 3, 5, 5, 4, 7, 7, 1, 0, true);
  EXPECT_THAT(backend_->MakeConv2d(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kernel_h = 7 is larger than the padded input")));
  bad = Conv(1, 3, 5, 5, 0, 3, 3, 1, 1, true);
  EXPECT_THAT(backend_->MakeConv2d(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out_channels = 0")));
  LrnSpec even{.size = 4};
  EXPECT_THAT(backend_->MakeLrn(even),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size = 4")));

  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeConv2d(Conv(1, 3, 5, 5, 4, 3, 3, 1, 1, true)));
  Tensor x = Tensor::Zeros({1, 3, 5, 4}), w = Tensor::Zeros({4, 3, 3, 3}), b = Tensor::Zeros({4}),
         y = Tensor::Empty({1, 4, 5, 5});
  EXPECT_THAT(op->Forward(x, w, b, y),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Conv2d forward: x is [1, 3, 5, 4] cpu, expected [1, 3, 5, 5]")));

  PHUB_ASSERT_OK_AND_ASSIGN(auto ce, backend_->MakeSoftmaxCrossEntropy({.batch = 2, .classes = 3}));
  Tensor logits = Tensor::Zeros({2, 3}), labels = ToTensor({1, 3}, {2});
  EXPECT_THAT(ce->Forward(logits, labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label 1 is 3, must be a class index in [0, 3)")));
  // A host copy to a tensor of another size is refused, not a buffer overrun.
  Tensor small = Tensor::Empty({2, 2});
  EXPECT_THAT(backend_->Copy(logits, small),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Copy: destination is [2, 2] cpu, expected [6] cpu")));
}

}  // namespace
}  // namespace phub::worker
