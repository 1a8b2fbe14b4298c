// The tensor checks every backend shares (worker/backend/ops_checks.h, in ops.cc), seen through
// the oneDNN backend: each op accepts its tensors as they are and refuses, with InvalidArgument
// naming the op and the argument, each tensor in turn replaced by one with an element too many
// or in NHWC layout. The cuDNN backend calls the same functions (its GPU tests cover the calls);
// the cuda side of the rule is checked here on CheckTensor itself, which needs no GPU.
#include "worker/backend/ops_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/worker/status_testing.h"
#include "worker/backend/onednn/onednn_backend.h"

namespace phub::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

struct Arg {
  const char* name;
  Tensor* tensor;
};

// `call` (which reads the tensors through the pointers in `args`) succeeds as they are; with any
// one of them one element too large, or NHWC, it fails naming `op` and that argument.
void ExpectEveryTensorChecked(const std::string& op, std::initializer_list<Arg> args,
                              const std::function<Status()>& call) {
  PHUB_EXPECT_OK(call()) << op << " with every tensor right";
  for (const Arg& a : args) {
    const Tensor good = *a.tensor;
    const auto refused =
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr(op), HasSubstr(absl::StrCat(": ", a.name, " is ["))));
    *a.tensor = Tensor::Zeros(Shape{good.numel() + 1});
    EXPECT_THAT(call(), refused) << op << ": " << a.name << " one element too large";
    *a.tensor = testing::ValueOrDie(Tensor::Allocate(good.shape(), Device::kCpu, Layout::kNHWC));
    EXPECT_THAT(call(), refused) << op << ": " << a.name << " nhwc";
    *a.tensor = good;
  }
}

class OpsChecksTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = testing::ValueOrDie(MakeOnednnBackend());
};

TEST_F(OpsChecksTest, Conv2dRefusesEveryWrongTensor) {
  Conv2dSpec s;
  s.batch = 2, s.in_channels = 3, s.height = s.width = 5, s.out_channels = 4;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeConv2d(s));
  Tensor x = Tensor::Zeros({2, 3, 5, 5}), w = Tensor::Zeros({4, 3, 3, 3}), b = Tensor::Zeros({4});
  Tensor y = Tensor::Zeros({2, 4, 5, 5}), dy = Tensor::Zeros({2, 4, 5, 5});
  Tensor dx = Tensor::Zeros({2, 3, 5, 5}), dw = Tensor::Zeros({4, 3, 3, 3}),
         db = Tensor::Zeros({4});
  ExpectEveryTensorChecked("Conv2d forward", {{"x", &x}, {"w", &w}, {"b", &b}, {"y", &y}},
                           [&] { return op->Forward(x, w, b, y); });
  ExpectEveryTensorChecked(
      "Conv2d backward", {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", &dx}, {"dw", &dw}, {"db", &db}},
      [&] { return op->Backward(x, w, dy, &dx, dw, db); });
}

TEST_F(OpsChecksTest, WithoutBiasOrDxThoseTensorsAreNotLookedAt) {
  Conv2dSpec s;
  s.bias = false;
  PHUB_ASSERT_OK_AND_ASSIGN(auto conv, backend_->MakeConv2d(s));
  Tensor one = Tensor::Zeros({1, 1, 1, 1}), y = Tensor::Zeros({1, 1, 1, 1}), none;
  PHUB_EXPECT_OK(conv->Forward(one, one, none, y));
  PHUB_EXPECT_OK(conv->Backward(one, none, one, nullptr, y, none));
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto linear, backend_->MakeLinear({.in_features = 2, .out_features = 3, .bias = false}));
  Tensor x = Tensor::Zeros({1, 2}), w = Tensor::Zeros({3, 2}), ly = Tensor::Zeros({1, 3});
  PHUB_EXPECT_OK(linear->Forward(x, w, none, ly));
  PHUB_EXPECT_OK(linear->Backward(x, none, ly, nullptr, w, none));
}

TEST_F(OpsChecksTest, LinearRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto op, backend_->MakeLinear({.batch = 2, .in_features = 3, .out_features = 4}));
  Tensor x = Tensor::Zeros({2, 3}), w = Tensor::Zeros({4, 3}), b = Tensor::Zeros({4});
  Tensor y = Tensor::Zeros({2, 4}), dy = Tensor::Zeros({2, 4});
  Tensor dx = Tensor::Zeros({2, 3}), dw = Tensor::Zeros({4, 3}), db = Tensor::Zeros({4});
  ExpectEveryTensorChecked("Linear forward", {{"x", &x}, {"w", &w}, {"b", &b}, {"y", &y}},
                           [&] { return op->Forward(x, w, b, y); });
  ExpectEveryTensorChecked(
      "Linear backward", {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", &dx}, {"dw", &dw}, {"db", &db}},
      [&] { return op->Backward(x, w, dy, &dx, dw, db); });
}

