// The Model's wiring (fan-out accumulation, residual add, order of the gradient hook) against
// finite differences of its own loss, the zoo's parameter counts against published figures,
// and a few SGD steps (phub/kernels' optimizer, the one the PS runs) that must lower the loss.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "tests/reference/finite_difference.h"
#include "tests/worker/status_testing.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"
#include "worker/train/local_optimizer.h"
#include "worker/train/synthetic_data.h"
#include "worker/train/trainer.h"

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;
using testing::ValueOrDie;

std::unique_ptr<Backend> Cpu() { return ValueOrDie(MakeOnednnBackend(), "MakeOnednnBackend"); }

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
      PHUB_ASSERT_OK(m.Forward(x, true));
      PHUB_ASSERT_OK_AND_ASSIGN(const double plus, m.Loss(labels));
      w = saved - static_cast<float>(h);
      PHUB_ASSERT_OK(m.Forward(x, true));
      PHUB_ASSERT_OK_AND_ASSIGN(const double minus, m.Loss(labels));
      w = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(p->grad.data()[i], numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << p->name << "[" << i << "]";
    }
  }
}

TEST(ModelTest, BackwardMatchesFiniteDifferencesOfTheLoss) {
  auto backend = Cpu();
  auto m = TinyResidual();
  PHUB_ASSERT_OK(m->Build(*backend, 42));
  const Tensor x = RandomTensor(m->input_shape(), 7);
  const Tensor labels = Labels({1, 3});
  PHUB_ASSERT_OK(m->Forward(x, true));
  PHUB_ASSERT_OK(m->Loss(labels));
  std::vector<std::string> hooked;
  PHUB_ASSERT_OK(m->Backward(labels, [&](Layer& l) {
    hooked.push_back(l.name());
    return absl::OkStatus();
  }));
  EXPECT_THAT(hooked, ::testing::ElementsAre("fc", "c2", "bn", "c1"));

  ExpectGradientsMatchFiniteDifferences(*m, x, labels);
}

