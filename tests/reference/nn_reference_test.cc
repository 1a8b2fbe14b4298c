// Checks of the float64 reference itself (nn_reference.h) and of the finite-difference harness:
// small cases worked out by hand, plus a few fixed outputs printed by PyTorch (1.13, float64)
// where the index arithmetic is too tedious to do by hand. If the reference were wrong, every
// backend test built on it would be wrong in the same way, so these must be able to fail.
#include "tests/reference/nn_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "tests/reference/finite_difference.h"

namespace phub::reference {
namespace {

using phub::worker::BatchNormSpec;
using phub::worker::Conv2dSpec;
using phub::worker::LinearSpec;
using phub::worker::LrnSpec;
using phub::worker::PoolKind;
using phub::worker::PoolSpec;
using phub::worker::SoftmaxCrossEntropySpec;
using Vec = std::vector<double>;

void ExpectVecNear(const Vec& actual, const Vec& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol) << "at index " << i;
  }
}

// x = [[1 2 3] [4 5 6] [7 8 9]], w = [[1 2] [3 4]], bias 0.5.
Conv2dSpec TinyConv(std::int64_t stride, std::int64_t pad) {
  Conv2dSpec s;
  s.height = s.width = 3;
  s.kernel_h = s.kernel_w = 2;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  return s;
}
const Vec kConvX = {1, 2, 3, 4, 5, 6, 7, 8, 9};
const Vec kConvW = {1, 2, 3, 4};

TEST(Conv2dReference, Stride1NoPadding) {
  // y[0][0] = 1*1 + 2*2 + 3*4 + 4*5 = 37, and so on, plus the bias.
  ExpectVecNear(Conv2dForward(TinyConv(1, 0), kConvX, kConvW, Vec{0.5}),
                {37.5, 47.5, 67.5, 77.5}, 0);
}

TEST(Conv2dReference, Stride1Padding1WithoutBias) {
  // The full 4x4 correlation; the border rows/columns see only one kernel row/column.
  // Row 0: 3*x[0][j-1] + 4*x[0][j]; row 3: 1*x[2][j-1] + 2*x[2][j].
  Conv2dSpec s = TinyConv(1, 1);
  s.bias = false;
  ExpectVecNear(Conv2dForward(s, kConvX, kConvW, Vec{}),
                {4, 11, 18, 9, 18, 37, 47, 21, 36, 67, 77, 33, 14, 23, 26, 9}, 0);
}

TEST(Conv2dReference, Stride2Padding1) {
  // Windows start at -1 and 1: [4*1, 3*2+4*3; 2*4+4*7, 5+12+24+36] + bias.
  ExpectVecNear(Conv2dForward(TinyConv(2, 1), kConvX, kConvW, Vec{0.5}),
                {4.5, 18.5, 36.5, 77.5}, 0);
}

TEST(Conv2dReference, MatchesPyTorchOnRectangularMultiChannelCase) {
  // Batch 2, 2 -> 2 channels, 3x5 image, 2x3 kernel, stride (1,2), padding (1,0): catches an
  // exchange of h/w or of the channel axes, which the square single-channel cases cannot.
  // Integer data, so the outputs are exact. Produced by:
  //   python3 -c "import torch; F=torch.nn.functional; d=torch.float64;
  //   x=torch.tensor([float(i%7-3) for i in range(60)],dtype=d).reshape(2,2,3,5);
  //   w=torch.tensor([float(i%5-2) for i in range(24)],dtype=d).reshape(2,2,2,3);
  //   print(F.conv2d(x,w,torch.tensor([1.,-1.],dtype=d),stride=(1,2),padding=(1,0)).flatten())"
  Conv2dSpec s;
  s.batch = 2;
  s.in_channels = 2;
  s.out_channels = 2;
  s.height = 3;
  s.width = 5;
  s.kernel_h = 2;
  s.kernel_w = 3;
  s.stride_h = 1;
  s.stride_w = 2;
  s.pad_h = 1;
  s.pad_w = 0;
  Vec x(60), w(24);
  for (int i = 0; i < 60; ++i) x[i] = i % 7 - 3;
  for (int i = 0; i < 24; ++i) w[i] = i % 5 - 2;
  ASSERT_EQ(s.out_height(), 4);
  ASSERT_EQ(s.out_width(), 2);
  ExpectVecNear(Conv2dForward(s, x, w, Vec{1, -1}),
                {-6, -6, 39, -2, -18, 39, 2,  -11, 9, 3,  -21, 9, -2, -21, 3, -3,
                 -6, 1,  -2, -15, 39, -2, -11, 11, 3, -10, 9,  25, -21, 9, -3, -9},
                0);
}