TEST_F(OpsChecksTest, BatchNormRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto op, backend_->MakeBatchNorm({.batch = 2, .channels = 3, .height = 2, .width = 2}));
  const Shape xs{2, 3, 2, 2}, c{3};
  Tensor x = Tensor::Zeros(xs), y = Tensor::Zeros(xs), dy = Tensor::Zeros(xs),
         dx = Tensor::Zeros(xs);
  Tensor gamma = Tensor::Filled(c, 1), beta = Tensor::Zeros(c), mean = Tensor::Zeros(c),
         var = Tensor::Filled(c, 1), run_mean = Tensor::Zeros(c), run_var = Tensor::Filled(c, 1),
         dgamma = Tensor::Zeros(c), dbeta = Tensor::Zeros(c);
  ExpectEveryTensorChecked(
      "BatchNorm forward (training)",
      {{"x", &x},
       {"gamma", &gamma},
       {"beta", &beta},
       {"y", &y},
       {"save_mean", &mean},
       {"save_var", &var},
       {"running_mean", &run_mean},
       {"running_var", &run_var}},
      [&] { return op->ForwardTraining(x, gamma, beta, y, mean, var, run_mean, run_var); });
  ExpectEveryTensorChecked(
      "BatchNorm forward (inference)",
      {{"x", &x},
       {"gamma", &gamma},
       {"beta", &beta},
       {"running_mean", &run_mean},
       {"running_var", &run_var},
       {"y", &y}},
      [&] { return op->ForwardInference(x, gamma, beta, run_mean, run_var, y); });
  PHUB_ASSERT_OK(op->ForwardTraining(x, gamma, beta, y, mean, var, run_mean, run_var));
  ExpectEveryTensorChecked(
      "BatchNorm backward",
      {{"x", &x},
       {"gamma", &gamma},
       {"save_mean", &mean},
       {"save_var", &var},
       {"dy", &dy},
       {"dx", &dx},
       {"dgamma", &dgamma},
       {"dbeta", &dbeta}},
      [&] { return op->Backward(x, gamma, mean, var, dy, dx, dgamma, dbeta); });
}

TEST_F(OpsChecksTest, ActivationRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeActivation(ActivationKind::kRelu, {2, 3}));
  Tensor x = Tensor::Zeros({2, 3}), y = Tensor::Zeros({2, 3}), dy = Tensor::Zeros({2, 3}),
         dx = Tensor::Zeros({2, 3});
  ExpectEveryTensorChecked("activation forward", {{"x", &x}, {"y", &y}},
                           [&] { return op->Forward(x, y); });
  ExpectEveryTensorChecked("activation backward", {{"y", &y}, {"dy", &dy}, {"dx", &dx}},
                           [&] { return op->Backward(y, dy, dx); });
}

TEST_F(OpsChecksTest, PoolRefusesEveryWrongTensor) {
  PoolSpec s;
  s.batch = 2, s.channels = 3, s.height = s.width = 4;
  s.kernel_h = s.kernel_w = s.stride_h = s.stride_w = 2;
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakePool(s));
  Tensor x = Tensor::Zeros({2, 3, 4, 4}), y = Tensor::Zeros({2, 3, 2, 2});
  Tensor dy = Tensor::Zeros({2, 3, 2, 2}), dx = Tensor::Zeros({2, 3, 4, 4});
  ExpectEveryTensorChecked("Pool forward", {{"x", &x}, {"y", &y}},
                           [&] { return op->Forward(x, y); });
  ExpectEveryTensorChecked("Pool backward", {{"x", &x}, {"y", &y}, {"dy", &dy}, {"dx", &dx}},
                           [&] { return op->Backward(x, y, dy, dx); });
}

TEST_F(OpsChecksTest, LrnRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto op, backend_->MakeLrn({.batch = 2, .channels = 4, .height = 3, .width = 3, .size = 3}));
  const Shape xs{2, 4, 3, 3};
  Tensor x = Tensor::Zeros(xs), y = Tensor::Zeros(xs), dy = Tensor::Zeros(xs),
         dx = Tensor::Zeros(xs);
  ExpectEveryTensorChecked("LRN forward", {{"x", &x}, {"y", &y}},
                           [&] { return op->Forward(x, y); });
  ExpectEveryTensorChecked("LRN backward", {{"x", &x}, {"y", &y}, {"dy", &dy}, {"dx", &dx}},
                           [&] { return op->Backward(x, y, dy, dx); });
}

TEST_F(OpsChecksTest, SoftmaxCrossEntropyRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeSoftmaxCrossEntropy({.batch = 2, .classes = 3}));
  Tensor logits = Tensor::Zeros({2, 3}), labels = Tensor::Zeros({2}),
         dlogits = Tensor::Zeros({2, 3});
  ExpectEveryTensorChecked("SoftmaxCrossEntropy forward", {{"logits", &logits}},
                           [&] { return op->Forward(logits, labels).status(); });
  ExpectEveryTensorChecked("SoftmaxCrossEntropy", {{"labels", &labels}},
                           [&] { return op->Forward(logits, labels).status(); });
  ExpectEveryTensorChecked("SoftmaxCrossEntropy backward", {{"dlogits", &dlogits}},
                           [&] { return op->Backward(labels, dlogits); });
  ExpectEveryTensorChecked("SoftmaxCrossEntropy", {{"labels", &labels}},
                           [&] { return op->Backward(labels, dlogits); });
}