// Embedding -> LSTM -> LSTM -> Linear at every step: the sequence model's wiring (ids in, a
// rank-3 Linear, [T*N, vocab] logits, the embedding's scattered gradient).
TEST(ModelTest, SequenceModelBackwardMatchesFiniteDifferencesOfTheLoss) {
  auto backend = Cpu();
  auto m = std::make_unique<Model>("tiny-lm", Shape{3, 2}, 5);
  auto x = m->Add(std::make_unique<Embedding>("embed", 5, 3), Model::kInput);
  x = m->Add(std::make_unique<Lstm>("lstm1", 4), x);
  x = m->Add(std::make_unique<Lstm>("lstm2", 4), x);
  m->Add(std::make_unique<Linear>("decoder", 5), x);
  PHUB_ASSERT_OK(m->Build(*backend, 3));
  EXPECT_EQ(m->output_shape(), (Shape{6, 5}));
  const Tensor ids = Labels({4, 0, 2, 2, 1, 4});  // [T=3, N=2], id 3 unused: zero gradient row
  const Tensor labels = Labels({0, 1, 2, 3, 4, 0});
  PHUB_ASSERT_OK(m->Forward(ids.Reshaped({3, 2}), true));
  PHUB_ASSERT_OK(m->Loss(labels));
  PHUB_ASSERT_OK(m->Backward(labels));
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
  auto backend = Cpu();
  PHUB_ASSERT_OK_AND_ASSIGN(auto m, MakeModel(c.model, c.batch));
  PHUB_ASSERT_OK(m->Build(*backend, 1));
  PHUB_ASSERT_OK_AND_ASSIGN(Batch data, MakeSyntheticBatch(*m));
  FillSynthetic(*m, data, 3);  // ids for the LSTM, uniform [-1, 1) for the rest
  const Tensor& x = data.x;
  std::vector<float> labels;
  for (std::int64_t i = 0; i < m->output_shape()[0]; ++i) labels.push_back(static_cast<float>(i % 10));
  const Tensor y = Labels(labels);
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto opt,
      LocalOptimizer::Create(m->parameters(),
                             {.kind = kernels::OptimizerKind::kMomentum, .lr = c.lr}, *backend));
  std::vector<double> losses;
  for (int step = 0; step < c.steps; ++step) {
    PHUB_ASSERT_OK(m->Forward(x, true));
    PHUB_ASSERT_OK_AND_ASSIGN(const double loss, m->Loss(y));
    losses.push_back(loss);
    PHUB_ASSERT_OK(m->Backward(y));
    PHUB_ASSERT_OK(opt->Step());
  }
  PHUB_ASSERT_OK(m->Forward(x, true));
  PHUB_ASSERT_OK_AND_ASSIGN(const double last, m->Loss(y));
  losses.push_back(last);
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
  auto backend = Cpu();
  auto resnet = MakeResNet50(1);
  PHUB_ASSERT_OK(resnet->Build(*backend, 0));
  EXPECT_EQ(resnet->ParameterCount(), 25'557'032);  // torchvision resnet50
  EXPECT_THAT(resnet->Describe(), ::testing::HasSubstr("total parameters: 25557032"));
  auto resnet56 = MakeResNet56(1);
  PHUB_ASSERT_OK(resnet56->Build(*backend, 0));
  EXPECT_EQ(resnet56->ParameterCount(), 853'018);  // He et al. 2016: "0.85M"
  auto alexnet = MakeAlexNet(1);
  PHUB_ASSERT_OK(alexnet->Build(*backend, 0));
  EXPECT_EQ(alexnet->ParameterCount(), 61'100'840);  // torchvision alexnet (LRN has none)
  auto fcn5 = MakeFcn5(1);
  PHUB_ASSERT_OK(fcn5->Build(*backend, 0));
  EXPECT_EQ(fcn5->ParameterCount(), 14'205'962);  // 784*2048+2048 + 2048*4096+4096 + ...
  auto lstm = MakeLstmLanguageModel(1);
  PHUB_ASSERT_OK(lstm->Build(*backend, 0));
  // embedding 10000*256; 2 x LSTM 4*256*(256+256)+4*256 (one bias); decoder 256*10000+10000
  EXPECT_EQ(lstm->ParameterCount(), 6'180'624);
  auto cnn = MakeFashionCnn(1);
  PHUB_ASSERT_OK(cnn->Build(*backend, 0));
  // conv1 32*25+32, conv2 64*32*25+64, fc1 3136*1024+1024, fc2 1024*10+10
  EXPECT_EQ(cnn->ParameterCount(), 832 + 51264 + 3212288 + 10250);
}

TEST(ModelTest, ParametersComeInAStableOrderWithUniqueNames) {
  auto backend = Cpu();
  auto m = TinyResidual();
  PHUB_ASSERT_OK(m->Build(*backend, 0));
  std::vector<std::string> names;
  for (Parameter* p : m->parameters()) names.push_back(p->name);
  EXPECT_THAT(names, ::testing::ElementsAre("c1.weight", "c1.bias", "bn.weight", "bn.bias",
                                            "c2.weight", "c2.bias", "fc.weight", "fc.bias"));
}