TEST(Conv2dReference, RejectsWrongSizes) {
  EXPECT_THROW(Conv2dForward(TinyConv(1, 0), Vec(8), kConvW, Vec{0}), std::invalid_argument);
  EXPECT_THROW(Conv2dForward(TinyConv(1, 0), kConvX, kConvW, Vec{}), std::invalid_argument);
}

TEST(LinearReference, MatchesHandMatmul) {
  // x [2,3], w [2,3]: y[n][o] = sum_i x[n][i] w[o][i] + b[o].
  LinearSpec s{.batch = 2, .in_features = 3, .out_features = 2};
  const Vec x = {1, 2, 3, -1, 0, 2};
  const Vec w = {1, 0, -1, 2, 1, 0.5};
  // n=0: [1-3, 2+2+1.5] = [-2, 5.5]; n=1: [-1-2, -2+0+1] = [-3, -1].
  ExpectVecNear(LinearForward(s, x, w, Vec{10, 20}), {8, 25.5, 7, 19}, 0);
  s.bias = false;
  ExpectVecNear(LinearForward(s, x, w, Vec{}), {-2, 5.5, -3, -1}, 0);
}

TEST(BatchNormReference, TrainingHandCase) {
  // N=2, C=2, H=1, W=2. Channel 0 holds {1,2,3,4}: mean 2.5, biased var 1.25; channel 1 holds
  // {10,20,30,40}: mean 25, biased var 125.
  BatchNormSpec s{.batch = 2, .channels = 2, .height = 1, .width = 2};
  const Vec x = {1, 2, 10, 20, 3, 4, 30, 40};
  const Vec gamma = {2, -1}, beta = {1, 0.5};
  Vec mean, var;
  const Vec y = BatchNormTrainingForward(s, x, gamma, beta, &mean, &var);
  ExpectVecNear(mean, {2.5, 25}, 1e-15);
  ExpectVecNear(var, {1.25, 125}, 1e-13);
  const double eps = static_cast<double>(s.eps);
  const double is0 = 1 / std::sqrt(1.25 + eps), is1 = 1 / std::sqrt(125 + eps);
  ExpectVecNear(y,
                {2 * -1.5 * is0 + 1, 2 * -0.5 * is0 + 1, -1 * -15 * is1 + 0.5,
                 -1 * -5 * is1 + 0.5, 2 * 0.5 * is0 + 1, 2 * 1.5 * is0 + 1, -1 * 5 * is1 + 0.5,
                 -1 * 15 * is1 + 0.5},
                1e-14);
}

TEST(BatchNormReference, TrainingOutputIsStandardisedPerChannel) {
  BatchNormSpec s{.batch = 4, .channels = 3, .height = 2, .width = 5};
  Vec x = RandomVector(4 * 3 * 2 * 5, 7, -3, 5);
  const Vec y = BatchNormTrainingForward(s, x, Vec(3, 1.0), Vec(3, 0.0));
  for (int c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 10; ++i) sum += y[(n * 3 + c) * 10 + i];
    const double mean = sum / 40;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 10; ++i) sq += std::pow(y[(n * 3 + c) * 10 + i] - mean, 2);
    EXPECT_NEAR(mean, 0, 1e-14) << "channel " << c;
    // var(y) = var / (var + eps): 1 up to eps relative to the channel's variance (~5 here).
    EXPECT_NEAR(sq / 40, 1, 1e-5) << "channel " << c;
  }
}

