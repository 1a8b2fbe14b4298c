// The Model's wiring (fan-out accumulation, residual add, order of the gradient hook) against
// finite differences of its own loss, the zoo's parameter counts against published figures,
// and a few SGD steps (phub/kernels' optimizer, the one the PS runs) that must lower the loss.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "tests/reference/finite_difference.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"
#include "worker/train/local_optimizer.h"
#include "worker/train/synthetic_data.h"

namespace phub::worker {
namespace {

Tensor RandomTensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::Empty(shape);
  auto v = reference::RandomVector(static_cast<std::size_t>(shape.numel()), seed);
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = static_cast<float>(v[i]);
  return t;
}

Tensor Labels(std::vector<float> v) {
  Tensor t = Tensor::Empty({static_cast<std::int64_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = v[i];
  return t;
}

// conv -> BN -> ReLU (a) -> conv -> Add(., a) -> maxpool -> Linear: `a` feeds two layers, so
// its gradient is a sum; the Add sends dy down both paths.
std::unique_ptr<Model> TinyResidual() {
  auto m = std::make_unique<Model>("tiny", Shape{2, 2, 6, 6});
  auto x = m->Add(std::make_unique<Conv2d>("c1", Conv2dOptions{.out_channels = 3, .pad = 1}),
                  Model::kInput);
  x = m->Add(std::make_unique<BatchNorm>("bn"), x);
  auto a = m->Add(std::make_unique<Relu>("r"), x);
  auto y = m->Add(std::make_unique<Conv2d>("c2", Conv2dOptions{.out_channels = 3, .pad = 1}), a);
  auto s = m->Add(std::make_unique<Add>("add"), {y, a});
  auto p = m->Add(std::make_unique<Pool>("pool", PoolOptions{}), s);
  m->Add(std::make_unique<Linear>("fc", 4), p);
  return m;
}

// Every parameter's gradient from Backward (after a Forward and Loss on x) against central
// differences of the model's own float32 loss, 6 elements of every parameter.
void ExpectGradientsMatchFiniteDifferences(Model& m, const Tensor& x, const Tensor& labels) {
  // Float32 forward: a step large enough for its rounding (~1e-4 here), small enough to cross
  // few ReLU kinks.
  const double h = 1e-3;
  for (Parameter* p : m.parameters()) {
    for (std::int64_t i = 0; i < p->value.numel(); i += std::max<std::int64_t>(1, p->value.numel() / 6)) {
      float& w = p->value.data()[i];
      const float saved = w;
      w = saved + static_cast<float>(h);
      m.Forward(x, true);
      const double plus = m.Loss(labels);
      w = saved - static_cast<float>(h);
      m.Forward(x, true);
      const double minus = m.Loss(labels);
      w = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(p->grad.data()[i], numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << p->name << "[" << i << "]";
    }
  }
}

TEST(ModelTest, BackwardMatchesFiniteDifferencesOfTheLoss) {
  auto backend = MakeOnednnBackend();
  auto m = TinyResidual();
  m->Build(*backend, 42);
  const Tensor x = RandomTensor(m->input_shape(), 7);
  const Tensor labels = Labels({1, 3});
  m->Forward(x, true);
  m->Loss(labels);
  std::vector<std::string> hooked;
  m->Backward(labels, [&](Layer& l) { hooked.push_back(l.name()); });
  EXPECT_THAT(hooked, ::testing::ElementsAre("fc", "c2", "bn", "c1"));

  ExpectGradientsMatchFiniteDifferences(*m, x, labels);
}

// Embedding -> LSTM -> LSTM -> Linear at every step: the sequence model's wiring (ids in, a
// rank-3 Linear, [T*N, vocab] logits, the embedding's scattered gradient).
TEST(ModelTest, SequenceModelBackwardMatchesFiniteDifferencesOfTheLoss) {
  auto backend = MakeOnednnBackend();
  auto m = std::make_unique<Model>("tiny-lm", Shape{3, 2}, 5);
  auto x = m->Add(std::make_unique<Embedding>("embed", 5, 3), Model::kInput);
  x = m->Add(std::make_unique<Lstm>("lstm1", 4), x);
  x = m->Add(std::make_unique<Lstm>("lstm2", 4), x);
  m->Add(std::make_unique<Linear>("decoder", 5), x);
  m->Build(*backend, 3);
  EXPECT_EQ(m->output_shape(), (Shape{6, 5}));
  const Tensor ids = Labels({4, 0, 2, 2, 1, 4});  // [T=3, N=2], id 3 unused: zero gradient row
  const Tensor labels = Labels({0, 1, 2, 3, 4, 0});
  m->Forward(ids.Reshaped({3, 2}), true);
  m->Loss(labels);
  m->Backward(labels);
  const Parameter* embed = m->parameters()[0];
  for (int j = 0; j < 3; ++j) EXPECT_EQ(embed->grad.data()[3 * 3 + j], 0.0f);
  ExpectGradientsMatchFiniteDifferences(*m, ids.Reshaped({3, 2}), labels);
}

struct TrainCase {
  const char* model;
  std::int64_t batch;
  int steps;
  float lr;
  double max_ratio;  // last loss / first loss must be below this
};

class ModelTrainingTest : public ::testing::TestWithParam<TrainCase> {};

// A few momentum-SGD steps on one fixed batch (labels 0, 1, 2, ...) must lower the loss clearly: every
// layer's forward, backward and the optimizer together point downhill.
TEST_P(ModelTrainingTest, SgdStepsOnAFixedBatchLowerTheLoss) {
  const TrainCase c = GetParam();
  auto backend = MakeOnednnBackend();
  auto m = MakeModel(c.model, c.batch);
  m->Build(*backend, 1);
  Batch data = MakeSyntheticBatch(*m);
  FillSynthetic(*m, data, 3);  // ids for the LSTM, uniform [-1, 1) for the rest
  const Tensor& x = data.x;
  std::vector<float> labels;
  for (std::int64_t i = 0; i < m->output_shape()[0]; ++i) labels.push_back(static_cast<float>(i % 10));
  const Tensor y = Labels(labels);
  LocalOptimizer opt(m->parameters(), {.kind = kernels::OptimizerKind::kMomentum, .lr = c.lr},
                     *backend);
  std::vector<double> losses;
  for (int step = 0; step < c.steps; ++step) {
    m->Forward(x, true);
    losses.push_back(m->Loss(y));
    m->Backward(y);
    opt.Step();
  }
  m->Forward(x, true);
  losses.push_back(m->Loss(y));
  EXPECT_LT(losses.back(), c.max_ratio * losses.front()) << ::testing::PrintToString(losses);
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ModelTrainingTest,
    // FCN-5's sigmoids saturate: it leaves the uniform plateau (ln 8 here) slowly, so less.
    ::testing::Values(TrainCase{"fashion-cnn", 8, 25, 0.05f, 0.5},
                      TrainCase{"fcn5", 8, 25, 0.1f, 0.9},
                      TrainCase{"resnet56", 8, 12, 0.01f, 0.7},
                      TrainCase{"alexnet", 2, 8, 0.05f, 0.7},
                      TrainCase{"resnet50", 2, 8, 0.01f, 0.7},
                      TrainCase{"lstm", 2, 12, 0.5f, 0.5}),
    [](const auto& info) {
      std::string n = info.param.model;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

TEST(ModelTest, ParameterCountsMatchThePublishedFigures) {
  auto backend = MakeOnednnBackend();
  auto resnet = MakeResNet50(1);
  resnet->Build(*backend, 0);
  EXPECT_EQ(resnet->ParameterCount(), 25'557'032);  // torchvision resnet50
  EXPECT_THAT(resnet->Describe(), ::testing::HasSubstr("total parameters: 25557032"));
  auto resnet56 = MakeResNet56(1);
  resnet56->Build(*backend, 0);
  EXPECT_EQ(resnet56->ParameterCount(), 853'018);  // He et al. 2016: "0.85M"
  auto alexnet = MakeAlexNet(1);
  alexnet->Build(*backend, 0);
  EXPECT_EQ(alexnet->ParameterCount(), 61'100'840);  // torchvision alexnet (LRN has none)
  auto fcn5 = MakeFcn5(1);
  fcn5->Build(*backend, 0);
  EXPECT_EQ(fcn5->ParameterCount(), 14'205'962);  // 784*2048+2048 + 2048*4096+4096 + ...
  auto lstm = MakeLstmLanguageModel(1);
  lstm->Build(*backend, 0);
  // embedding 10000*256; 2 x LSTM 4*256*(256+256)+4*256 (one bias); decoder 256*10000+10000
  EXPECT_EQ(lstm->ParameterCount(), 6'180'624);
  auto cnn = MakeFashionCnn(1);
  cnn->Build(*backend, 0);
  // conv1 32*25+32, conv2 64*32*25+64, fc1 3136*1024+1024, fc2 1024*10+10
  EXPECT_EQ(cnn->ParameterCount(), 832 + 51264 + 3212288 + 10250);
}

TEST(ModelTest, ParametersComeInAStableOrderWithUniqueNames) {
  auto backend = MakeOnednnBackend();
  auto m = TinyResidual();
  m->Build(*backend, 0);
  std::vector<std::string> names;
  for (Parameter* p : m->parameters()) names.push_back(p->name);
  EXPECT_THAT(names, ::testing::ElementsAre("c1.weight", "c1.bias", "bn.weight", "bn.bias",
                                            "c2.weight", "c2.bias", "fc.weight", "fc.bias"));
}

TEST(ModelTest, BadModelsAndInputsAreRefusedNamingTheProblem) {
  auto backend = MakeOnednnBackend();
  Model dup("dup", Shape{1, 1, 4, 4});
  dup.Add(std::make_unique<Relu>("r"), Model::kInput);
  EXPECT_THAT([&] { dup.Add(std::make_unique<Relu>("r"), Model::kInput); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("two layers are named 'r'")));
  EXPECT_THAT([&] { dup.Add(std::make_unique<Relu>("q"), 5); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("takes node 5, but only nodes 0..1 exist")));

  Model no_logits("no-logits", Shape{1, 1, 4, 4});
  no_logits.Add(std::make_unique<Relu>("r"), Model::kInput);
  EXPECT_THAT([&] { no_logits.Build(*backend, 0); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("the last layer must give [N, classes] logits")));

  Model big_kernel("big", Shape{1, 1, 4, 4});
  big_kernel.Add(std::make_unique<Conv2d>("c", Conv2dOptions{.kernel = 7}), Model::kInput);
  EXPECT_THAT([&] { big_kernel.Build(*backend, 0); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::HasSubstr(
                  "Conv2d 'c': input [1, 1, 4, 4]: Conv2d: kernel_h = 7 is larger")));

  auto cnn = MakeFashionCnn(2);
  cnn->Build(*backend, 0);
  EXPECT_THAT([&] { cnn->Forward(Tensor::Zeros({2, 1, 28, 27}), true); },
              ::testing::ThrowsMessage<std::invalid_argument>(::testing::HasSubstr(
                  "input is [2, 1, 28, 27], built for [2, 1, 28, 28]")));
  EXPECT_THAT([] { MakeModel("vgg", 1); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                               ::testing::HasSubstr("unknown model 'vgg'")));
}

}  // namespace
}  // namespace phub::worker