TEST_F(OpsChecksTest, DropoutRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeDropout({2, 3}, 0.5f));
  Tensor x = Tensor::Zeros({2, 3}), y = Tensor::Zeros({2, 3}), dy = Tensor::Zeros({2, 3}),
         dx = Tensor::Zeros({2, 3});
  ExpectEveryTensorChecked("Dropout forward", {{"x", &x}, {"y", &y}},
                           [&] { return op->Forward(x, y, 1); });
  ExpectEveryTensorChecked("Dropout backward", {{"dy", &dy}, {"dx", &dx}},
                           [&] { return op->Backward(dy, dx); });
}

TEST_F(OpsChecksTest, ShortcutRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto op,
      backend_->MakeShortcut(
          {.batch = 2, .in_channels = 2, .height = 4, .width = 4, .out_channels = 4, .stride = 2}));
  Tensor x = Tensor::Zeros({2, 2, 4, 4}), y = Tensor::Zeros({2, 4, 2, 2});
  Tensor dy = Tensor::Zeros({2, 4, 2, 2}), dx = Tensor::Zeros({2, 2, 4, 4});
  ExpectEveryTensorChecked("Shortcut forward", {{"x", &x}, {"y", &y}},
                           [&] { return op->Forward(x, y); });
  ExpectEveryTensorChecked("Shortcut backward", {{"dy", &dy}, {"dx", &dx}},
                           [&] { return op->Backward(dy, dx); });
}

TEST_F(OpsChecksTest, LstmRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(
      auto op, backend_->MakeLstm({.seq_len = 2, .batch = 2, .input_size = 3, .hidden_size = 2}));
  Tensor x = Tensor::Zeros({2, 2, 3}), w_ih = Tensor::Zeros({8, 3}), w_hh = Tensor::Zeros({8, 2}),
         bias = Tensor::Zeros({8}), y = Tensor::Zeros({2, 2, 2});
  Tensor dy = Tensor::Zeros({2, 2, 2}), dx = Tensor::Zeros({2, 2, 3}),
         dw_ih = Tensor::Zeros({8, 3}), dw_hh = Tensor::Zeros({8, 2}), dbias = Tensor::Zeros({8});
  ExpectEveryTensorChecked(
      "LSTM forward", {{"x", &x}, {"w_ih", &w_ih}, {"w_hh", &w_hh}, {"bias", &bias}, {"y", &y}},
      [&] { return op->Forward(x, w_ih, w_hh, bias, y, /*training=*/true); });
  ExpectEveryTensorChecked(
      "LSTM backward",
      {{"x", &x},
       {"w_ih", &w_ih},
       {"w_hh", &w_hh},
       {"bias", &bias},
       {"y", &y},
       {"dy", &dy},
       {"dx", &dx},
       {"dw_ih", &dw_ih},
       {"dw_hh", &dw_hh},
       {"dbias", &dbias}},
      [&] { return op->Backward(x, w_ih, w_hh, bias, y, dy, &dx, dw_ih, dw_hh, dbias); });
}

TEST_F(OpsChecksTest, EmbeddingRefusesEveryWrongTensor) {
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, backend_->MakeEmbedding({.count = 3, .vocab = 4, .dim = 2}));
  Tensor ids = Tensor::Zeros({3}), table = Tensor::Zeros({4, 2}), y = Tensor::Zeros({3, 2});
  Tensor dy = Tensor::Zeros({3, 2}), dtable = Tensor::Zeros({4, 2});
  ExpectEveryTensorChecked("Embedding forward", {{"ids", &ids}, {"table", &table}, {"y", &y}},
                           [&] { return op->Forward(ids, table, y); });
  ExpectEveryTensorChecked("Embedding backward", {{"ids", &ids}, {"dy", &dy}, {"dtable", &dtable}},
                           [&] { return op->Backward(ids, dy, dtable); });
}

TEST(CheckTensorTest, NamesTheOpTheArgumentAndWhatItShouldBe) {
  const Tensor host = Tensor::Zeros({2, 3});
  PHUB_EXPECT_OK(CheckTensor("Op", "x", host, Device::kCpu, {6}));  // the element count counts
  EXPECT_THAT(CheckTensor("Op", "x", host, Device::kCuda, {2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Op: x is [2, 3] cpu, expected [2, 3] cuda (6 elements, NCHW)")));
  EXPECT_THAT(CheckTensor("Op", "w", host, Device::kCpu, {7}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Op: w is [2, 3] cpu, expected [7] cpu (7 elements, NCHW)")));
}

}  // namespace
}  // namespace phub::worker