TEST(BatchNormReference, RunningUpdateUsesUnbiasedVariance) {
  BatchNormSpec s{.batch = 2, .channels = 2, .height = 1, .width = 2};  // M = 4
  Vec running_mean = {0, 1}, running_var = {1, 1};
  BatchNormRunningUpdate(s, Vec{2.5, 25}, Vec{1.25, 125}, running_mean, running_var);
  const double m = static_cast<double>(s.momentum);  // 0.1f, as the float backends see it
  ExpectVecNear(running_mean, {m * 2.5, (1 - m) + m * 25}, 1e-15);
  ExpectVecNear(running_var, {(1 - m) + m * 1.25 * 4 / 3, (1 - m) + m * 125 * 4 / 3}, 1e-13);
  BatchNormSpec one{.batch = 1, .channels = 2, .height = 1, .width = 1};  // M = 1
  EXPECT_THROW(BatchNormRunningUpdate(one, Vec{0, 0}, Vec{0, 0}, running_mean, running_var),
               std::invalid_argument);
}

TEST(BatchNormReference, InferenceUsesRunningStats) {
  BatchNormSpec s{.batch = 1, .channels = 2, .height = 1, .width = 2};
  const Vec y = BatchNormInferenceForward(s, Vec{1, 3, 0, 4}, Vec{2, 1}, Vec{0, -1},
                                          Vec{1, 2}, Vec{4, 0.25});
  const double eps = static_cast<double>(s.eps);
  const double is0 = 1 / std::sqrt(4 + eps), is1 = 1 / std::sqrt(0.25 + eps);
  ExpectVecNear(y, {0, 2 * 2 * is0, -2 * is1 - 1, 2 * is1 - 1}, 1e-15);
}

TEST(ReluReference, ClampsNegativesAndKeepsNaN) {
  const Vec y = ReluForward(Vec{-2, -0.0, 0, 3, std::nan("")});
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], 0);
  EXPECT_EQ(y[2], 0);
  EXPECT_EQ(y[3], 3);
  EXPECT_TRUE(std::isnan(y[4]));
}

// 3x3 image, 2x2 kernel, stride 2, padding 1: every window but the last is cut by the border.
PoolSpec TinyPool(PoolKind kind) {
  PoolSpec s;
  s.kind = kind;
  s.height = s.width = 3;
  s.kernel_h = s.kernel_w = 2;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  return s;
}

TEST(PoolReference, MaxIgnoresPaddingAtTheBorder) {
  // All values negative: padding taken as 0 would win every border window.
  ExpectVecNear(PoolForward(TinyPool(PoolKind::kMax), Vec{-1, -2, -3, -4, -5, -6, -7, -8, -9}),
                {-1, -2, -4, -5}, 0);
}

TEST(PoolReference, AverageExcludesPadding) {
  // Windows: {1} -> 1, {2,3} -> 2.5, {4,7} -> 5.5, {5,6,8,9} -> 7. Counting the padding would
  // give 0.25, 1.25, 2.75, 7.
  ExpectVecNear(PoolForward(TinyPool(PoolKind::kAverage), kConvX), {1, 2.5, 5.5, 7}, 0);
}