TEST(ModelTest, ADuplicateLayerNameIsRefusedWhenTheModelIsBuilt) {
  auto backend = Cpu();
  Model dup("dup", Shape{1, 1, 4, 4});
  EXPECT_EQ(dup.Add(std::make_unique<Relu>("r"), Model::kInput), 1);
  EXPECT_EQ(dup.Add(std::make_unique<Relu>("r"), Model::kInput), Model::kInvalid);
  EXPECT_THAT(dup.Build(*backend, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two layers are named 'r'")));
  // The model is not usable afterwards, and says so.
  EXPECT_THAT(dup.Forward(Tensor::Zeros({1, 1, 4, 4}), true),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("Forward before a successful Build")));
}

TEST(ModelTest, AnInputThatIsNotAnEarlierNodeIsRefusedWhenTheModelIsBuilt) {
  auto backend = Cpu();
  Model m("m", Shape{1, 1, 4, 4});
  m.Add(std::make_unique<Relu>("r"), Model::kInput);
  EXPECT_EQ(m.Add(std::make_unique<Relu>("q"), 5), Model::kInvalid);
  // A later error does not hide the first.
  m.Add(std::make_unique<Relu>("r"), Model::kInput);
  EXPECT_THAT(m.Build(*backend, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer 'q' takes node 5, but only nodes 0..1 exist")));
}

TEST(ModelTest, AModelWithoutLogitsIsRefused) {
  auto backend = Cpu();
  Model no_logits("no-logits", Shape{1, 1, 4, 4});
  no_logits.Add(std::make_unique<Relu>("r"), Model::kInput);
  EXPECT_THAT(no_logits.Build(*backend, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the last layer must give [N, classes] logits")));
}

TEST(ModelTest, ALayerRefusingItsInputIsNamedWithTheBackendsReason) {
  auto backend = Cpu();
  Model big_kernel("big", Shape{1, 1, 4, 4});
  big_kernel.Add(std::make_unique<Conv2d>("c", Conv2dOptions{.kernel = 7}), Model::kInput);
  EXPECT_THAT(
      big_kernel.Build(*backend, 0),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("Conv2d 'c': input [1, 1, 4, 4]: Conv2d: kernel_h = 7 is larger")));
}

TEST(ModelTest, BuildingTwiceIsRefused) {
  auto backend = Cpu();
  auto cnn = MakeFashionCnn(1);
  PHUB_ASSERT_OK(cnn->Build(*backend, 0));
  EXPECT_THAT(cnn->Build(*backend, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Build called twice")));
}

TEST(ModelTest, AnInputOfAnotherShapeAndABadLabelAreRefused) {
  auto backend = Cpu();
  auto cnn = MakeFashionCnn(2);
  PHUB_ASSERT_OK(cnn->Build(*backend, 0));
  EXPECT_THAT(cnn->Forward(Tensor::Zeros({2, 1, 28, 27}), true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input is [2, 1, 28, 27] cpu, built for [2, 1, 28, 28] cpu")));
  PHUB_ASSERT_OK(cnn->Forward(Tensor::Zeros({2, 1, 28, 28}), true));
  EXPECT_THAT(cnn->Loss(Labels({1, 10})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label 1 is 10, must be a class index in [0, 10)")));
}

TEST(ModelTest, UnknownModelsAndBadBatchesAreRefusedNamingTheChoices) {
  EXPECT_THAT(MakeModel("vgg", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown model 'vgg': use one of fashion-cnn, fcn5")));
  EXPECT_THAT(MakeModel("fcn5", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch 0 must be >= 1")));
}

TEST(ModelTest, AHookErrorStopsThePassAndIsReturned) {
  auto backend = Cpu();
  auto m = TinyResidual();
  PHUB_ASSERT_OK(m->Build(*backend, 0));
  const Tensor x = RandomTensor(m->input_shape(), 1);
  const Tensor labels = Labels({0, 1});
  int before = 0;
  EXPECT_THAT(m->Forward(x, true,
                         [&](Layer&) {
                           return ++before == 2 ? absl::UnavailableError("peer gone")
                                                : absl::OkStatus();
                         }),
              StatusIs(absl::StatusCode::kUnavailable, "peer gone"));
  EXPECT_EQ(before, 2);  // the layers with parameters after the second were not reached
  PHUB_ASSERT_OK(m->Forward(x, true));
  PHUB_ASSERT_OK(m->Loss(labels));
  std::vector<std::string> hooked;
  EXPECT_THAT(m->Backward(labels,
                          [&](Layer& l) {
                            hooked.push_back(l.name());
                            return absl::DeadlineExceededError("push timed out");
                          }),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "push timed out"));
  EXPECT_THAT(hooked, ::testing::ElementsAre("fc"));
}

// Fault injection by a wrapper (leveldb's ErrorEnv): the oneDNN backend, except that its
// allocations fail after the first `budget` ones, as a device out of memory does.
class OutOfMemoryBackend final : public Backend {
 public:
  OutOfMemoryBackend(std::unique_ptr<Backend> base, int budget)
      : base_(std::move(base)), budget_(budget) {}
  Device device() const override { return base_->device(); }
  std::string Describe() const override { return "out of memory after a budget"; }
  StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(const Conv2dSpec& s) override {
    return base_->MakeConv2d(s);
  }
  StatusOr<std::unique_ptr<LinearOp>> MakeLinear(const LinearSpec& s) override {
    return base_->MakeLinear(s);
  }
  StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(const BatchNormSpec& s) override {
    return base_->MakeBatchNorm(s);
  }
  StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(ActivationKind kind,
                                                         const Shape& shape) override {
    return base_->MakeActivation(kind, shape);
  }
  StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolSpec& s) override {
    return base_->MakePool(s);
  }
  StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(const ShortcutSpec& s) override {
    return base_->MakeShortcut(s);
  }
  StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(const Shape& shape, float p) override {
    return base_->MakeDropout(shape, p);
  }
  StatusOr<std::unique_ptr<LrnOp>> MakeLrn(const LrnSpec& s) override { return base_->MakeLrn(s); }
  StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
      const SoftmaxCrossEntropySpec& s) override {
    return base_->MakeSoftmaxCrossEntropy(s);
  }
  StatusOr<std::unique_ptr<LstmOp>> MakeLstm(const LstmSpec& s) override {
    return base_->MakeLstm(s);
  }
  StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(const EmbeddingSpec& s) override {
    return base_->MakeEmbedding(s);
  }
  Status Add(const Tensor& a, const Tensor& b, Tensor& y) override { return base_->Add(a, b, y); }
  Status Accumulate(const Tensor& x, Tensor& y) override { return base_->Accumulate(x, y); }
  Status OptimizerStep(const Tensor& grad, Tensor& weights, std::span<Tensor> state,
                       const kernels::OptimizerConfig& config, std::uint64_t step) override {
    return base_->OptimizerStep(grad, weights, state, config, step);
  }
  StatusOr<Tensor> Allocate(const Shape& shape) override {
    if (budget_-- <= 0) {
      return absl::ResourceExhaustedError("Tensor " + shape.ToString() + ": out of memory");
    }
    return base_->Allocate(shape);
  }
  Status CopyFromHost(const Tensor& host, Tensor& mine) override {
    return base_->CopyFromHost(host, mine);
  }
  Status CopyToHost(const Tensor& mine, Tensor& host) override {
    return base_->CopyToHost(mine, host);
  }
  Status Copy(const Tensor& from, Tensor& to) override { return base_->Copy(from, to); }
  Status Synchronize() override { return base_->Synchronize(); }
  void* stream() const override { return base_->stream(); }
  StatusOr<std::unique_ptr<staging::CopyEngine>> MakeCopyEngine() override {
    return base_->MakeCopyEngine();
  }

 private:
  std::unique_ptr<Backend> base_;
  int budget_;
};

TEST(ModelTest, RunningOutOfDeviceMemoryInBuildIsResourceExhausted) {
  // conv1's weight and its gradient fit, conv1's bias does not.
  OutOfMemoryBackend backend(Cpu(), 2);
  auto cnn = MakeFashionCnn(1);
  EXPECT_THAT(cnn->Build(backend, 0), StatusIs(absl::StatusCode::kResourceExhausted,
                                               HasSubstr("Tensor [32]: out of memory")));
}

TEST(TrainerTest, ABadOptimizerConfigIsRefused) {
  auto backend = Cpu();
  auto cnn = MakeFashionCnn(1);
  PHUB_ASSERT_OK(cnn->Build(*backend, 0));
  EXPECT_THAT(Trainer::Local(*cnn, *backend, {.kind = kernels::OptimizerKind::kSgd, .lr = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr")));
}

TEST(TrainerTest, AStepOnBadLabelsFailsWithTheLossesMessage) {
  auto backend = Cpu();
  auto cnn = MakeFashionCnn(2);
  PHUB_ASSERT_OK(cnn->Build(*backend, 0));
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto trainer,
      Trainer::Local(*cnn, *backend, {.kind = kernels::OptimizerKind::kSgd, .lr = 0.1f}));
  PHUB_ASSERT_OK(trainer->Init());
  const Tensor x = RandomTensor(cnn->input_shape(), 3);
  PHUB_ASSERT_OK(trainer->Step(x, Labels({1, 2})));
  EXPECT_THAT(trainer->Step(x, Labels({1, -1})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label 1 is -1")));
}

}  // namespace
}  // namespace phub::worker