TEST(PoolReference, MatchesPyTorchOnRectangularCase) {
  // 2 channels of 4x5, kernel (3,2), stride (2,1), padding (1,1). Produced by:
  //   python3 -c "import torch; F=torch.nn.functional;
  //   x=torch.tensor([float(i%7-3) for i in range(40)],dtype=torch.float64).reshape(1,2,4,5);
  //   print(F.max_pool2d(x,(3,2),stride=(2,1),padding=(1,1)).flatten().tolist());
  //   print(F.avg_pool2d(x,(3,2),stride=(2,1),padding=(1,1),
  //                      count_include_pad=False).flatten().tolist())"
  PoolSpec s{.batch = 1, .channels = 2, .height = 4, .width = 5, .kernel_h = 3, .kernel_w = 2,
             .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  Vec x(40);
  for (int i = 0; i < 40; ++i) x[i] = i % 7 - 3;
  ExpectVecNear(PoolForward(s, x), {2, 3, 3, 0, 1, 1, 2, 3, 3, 3, 3, 2,
                                    3, 3, 3, 3, 0, 0, 1, 2, 3, 3, 3, 3},
                0);
  s.kind = PoolKind::kAverage;
  ExpectVecNear(PoolForward(s, x),
                {-0.5, 0.0, -0.75, -1.5, -0.5, 0.0, 0.0, 0.5, 1.0 / 3, 1.0 / 6, 0.0, -2.0 / 3,
                 2.0, 0.75, 0.0, -0.75, -1.5, -1.0, -1.0, -0.5, 0.5, 1.0 / 3, 1.0 / 6, 2.0 / 3},
                1e-15);
}

TEST(PoolReference, RejectsPaddingAsLargeAsTheKernel) {
  PoolSpec s = TinyPool(PoolKind::kMax);
  s.pad_h = 2;
  EXPECT_THROW(PoolForward(s, kConvX), std::invalid_argument);
}

// LRN on N=1, C=6, H=1, W=2 with x[i] = 0.5 * (7i mod 11) - 2, alpha 0.5 (large, so that the
// window matters), beta 0.75, k 2. Produced by (printing repr of each value):
//   python3 -c "import torch; F=torch.nn.functional;
//   x=torch.tensor([0.5*((i*7)%11)-2.0 for i in range(12)],dtype=torch.float64).reshape(1,6,1,2);
//   print([repr(v) for v in F.local_response_norm(x,SIZE,alpha=0.5,beta=0.75,k=2.0).flatten()
//   .tolist()])"          with SIZE = 4 and SIZE = 3.
// The spec's alpha is a float; 0.5 is exact in float, so PyTorch's double run is comparable.
Vec LrnInput() {
  Vec x(12);
  for (int i = 0; i < 12; ++i) x[i] = 0.5 * ((i * 7) % 11) - 2.0;
  return x;
}

TEST(LrnReference, MatchesPyTorchOddSize) {
  LrnSpec s{.batch = 1, .channels = 6, .height = 1, .width = 2, .size = 3, .alpha = 0.5f,
            .beta = 0.75f, .k = 2.0f};
  ExpectVecNear(LrnForward(s, LrnInput()),
                {-0.9473346216055881, 0.5431095993477452, -0.22646005975132327, 1.0524485771346777,
                 0.4131307098896385, -0.3742104630042929, 0.9598969274203359, 0.22646005975132327,
                 -0.5968831254150015, 0.8032017809865287, 0.0, -0.8107200928842206},
                1e-15);
}

TEST(LrnReference, MatchesPyTorchEvenSizeWindowAsymmetry) {
  // size 4: channel c sums c-2 .. c+1. The other reading (c-1 .. c+2) gives different values.
  LrnSpec s{.batch = 1, .channels = 6, .height = 1, .width = 2, .size = 4, .alpha = 0.5f,
            .beta = 0.75f, .k = 2.0f};
  ExpectVecNear(LrnForward(s, LrnInput()),
                {-0.996617973634032, 0.5982516007574681, -0.24030803586532237, 1.1645949588217588,
                 0.39611197313912727, -0.3856415726392242, 1.0403382678345345, 0.1843925882281956,
                 -0.6287870865373619, 0.8446007234095759, 0.0, -0.8705900087436638},
                1e-15);
}

TEST(LrnReference, HandCaseSingleChannel) {
  // One channel, size 5: the window holds only x itself but the divisor is still 5.
  LrnSpec s{.channels = 1, .size = 5, .alpha = 1e-4f, .beta = 0.75f, .k = 2.0f};
  const double alpha = static_cast<double>(1e-4f);
  EXPECT_NEAR(LrnForward(s, Vec{3})[0], 3 / std::pow(2 + alpha / 5 * 9, 0.75), 1e-15);
}

TEST(SoftmaxCrossEntropyReference, MatchesLogSumExpByHand) {
  SoftmaxCrossEntropySpec s{.batch = 2, .classes = 3};
  const Vec logits = {1, 2, 3, 0, 0, 10};
  const double l0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3;
  const double l1 = std::log(2 + std::exp(10)) - 0;
  EXPECT_NEAR(SoftmaxCrossEntropyForward(s, logits, Vec{2, 0}), (l0 + l1) / 2, 1e-14);
}

TEST(SoftmaxCrossEntropyReference, ZeroLogitsGiveLogK) {
  SoftmaxCrossEntropySpec s{.batch = 3, .classes = 10};
  EXPECT_NEAR(SoftmaxCrossEntropyForward(s, Vec(30, 0.0), Vec{0, 9, 4}), std::log(10.0), 1e-15);
}

TEST(SoftmaxCrossEntropyReference, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows a double: only a max-shifted log-sum-exp gets these right.
  SoftmaxCrossEntropySpec s{.batch = 2, .classes = 2};
  const double loss = SoftmaxCrossEntropyForward(s, Vec{1000, 0, 1000, 0}, Vec{0, 1});
  EXPECT_NEAR(loss, (0 + 1000) / 2.0, 1e-12);
}

TEST(SoftmaxCrossEntropyReference, RejectsBadLabels) {
  SoftmaxCrossEntropySpec s{.batch = 1, .classes = 3};
  EXPECT_THROW(SoftmaxCrossEntropyForward(s, Vec(3, 0.0), Vec{3}), std::invalid_argument);
  EXPECT_THROW(SoftmaxCrossEntropyForward(s, Vec(3, 0.0), Vec{-1}), std::invalid_argument);
  EXPECT_THROW(SoftmaxCrossEntropyForward(s, Vec(3, 0.0), Vec{1.5}), std::invalid_argument);
}

TEST(FiniteDifference, RecoversGradientOfSumOfCubes) {
  const Vec x = RandomVector(20, 3, -2, 2);
  auto f = [](const Vec& v) {
    double s = 0;
    for (double e : v) s += e * e * e;
    return s;
  };
  Vec analytic(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) analytic[i] = 3 * x[i] * x[i];
  EXPECT_TRUE(GradientsNear(analytic, CentralDifferenceGradient(f, x), 1e-8, 1e-7));
  // A float analytic gradient is accepted too (what a backend produces).
  std::vector<float> analytic_f(analytic.begin(), analytic.end());
  EXPECT_TRUE(GradientsNear(analytic_f, CentralDifferenceGradient(f, x), 1e-5, 1e-6));
}

TEST(FiniteDifference, ComparisonFailsOnAWrongGradientAndNamesTheWorstElement) {
  const Vec numeric = {1.0, -2.0, 3.0, 4.0};
  Vec analytic = numeric;
  analytic[1] = -2.001;  // off by 1e-3: a small miss ...
  analytic[2] = 3.5;     // ... and the worst one
  const ::testing::AssertionResult r = GradientsNear(analytic, numeric, 1e-6, 1e-5);
  EXPECT_FALSE(r);
  const std::string msg = r.message();
  EXPECT_NE(msg.find("2 of 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("analytic 3.5"), std::string::npos) << msg;
  // Size mismatch and NaN fail too.
  EXPECT_FALSE(GradientsNear(Vec{1, 2}, numeric, 1, 1));
  EXPECT_FALSE(GradientsNear(Vec{1, std::nan(""), 3, 4}, Vec{1, -2, 3, 4}, 1, 1));
  // Within tolerance: passes.
  EXPECT_TRUE(GradientsNear(Vec{1.0, -2.0, 3.0, 4.00003}, numeric, 1e-6, 1e-5));
}

TEST(FiniteDifference, SoftmaxCrossEntropyGradientIsOpsHFormula) {
  // ops.h: dlogits = (softmax - onehot) / N. Checking it through the reference's forward ties
  // the harness, the forward reference and the documented backward together.
  SoftmaxCrossEntropySpec s{.batch = 3, .classes = 4};
  const Vec logits = RandomVector(12, 11, -3, 3), labels = {1, 3, 0};
  Vec analytic(12);
  for (int n = 0; n < 3; ++n) {
    double z = 0;
    for (int j = 0; j < 4; ++j) z += std::exp(logits[n * 4 + j]);
    for (int j = 0; j < 4; ++j) {
      analytic[n * 4 + j] = (std::exp(logits[n * 4 + j]) / z - (j == labels[n] ? 1 : 0)) / 3;
    }
  }
  auto f = [&](const Vec& l) { return SoftmaxCrossEntropyForward(s, l, labels); };
  EXPECT_TRUE(GradientsNear(analytic, CentralDifferenceGradient(f, logits), 1e-9, 1e-7));
}

TEST(FiniteDifference, RandomVectorIsSeededAndInRange) {
  const Vec a = RandomVector(100, 42, -0.5, 0.25), b = RandomVector(100, 42, -0.5, 0.25);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, RandomVector(100, 43, -0.5, 0.25));
  for (double v : a) {
    EXPECT_GE(v, -0.5);
    EXPECT_LT(v, 0.25);
  }
}

// T=3, N=2, I=3, H=2 with patterned inputs; expected values from PyTorch's nn.LSTM in float64
// with bias_ih = b and bias_hh = 0 (one bias is the same function):
//   x[i] = 0.1*((7i) mod 11) - 0.5, w_ih[i] = 0.05*((5i) mod 13) - 0.3,
//   w_hh[i] = 0.07*((3i) mod 7) - 0.2, b[i] = 0.1 i - 0.35; y, _ = lstm(x); print(y.flatten()).
TEST(LstmReference, MatchesPyTorch) {
  const phub::worker::LstmSpec s{.seq_len = 3, .batch = 2, .input_size = 3, .hidden_size = 2};
  Vec x(18), w_ih(24), w_hh(16), b(8);
  for (int i = 0; i < 18; ++i) x[i] = 0.1 * ((i * 7) % 11) - 0.5;
  for (int i = 0; i < 24; ++i) w_ih[i] = 0.05 * ((i * 5) % 13) - 0.3;
  for (int i = 0; i < 16; ++i) w_hh[i] = 0.07 * ((i * 3) % 7) - 0.2;
  for (int i = 0; i < 8; ++i) b[i] = 0.1 * i - 0.35;
  ExpectVecNear(LstmForward(s, x, w_ih, w_hh, b),
                {-0.011208042852930922, 0.0, 0.017983408818690143, 0.04461261832923263,
                 0.017118527188832378, 0.043328791228851915, 0.038538596913226066,
                 0.0649272577989613, 0.036528567516608164, 0.09263370412022977,
                 0.05319640397684838, 0.10197108640236954},
                1e-15);
}

TEST(EmbeddingReference, PicksRowsAndRefusesBadIds) {
  const phub::worker::EmbeddingSpec s{.count = 3, .vocab = 3, .dim = 2};
  const Vec table{1, 2, 3, 4, 5, 6};
  ExpectVecNear(EmbeddingForward(s, Vec{2, 0, 2}, table), {5, 6, 1, 2, 5, 6}, 0);
  EXPECT_THROW(EmbeddingForward(s, Vec{0, 3, 1}, table), std::invalid_argument);
  EXPECT_THROW(EmbeddingForward(s, Vec{0, 0.5, 1}, table), std::invalid_argument);
}

}  // namespace
}  // namespace phub::reference
