// The cuDNN backend against the oneDNN one (itself checked against float64 references and
// finite differences in onednn_ops_test.cc): every op runs on both with the same random inputs
// and its forward and backward outputs must agree to ||gpu - cpu|| / ||cpu|| < 1e-4; then whole
// zoo models, built on both with the same seed, must give the same loss and parameter
// gradients. Without a GPU the fixture skips, saying why; the tests of the error messages, of the
// dropout mask and of the no-GPU path run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/worker/status_testing.h"
#include "worker/backend/cudnn/checks.h"
#include "worker/backend/cudnn/cudnn_backend.h"
#include "worker/backend/cudnn/dropout_mask.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "spdlog/spdlog.h"
#include "worker/nn/models/models.h"
#include "worker/train/synthetic_data.h"

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;
using testing::ValueOrDie;

// float32 on both sides, different algorithms and summation orders: agreement to 1e-4 in norm.
constexpr double kOpTolerance = 1e-4;

// ||got - want|| / ||want|| (||got - want|| if want is zero); infinite if either has a NaN.
double RelativeError(const Tensor& got, const Tensor& want) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data()[i], w = want.data()[i];
    if (std::isnan(g) || std::isnan(w)) return INFINITY;
    diff += (g - w) * (g - w);
    norm += w * w;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::string Head(const Tensor& t) {
  std::string s;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(t.numel(), 4); ++i) {
    s += std::to_string(t.data()[i]) + " ";
  }
  return s;
}

class CudnnOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    PHUB_ASSERT_OK_AND_ASSIGN(gpu_, MakeCudnnBackend());
    PHUB_ASSERT_OK_AND_ASSIGN(cpu_, MakeOnednnBackend());
    // Inputs differ from test to test, and are the same from run to run.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()));
  }

  // Uniform in [lo, hi) on the host.
  Tensor Random(const Shape& shape, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Tensor t = Tensor::Empty(shape);
    for (float& v : t.span()) v = dist(rng_);
    return t;
  }
  // Device memory for a test; the test binary stops if there is none.
  Tensor GpuEmpty(const Shape& shape) { return ValueOrDie(gpu_->Allocate(shape), "Allocate"); }
  Tensor ToGpu(const Tensor& host) {
    Tensor t = GpuEmpty(host.shape());
    PHUB_EXPECT_OK(gpu_->CopyFromHost(host, t));
    return t;
  }
  Tensor ToHost(const Tensor& device) {
    Tensor t = Tensor::Empty(device.shape());
    PHUB_EXPECT_OK(gpu_->CopyToHost(device, t));
    return t;
  }
  // A device tensor filled with `value`: gradients poisoned to show that ops overwrite them.
  Tensor GpuFilled(const Shape& shape, float value) { return ToGpu(Tensor::Filled(shape, value)); }

  // The GPU result (a device tensor) against the CPU one.
  ::testing::AssertionResult Agree(const Tensor& gpu, const Tensor& cpu,
                                   double tolerance = kOpTolerance) {
    const Tensor got = ToHost(gpu);
    if (got.numel() != cpu.numel()) {
      return ::testing::AssertionFailure() << got.numel() << " elements vs " << cpu.numel();
    }
    const double error = RelativeError(got, cpu);
    if (error < tolerance) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "relative error " << error << " >= " << tolerance << " (gpu " << Head(got)
           << "... cpu " << Head(cpu) << "...)";
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  std::mt19937_64 rng_;
};

// ---- Everywhere, GPU or not ----

TEST(CudnnBackendWithoutGpu, MakingItFailsSayingThereIsNoDevice) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count > 0) GTEST_SKIP() << "this machine has " << count << " CUDA device(s)";
  EXPECT_FALSE(why.empty());
  EXPECT_THAT(MakeCudnnBackend(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("cuDNN backend: no CUDA device")));
}

TEST(CudnnChecks, MessagesNameTheCallItsPlaceAndTheLibrarysError) {
  EXPECT_THAT(
      cudnn::CudaErrorMessage(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)",
                              "/src/phub/worker/backend/cudnn/x.cc", 12),
      ::testing::AllOf(HasSubstr("cudaMalloc(&p, n) failed at worker/backend/cudnn/x.cc:12: "
                                 "cudaErrorMemoryAllocation ("),
                       HasSubstr("out of GPU memory")));
  EXPECT_THAT(cudnn::CudnnErrorMessage(CUDNN_STATUS_BAD_PARAM, "cudnnPoolingForward(...)",
                                       "worker/backend/cudnn/pool.cc", 7),
              HasSubstr("cudnnPoolingForward(...) failed at worker/backend/cudnn/pool.cc:7: "
                        "CUDNN_STATUS_BAD_PARAM"));
  EXPECT_THAT(cudnn::CublasErrorMessage(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm(...)",
                                        "worker/backend/cudnn/linear.cc", 3),
              HasSubstr("cublasSgemm(...) failed at worker/backend/cudnn/linear.cc:3: "
                        "CUBLAS_STATUS_INVALID_VALUE ("));
}

// The checked-call macros return the library's failure as a Status from the enclosing function,
// with a code that says what to do: these need the libraries, not a GPU.
Status FailingCudnnCall(cudnnStatus_t status) {
  PHUB_RETURN_IF_CUDNN_ERROR(status);
  return absl::OkStatus();
}
Status FailingCudaCall(cudaError_t error) {
  PHUB_RETURN_IF_CUDA_ERROR(error);
  return absl::OkStatus();
}
StatusOr<int> FailingCublasCall(cublasStatus_t status) {
  PHUB_RETURN_IF_CUBLAS_ERROR(status);
  return 1;
}

TEST(CudnnChecks, FailedCallsReturnAStatusWhoseCodeSaysWhatToDo) {
  PHUB_EXPECT_OK(FailingCudnnCall(CUDNN_STATUS_SUCCESS));
  EXPECT_THAT(FailingCudnnCall(CUDNN_STATUS_NOT_SUPPORTED),
              StatusIs(absl::StatusCode::kUnimplemented,
                       ::testing::ContainsRegex("^status failed at .*cudnn_ops_test.cc:[0-9]+: "
                                                "CUDNN_STATUS_NOT_SUPPORTED")));
  EXPECT_THAT(FailingCudnnCall(CUDNN_STATUS_BAD_PARAM),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CUDNN_STATUS_BAD_PARAM")));
  EXPECT_THAT(FailingCudnnCall(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of GPU memory")));
  EXPECT_THAT(FailingCudnnCall(CUDNN_STATUS_EXECUTION_FAILED),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("check nvidia-smi")));
  EXPECT_THAT(FailingCudaCall(cudaErrorMemoryAllocation),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::ContainsRegex("^error failed at .*cudnn_ops_test.cc:[0-9]+: "
                                                "cudaErrorMemoryAllocation")));
  EXPECT_THAT(FailingCudaCall(cudaErrorNoDevice),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no usable GPU")));
  EXPECT_THAT(
      FailingCublasCall(CUBLAS_STATUS_ALLOC_FAILED),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("CUBLAS_STATUS_ALLOC_FAILED")));
}

TEST(CudnnDropoutMask, KeepsOneMinusPAndDependsOnSeedAndIndexOnly) {
  const float p = 0.3f;
  const std::uint64_t n = 1'000'000;
  std::uint64_t kept = 0, same_as_next_seed = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool keep = cudnn::DropoutKeeps(7, i, p);
    kept += keep;
    same_as_next_seed += keep == cudnn::DropoutKeeps(8, i, p);
    ASSERT_EQ(keep, cudnn::DropoutKeeps(7, i, p));
  }
  // Bernoulli(0.7): sd sqrt(n 0.21) = 458; 5 sd either way.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 2300);
  // Seeds 7 and 8 independent: agree with probability 0.7^2 + 0.3^2 = 0.58.
  EXPECT_NEAR(static_cast<double>(same_as_next_seed), 0.58 * n, 2500);
  EXPECT_TRUE(cudnn::DropoutKeeps(7, 5, 0.0f));  // p = 0 keeps everything
}

// ---- On a GPU ----

TEST_F(CudnnOpsTest, DescribesItself) {
  EXPECT_THAT(gpu_->Describe(), ::testing::StartsWith("cuDNN 9."));
  EXPECT_THAT(gpu_->Describe(), HasSubstr(" + cuBLAS "));
  EXPECT_THAT(gpu_->Describe(), HasSubstr(", sm_"));
  EXPECT_EQ(gpu_->device(), Device::kCuda);
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

struct ConvCase {
  Conv2dSpec spec;
  const char* name;
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class CudnnConv2dTest : public CudnnOpsTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(CudnnConv2dTest, ForwardAndBackwardAgreeWithOnednn) {
  const Conv2dSpec s = GetParam().spec;
  const Shape xs{s.batch, s.in_channels, s.height, s.width};
  const Shape ws{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  const Shape ys{s.batch, s.out_channels, s.out_height(), s.out_width()};
  const Shape bs{s.out_channels};
  const Tensor x = Random(xs), w = Random(ws, -0.5, 0.5), b = Random(bs), dy = Random(ys);
  PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeConv2d(s));
  PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeConv2d(s));
  Tensor y = Tensor::Empty(ys), dx = Tensor::Empty(xs), dw = Tensor::Empty(ws),
         db = Tensor::Empty(bs);
  PHUB_ASSERT_OK(cpu->Forward(x, w, b, y));
  PHUB_ASSERT_OK(cpu->Backward(x, w, dy, &dx, dw, db));

  Tensor gx = ToGpu(x), gw = ToGpu(w), gb = ToGpu(b), gdy = ToGpu(dy), gy = GpuEmpty(ys);
  Tensor gdx = GpuEmpty(xs), gdw = GpuFilled(ws, 7), gdb = GpuFilled(bs, 7);
  PHUB_ASSERT_OK(gpu->Forward(gx, gw, gb, gy));
  PHUB_ASSERT_OK(gpu->Backward(gx, gw, gdy, &gdx, gdw, gdb));
  EXPECT_TRUE(Agree(gy, y)) << "y";
  EXPECT_TRUE(Agree(gdx, dx)) << "dx";
  EXPECT_TRUE(Agree(gdw, dw)) << "dw";
  if (s.bias) {
    EXPECT_TRUE(Agree(gdb, db)) << "db";
  }
  // Without dx (a first layer): the same weight gradient.
  Tensor gdw2 = GpuFilled(ws, 7);
  PHUB_ASSERT_OK(gpu->Backward(gx, gw, gdy, nullptr, gdw2, gdb));
  EXPECT_TRUE(Agree(gdw2, dw)) << "dw without dx";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnConv2dTest,
    ::testing::Values(ConvCase{Conv(2, 3, 7, 7, 4, 3, 3, 1, 1, true), "same3x3"},
                      ConvCase{Conv(1, 2, 8, 6, 3, 3, 3, 2, 1, true), "stride2"},
                      ConvCase{Conv(2, 3, 5, 5, 2, 1, 1, 1, 0, false), "pointwise_no_bias"},
                      ConvCase{Conv(1, 2, 9, 9, 3, 5, 3, 2, 2, true), "rect_kernel_pad2"},
                      ConvCase{Conv(1, 1, 5, 5, 2, 2, 2, 2, 0, true), "floor_drops_last_row"},
                      // Shapes where cuDNN's tuned choice is Winograd, FFT or implicit GEMM.
                      ConvCase{Conv(8, 16, 32, 32, 16, 3, 3, 1, 1, false), "resnet56_stage1"},
                      ConvCase{Conv(4, 64, 28, 28, 64, 3, 3, 1, 1, false), "wide3x3"},
                      ConvCase{Conv(2, 3, 64, 64, 16, 7, 7, 2, 3, false), "stem7x7_stride2"},
                      ConvCase{Conv(4, 32, 14, 14, 64, 1, 1, 2, 0, false), "downsample1x1"},
                      ConvCase{Conv(2, 3, 67, 67, 24, 11, 11, 4, 2, true), "alexnet_conv1"},
                      // AlexNet b2's own shapes (cuDNN ranks other algorithms first there).
                      ConvCase{Conv(2, 3, 224, 224, 64, 11, 11, 4, 2, true), "alexnet_b2_conv1"},
                      ConvCase{Conv(2, 64, 27, 27, 192, 5, 5, 1, 2, true), "alexnet_b2_conv2"},
                      ConvCase{Conv(2, 192, 13, 13, 384, 3, 3, 1, 1, true), "alexnet_b2_conv3"},
                      ConvCase{Conv(2, 256, 13, 13, 256, 3, 3, 1, 1, true), "alexnet_b2_conv5"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CudnnOpsTest, LinearAgreesWithOnednn) {
  for (auto [n, in, out, bias] : {std::tuple<int, int, int, bool>{3, 7, 5, true},
                                  {3, 7, 5, false},
                                  {32, 300, 70, true},
                                  {1, 1, 1, true}}) {
    LinearSpec s{.batch = n, .in_features = in, .out_features = out, .bias = bias};
    const Tensor x = Random({n, in}), w = Random({out, in}), b = Random({out}),
                 dy = Random({n, out});
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeLinear(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeLinear(s));
    Tensor y = Tensor::Empty({n, out}), dx = Tensor::Empty({n, in}), dw = Tensor::Empty({out, in}),
           db = Tensor::Empty({out});
    PHUB_ASSERT_OK(cpu->Forward(x, w, b, y));
    PHUB_ASSERT_OK(cpu->Backward(x, w, dy, &dx, dw, db));
    Tensor gx = ToGpu(x), gw = ToGpu(w), gb = ToGpu(b), gy = GpuEmpty({n, out});
    Tensor gdx = GpuEmpty({n, in}), gdw = GpuFilled({out, in}, 7), gdb = GpuFilled({out}, 7);
    PHUB_ASSERT_OK(gpu->Forward(gx, gw, gb, gy));
    PHUB_ASSERT_OK(gpu->Backward(gx, gw, ToGpu(dy), &gdx, gdw, gdb));
    const std::string what = "N " + std::to_string(n) + " In " + std::to_string(in) + " Out " +
                             std::to_string(out) + (bias ? " bias" : "");
    EXPECT_TRUE(Agree(gy, y)) << what;
    EXPECT_TRUE(Agree(gdx, dx)) << what;
    EXPECT_TRUE(Agree(gdw, dw)) << what;
    if (bias) {
      EXPECT_TRUE(Agree(gdb, db)) << what;
    }
  }
}

TEST_F(CudnnOpsTest, BatchNormTrainingRunningStatsInferenceAndBackwardAgreeWithOnednn) {
  for (auto [n, c, h, w] :
       {std::tuple<int, int, int, int>{4, 3, 5, 6}, {8, 5, 1, 1}, {16, 64, 8, 8}}) {
    BatchNormSpec s{.batch = n, .channels = c, .height = h, .width = w, .momentum = 0.2f};
    const Shape xs{n, c, h, w}, cs{c};
    const Tensor x = Random(xs, -2, 3), gamma = Random(cs, 0.5, 1.5), beta = Random(cs),
                 run_mean0 = Random(cs), run_var0 = Random(cs, 0.5, 2), dy = Random(xs);
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeBatchNorm(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeBatchNorm(s));
    Tensor y = Tensor::Empty(xs), mean = Tensor::Empty(cs), var = Tensor::Empty(cs),
           run_mean = run_mean0.Clone(), run_var = run_var0.Clone();
    PHUB_ASSERT_OK(cpu->ForwardTraining(x, gamma, beta, y, mean, var, run_mean, run_var));
    Tensor dx = Tensor::Empty(xs), dg = Tensor::Empty(cs), db = Tensor::Empty(cs);
    PHUB_ASSERT_OK(cpu->Backward(x, gamma, mean, var, dy, dx, dg, db));
    Tensor yi = Tensor::Empty(xs);
    PHUB_ASSERT_OK(cpu->ForwardInference(x, gamma, beta, run_mean, run_var, yi));

    Tensor gx = ToGpu(x), gg = ToGpu(gamma), gbeta = ToGpu(beta), gy = GpuEmpty(xs);
    Tensor gmean = GpuEmpty(cs), gvar = GpuEmpty(cs), grm = ToGpu(run_mean0), grv = ToGpu(run_var0);
    PHUB_ASSERT_OK(gpu->ForwardTraining(gx, gg, gbeta, gy, gmean, gvar, grm, grv));
    Tensor gdx = GpuEmpty(xs), gdg = GpuFilled(cs, 7), gdb = GpuFilled(cs, 7);
    PHUB_ASSERT_OK(gpu->Backward(gx, gg, gmean, gvar, ToGpu(dy), gdx, gdg, gdb));
    Tensor gyi = GpuEmpty(xs);
    PHUB_ASSERT_OK(gpu->ForwardInference(gx, gg, gbeta, grm, grv, gyi));

    const std::string what = "[" + std::to_string(n) + ", " + std::to_string(c) + ", " +
                             std::to_string(h) + ", " + std::to_string(w) + "]";
    EXPECT_TRUE(Agree(gy, y)) << "y " << what;
    EXPECT_TRUE(Agree(gmean, mean)) << "save_mean " << what;
    EXPECT_TRUE(Agree(gvar, var)) << "save_var " << what;
    EXPECT_TRUE(Agree(grm, run_mean)) << "running_mean " << what;
    EXPECT_TRUE(Agree(grv, run_var)) << "running_var " << what;
    EXPECT_TRUE(Agree(gdx, dx)) << "dx " << what;
    EXPECT_TRUE(Agree(gdg, dg)) << "dgamma " << what;
    EXPECT_TRUE(Agree(gdb, db)) << "dbeta " << what;
    EXPECT_TRUE(Agree(gyi, yi)) << "inference y " << what;
  }
}

TEST_F(CudnnOpsTest, ActivationsInPlaceAndOutOfPlaceAgreeWithOnednn) {
  const Shape shape{2, 3, 4, 5};
  Tensor x = Random(shape, -3, 3);
  for (float& v : x.span()) v += v < 0 ? -0.01f : 0.01f;  // off ReLU's kink
  const Tensor dy = Random(shape);
  for (ActivationKind kind : {ActivationKind::kRelu, ActivationKind::kSigmoid}) {
    const char* what = kind == ActivationKind::kRelu ? "relu" : "sigmoid";
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeActivation(kind, shape));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeActivation(kind, shape));
    Tensor y = Tensor::Empty(shape), dx = Tensor::Empty(shape);
    PHUB_ASSERT_OK(cpu->Forward(x, y));
    PHUB_ASSERT_OK(cpu->Backward(y, dy, dx));

    Tensor gx = ToGpu(x), gy = GpuEmpty(shape), gdx = GpuEmpty(shape);
    PHUB_ASSERT_OK(gpu->Forward(gx, gy));
    PHUB_ASSERT_OK(gpu->Backward(gy, ToGpu(dy), gdx));
    EXPECT_TRUE(Agree(gy, y)) << what;
    EXPECT_TRUE(Agree(gdx, dx)) << what;
    // In place, as layers may run them: x becomes y, dy becomes dx.
    Tensor t = ToGpu(x), gd = ToGpu(dy);
    PHUB_ASSERT_OK(gpu->Forward(t, t));
    PHUB_ASSERT_OK(gpu->Backward(t, gd, gd));
    EXPECT_TRUE(Agree(t, y)) << what << " in place";
    EXPECT_TRUE(Agree(gd, dx)) << what << " in place";
  }
}

TEST_F(CudnnOpsTest, PoolingMaxAndAverageWithPaddingAgreeWithOnednn) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    for (auto [k, stride, pad, h] :
         {std::tuple<int, int, int, int>{2, 2, 0, 7}, {3, 2, 1, 7}, {3, 1, 1, 6}, {3, 2, 0, 13}}) {
      PoolSpec s{.kind = kind,
                 .batch = 2,
                 .channels = 3,
                 .height = h,
                 .width = 6,
                 .kernel_h = k,
                 .kernel_w = k,
                 .stride_h = stride,
                 .stride_w = stride,
                 .pad_h = pad,
                 .pad_w = pad};
      const Shape xs{2, 3, h, 6}, ys{2, 3, s.out_height(), s.out_width()};
      const Tensor x = Random(xs), dy = Random(ys);
      PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakePool(s));
      PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakePool(s));
      Tensor y = Tensor::Empty(ys), dx = Tensor::Empty(xs);
      PHUB_ASSERT_OK(cpu->Forward(x, y));
      PHUB_ASSERT_OK(cpu->Backward(x, y, dy, dx));
      Tensor gx = ToGpu(x), gy = GpuEmpty(ys), gdx = GpuEmpty(xs);
      PHUB_ASSERT_OK(gpu->Forward(gx, gy));
      PHUB_ASSERT_OK(gpu->Backward(gx, gy, ToGpu(dy), gdx));
      const std::string what = std::string(kind == PoolKind::kMax ? "max" : "avg") + " k" +
                               std::to_string(k) + " s" + std::to_string(stride) + " p" +
                               std::to_string(pad) + " h" + std::to_string(h);
      EXPECT_TRUE(Agree(gy, y)) << what;
      EXPECT_TRUE(Agree(gdx, dx)) << what;
    }
  }
}

// ops.h: "max pooling sends each window's gradient to its first maximum". After a ReLU whole
// windows are 0; here every window is a tie, in overlapping and in disjoint windows.
TEST_F(CudnnOpsTest, MaxPoolTiesSendTheGradientToTheFirstMaximum) {
  for (auto [k, stride] : {std::pair<int, int>{2, 2}, {3, 2}}) {
    PoolSpec s{.kind = PoolKind::kMax,
               .batch = 1,
               .channels = 2,
               .height = 7,
               .width = 7,
               .kernel_h = k,
               .kernel_w = k,
               .stride_h = stride,
               .stride_w = stride};
    const Shape xs{1, 2, 7, 7}, ys{1, 2, s.out_height(), s.out_width()};
    const Tensor x = Tensor::Filled(xs, 0.5f), dy = Random(ys, 1, 2);
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakePool(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakePool(s));
    Tensor y = Tensor::Empty(ys), dx = Tensor::Empty(xs);
    PHUB_ASSERT_OK(cpu->Forward(x, y));
    PHUB_ASSERT_OK(cpu->Backward(x, y, dy, dx));
    Tensor gx = ToGpu(x), gy = GpuEmpty(ys), gdx = GpuEmpty(xs);
    PHUB_ASSERT_OK(gpu->Forward(gx, gy));
    PHUB_ASSERT_OK(gpu->Backward(gx, gy, ToGpu(dy), gdx));
    EXPECT_TRUE(Agree(gdx, dx, 1e-6)) << "k" << k << " s" << stride;
  }
}

TEST_F(CudnnOpsTest, LocalResponseNormAgreesWithOnednn) {
  for (LrnSpec s : {LrnSpec{.batch = 2,
                   .channels = 7,
                   .height = 3,
                   .width = 2,
                   .size = 5,
                   .alpha = 0.5f,
                   .beta = 0.75f,
                   .k = 2.0f},
                    LrnSpec{.batch = 2,
                    .channels = 96,
                    .height = 13,
                    .width = 13,
                    .size = 5,
                    .alpha = 1e-4f,
                    .beta = 0.75f,
                    .k = 2.0f},  // AlexNet's
                    LrnSpec{.batch = 1,
                    .channels = 4,
                    .height = 2,
                    .width = 2,
                    .size = 3,
                    .alpha = 2.0f,
                    .beta = 0.5f,
                    .k = 1.0f}}) {
    const Shape xs{s.batch, s.channels, s.height, s.width};
    const Tensor x = Random(xs, -2, 2), dy = Random(xs);
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeLrn(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeLrn(s));
    Tensor y = Tensor::Empty(xs), dx = Tensor::Empty(xs);
    PHUB_ASSERT_OK(cpu->Forward(x, y));
    PHUB_ASSERT_OK(cpu->Backward(x, y, dy, dx));
    Tensor gx = ToGpu(x), gy = GpuEmpty(xs), gdx = GpuEmpty(xs);
    PHUB_ASSERT_OK(gpu->Forward(gx, gy));
    PHUB_ASSERT_OK(gpu->Backward(gx, gy, ToGpu(dy), gdx));
    EXPECT_TRUE(Agree(gy, y)) << "C " << s.channels << " size " << s.size;
    EXPECT_TRUE(Agree(gdx, dx)) << "C " << s.channels << " size " << s.size;
  }
  EXPECT_THAT(
      gpu_->MakeLrn({.size = 17}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size = 17, cuDNN takes at most 16")));
}

TEST_F(CudnnOpsTest, SoftmaxCrossEntropyAgreesWithOnednn) {
  for (auto [n, k] : {std::pair<int, int>{4, 10}, {64, 1000}, {1, 1}}) {
    SoftmaxCrossEntropySpec s{.batch = n, .classes = k};
    const Tensor logits = Random({n, k}, -5, 5);
    Tensor labels = Tensor::Empty({n});
    std::uniform_int_distribution<int> label(0, k - 1);
    for (float& l : labels.span()) l = static_cast<float>(label(rng_));
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeSoftmaxCrossEntropy(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeSoftmaxCrossEntropy(s));
    PHUB_ASSERT_OK_AND_ASSIGN(const double loss, cpu->Forward(logits, labels));
    Tensor d = Tensor::Empty({n, k});
    PHUB_ASSERT_OK(cpu->Backward(labels, d));
    PHUB_ASSERT_OK_AND_ASSIGN(const double gloss, gpu->Forward(ToGpu(logits), labels));
    Tensor gd = GpuFilled({n, k}, 7);
    PHUB_ASSERT_OK(gpu->Backward(labels, gd));
    EXPECT_NEAR(gloss, loss, 1e-5 * std::max(1.0, std::abs(loss))) << "N " << n << " K " << k;
    if (k == 1) {
      // One class: the softmax is exactly 1, the gradient exactly 0. oneDNN's vectorised exp
      // leaves ~1e-6 there (so any relative error to it is 1): compare with the exact answer.
      const Tensor host = ToHost(gd);
      for (float v : host.span()) EXPECT_NEAR(v, 0.0f, 1e-6) << "N " << n << " K 1";
      continue;
    }
    EXPECT_TRUE(Agree(gd, d)) << "N " << n << " K " << k;
  }
  PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeSoftmaxCrossEntropy({.batch = 2, .classes = 3}));
  Tensor logits = ToGpu(Random({2, 3})), labels = Tensor::Filled({2}, 1.0f);
  labels.data()[1] = 3;
  EXPECT_THAT(gpu->Forward(logits, labels),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label 1 is 3, must be a class index in [0, 3)")));
}

// Not compared with oneDNN: the masks come from different generators (dropout.cc). The GPU's is
// checked exactly against the documented function of (seed, index) instead.
TEST_F(CudnnOpsTest, DropoutAppliesTheSeedsMaskForwardAndBackward) {
  const Shape shape{4, 1000};
  const float p = 0.3f, scale = 1.0f / (1.0f - p);
  PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeDropout(shape, p));
  const Tensor x = Random(shape, 0.5, 1.5), dy = Random(shape, 0.5, 1.5);
  Tensor gy = GpuEmpty(shape), gdx = GpuEmpty(shape);
  PHUB_ASSERT_OK(gpu->Forward(ToGpu(x), gy, 7));
  PHUB_ASSERT_OK(gpu->Backward(ToGpu(dy), gdx));
  const Tensor y = ToHost(gy), dx = ToHost(gdx);
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    const bool keep = cudnn::DropoutKeeps(7, static_cast<std::uint64_t>(i), p);
    kept += keep;
    ASSERT_EQ(y.data()[i], keep ? x.data()[i] * scale : 0.0f) << i;
    ASSERT_EQ(dx.data()[i], keep ? dy.data()[i] * scale : 0.0f) << i;
  }
  EXPECT_NEAR(kept, 2800, 145);  // 4000 Bernoulli(0.7): sd 29, 5 sd either way
  Tensor other = GpuEmpty(shape);
  PHUB_ASSERT_OK(gpu->Forward(ToGpu(x), other, 8));
  EXPECT_GT(RelativeError(ToHost(other), y), 0.1) << "another seed, another mask";
  PHUB_ASSERT_OK_AND_ASSIGN(auto keep_all, gpu_->MakeDropout(shape, 0.0f));
  PHUB_ASSERT_OK(keep_all->Forward(ToGpu(x), other, 9));
  EXPECT_EQ(RelativeError(ToHost(other), x), 0.0);
  EXPECT_THAT(
      gpu_->MakeDropout(shape, 1.0f),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Dropout: p = 1, must be in [0, 1)")));
}

TEST_F(CudnnOpsTest, ShortcutAgreesWithOnednn) {
  for (auto [h, stride, out] :
       {std::tuple<int, int, int>{6, 2, 8}, {5, 2, 7}, {4, 1, 4}, {7, 3, 9}}) {
    ShortcutSpec s{.batch = 2,
                   .in_channels = 4,
                   .height = h,
                   .width = h + 1,
                   .out_channels = out,
                   .stride = stride};
    const Shape xs{2, 4, h, h + 1}, ys{2, out, s.out_height(), s.out_width()};
    const Tensor x = Random(xs), dy = Random(ys);
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeShortcut(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeShortcut(s));
    Tensor y = Tensor::Empty(ys), dx = Tensor::Empty(xs);
    PHUB_ASSERT_OK(cpu->Forward(x, y));
    PHUB_ASSERT_OK(cpu->Backward(dy, dx));
    Tensor gy = GpuFilled(ys, 7), gdx = GpuFilled(xs, 7);  // every element must be written
    PHUB_ASSERT_OK(gpu->Forward(ToGpu(x), gy));
    PHUB_ASSERT_OK(gpu->Backward(ToGpu(dy), gdx));
    EXPECT_TRUE(Agree(gy, y, 1e-7)) << "h " << h << " stride " << stride;
    EXPECT_TRUE(Agree(gdx, dx, 1e-7)) << "h " << h << " stride " << stride;
  }
}

TEST_F(CudnnOpsTest, LstmForwardAndBackwardAgreeWithOnednn) {
  for (LstmSpec s : {LstmSpec{.seq_len = 4, .batch = 3, .input_size = 5, .hidden_size = 6},
                     LstmSpec{.seq_len = 1, .batch = 2, .input_size = 3, .hidden_size = 3},
                     LstmSpec{.seq_len = 7, .batch = 8, .input_size = 32, .hidden_size = 64}}) {
    const std::int64_t T = s.seq_len, N = s.batch, I = s.input_size, H = s.hidden_size;
    const Shape xs{T, N, I}, ys{T, N, H}, wis{4 * H, I}, whs{4 * H, H}, bs{4 * H};
    const Tensor x = Random(xs), w_ih = Random(wis, -0.5, 0.5), w_hh = Random(whs, -0.5, 0.5),
                 b = Random(bs), dy = Random(ys);
    PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeLstm(s));
    PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeLstm(s));
    Tensor y = Tensor::Empty(ys), dx = Tensor::Empty(xs), dwi = Tensor::Filled(wis, 7),
           dwh = Tensor::Filled(whs, 7), db = Tensor::Filled(bs, 7);
    PHUB_ASSERT_OK(cpu->Forward(x, w_ih, w_hh, b, y, true));
    PHUB_ASSERT_OK(cpu->Backward(x, w_ih, w_hh, b, y, dy, &dx, dwi, dwh, db));

    Tensor gx = ToGpu(x), gwi = ToGpu(w_ih), gwh = ToGpu(w_hh), gb = ToGpu(b), gdy = ToGpu(dy);
    Tensor gy = GpuEmpty(ys), gdx = GpuEmpty(xs), gdwi = GpuFilled(wis, 7),
           gdwh = GpuFilled(whs, 7), gdb = GpuFilled(bs, 7);
    PHUB_ASSERT_OK(gpu->Forward(gx, gwi, gwh, gb, gy, true));
    for (int pass = 0; pass < 2; ++pass) {  // twice: the second must not add to the first
      PHUB_ASSERT_OK(gpu->Backward(gx, gwi, gwh, gb, gy, gdy, &gdx, gdwi, gdwh, gdb));
    }
    const std::string what = "T " + std::to_string(T) + " N " + std::to_string(N) + " I " +
                             std::to_string(I) + " H " + std::to_string(H);
    EXPECT_TRUE(Agree(gy, y)) << "y " << what;
    EXPECT_TRUE(Agree(gdx, dx)) << "dx " << what;
    EXPECT_TRUE(Agree(gdwi, dwi)) << "dw_ih " << what;
    EXPECT_TRUE(Agree(gdwh, dwh)) << "dw_hh " << what;
    EXPECT_TRUE(Agree(gdb, db)) << "dbias " << what;
    // Without dx: the same weight gradients.
    PHUB_ASSERT_OK(gpu->Backward(gx, gwi, gwh, gb, gy, gdy, nullptr, gdwi, gdwh, gdb));
    EXPECT_TRUE(Agree(gdwh, dwh)) << "dw_hh without dx " << what;
    // Inference computes the same y.
    Tensor gyi = GpuEmpty(ys);
    PHUB_ASSERT_OK(gpu->Forward(gx, gwi, gwh, gb, gyi, false));
    EXPECT_TRUE(Agree(gyi, y)) << "inference y " << what;
  }
}

TEST_F(CudnnOpsTest, EmbeddingAgreesWithOnednnAndRefusesBadIds) {
  EmbeddingSpec s{.count = 6, .vocab = 4, .dim = 3};
  const Tensor table = Random({4, 3}), dy = Random({6, 3});
  Tensor ids = Tensor::Empty({6});
  const float rows[] = {2, 0, 2, 3, 2, 1};  // repeated ids: their gradients add up
  std::copy(std::begin(rows), std::end(rows), ids.data());
  PHUB_ASSERT_OK_AND_ASSIGN(auto cpu, cpu_->MakeEmbedding(s));
  PHUB_ASSERT_OK_AND_ASSIGN(auto gpu, gpu_->MakeEmbedding(s));
  Tensor y = Tensor::Empty({6, 3}), dt = Tensor::Filled({4, 3}, 7);
  PHUB_ASSERT_OK(cpu->Forward(ids, table, y));
  PHUB_ASSERT_OK(cpu->Backward(ids, dy, dt));
  Tensor gids = ToGpu(ids), gt = ToGpu(table), gy = GpuEmpty({6, 3}), gdt = GpuFilled({4, 3}, 7);
  PHUB_ASSERT_OK(gpu->Forward(gids, gt, gy));
  PHUB_ASSERT_OK(gpu->Backward(gids, ToGpu(dy), gdt));
  EXPECT_TRUE(Agree(gy, y, 1e-7));
  EXPECT_TRUE(Agree(gdt, dt));

  const Tensor y_before = ToHost(gy);
  for (auto [bad, message] : {std::pair<float, const char*>{4, "id 4 at position 2"},
                              {-1, "id -1 at position 2"},
                              {1.5f, "id 1.5 at position 2"}}) {
    Tensor bad_ids = ids.Clone();
    bad_ids.data()[2] = bad;
    Tensor gbad = ToGpu(bad_ids);
    EXPECT_THAT(gpu->Forward(gbad, gt, gy),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
    EXPECT_THAT(gpu->Backward(gbad, ToGpu(dy), gdt),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)));
  }
  EXPECT_EQ(RelativeError(ToHost(gy), y_before), 0.0) << "y written despite a bad id";
}

TEST_F(CudnnOpsTest, AddAccumulateAndCopiesAreExact) {
  const Shape shape{10, 100};
  const Tensor a = Random(shape), b = Random(shape);
  Tensor sum = Tensor::Empty(shape);
  for (std::int64_t i = 0; i < shape.numel(); ++i) sum.data()[i] = a.data()[i] + b.data()[i];
  Tensor ga = ToGpu(a), gb = ToGpu(b), gy = GpuEmpty(shape);
  PHUB_ASSERT_OK(gpu_->Add(ga, gb, gy));
  EXPECT_EQ(RelativeError(ToHost(gy), sum), 0.0) << "y = a + b";
  Tensor alias_a = ToGpu(a);
  PHUB_ASSERT_OK(gpu_->Add(alias_a, gb, alias_a));
  EXPECT_EQ(RelativeError(ToHost(alias_a), sum), 0.0) << "a = a + b";
  Tensor alias_b = ToGpu(b);
  PHUB_ASSERT_OK(gpu_->Add(ga, alias_b, alias_b));
  EXPECT_EQ(RelativeError(ToHost(alias_b), sum), 0.0) << "b = a + b";
  Tensor acc = ToGpu(a);
  PHUB_ASSERT_OK(gpu_->Accumulate(gb, acc));
  EXPECT_EQ(RelativeError(ToHost(acc), sum), 0.0) << "a += b";
  Tensor copy = GpuEmpty(shape);
  PHUB_ASSERT_OK(gpu_->Copy(ga, copy));
  PHUB_ASSERT_OK(gpu_->Synchronize());
  EXPECT_EQ(RelativeError(ToHost(copy), a), 0.0) << "copy";
}

TEST_F(CudnnOpsTest, BadSpecsAndTensorsAreRefusedAsOnTheCpu) {
  // Spec validation is shared (ops.cc): the same message from both backends.
  for (const Conv2dSpec& bad :
       {Conv(1, 3, 5, 5, 4, 7, 7, 1, 0, true), Conv(1, 3, 5, 5, 0, 3, 3, 1, 1, true)}) {
    const Status on_cpu = cpu_->MakeConv2d(bad).status();
    const Status on_gpu = gpu_->MakeConv2d(bad).status();
    EXPECT_THAT(on_cpu, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Conv2d: ")));
    EXPECT_EQ(on_gpu, on_cpu);
  }
  // A host tensor where a device one belongs, and a wrong size.
  PHUB_ASSERT_OK_AND_ASSIGN(auto op, gpu_->MakeConv2d(Conv(1, 3, 5, 5, 4, 3, 3, 1, 1, true)));
  Tensor w = GpuEmpty({4, 3, 3, 3}), b = GpuEmpty({4}), y = GpuEmpty({1, 4, 5, 5});
  Tensor host_x = Tensor::Zeros({1, 3, 5, 5});
  EXPECT_THAT(
      op->Forward(host_x, w, b, y),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("Conv2d forward: x is [1, 3, 5, 5] cpu, expected [1, 3, 5, 5] cuda")));
  Tensor small_x = GpuEmpty({1, 3, 5, 4});
  EXPECT_THAT(op->Forward(small_x, w, b, y),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x is [1, 3, 5, 4] cuda")));
}

// ---- Whole models ----

// The single-GPU optimizer step (Backend::OptimizerStep) against the CPU's, which is phubd's
// kernel (checked against float64 in tests/phub/kernels): every kind, with weight decay, over
// several steps so that the state carries over. nvcc fuses multiply-adds, GCC does not: the
// two differ by rounding only.
TEST_F(CudnnOpsTest, OptimizerStepAgreesWithTheCpuKernelForEveryKind) {
  using kernels::OptimizerKind;
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                             OptimizerKind::kNesterov, OptimizerKind::kAdam}) {
    const kernels::OptimizerConfig config{.kind = kind, .lr = 0.05f, .weight_decay = 1e-3f};
    const std::int64_t n = 100003;  // not a multiple of a block
    Tensor w = Random({n}), gw = ToGpu(w);
    std::vector<Tensor> state, gstate;
    for (int a = 0; a < kernels::StateArrays(kind); ++a) {
      state.push_back(Tensor::Zeros({n}));
      gstate.push_back(GpuFilled({n}, 0.0f));
    }
    for (std::uint64_t step = 1; step <= 3; ++step) {
      const Tensor g = Random({n});
      PHUB_ASSERT_OK(cpu_->OptimizerStep(g, w, state, config, step));
      PHUB_ASSERT_OK(gpu_->OptimizerStep(ToGpu(g), gw, gstate, config, step));
    }
    const std::string what = kernels::OptimizerName(kind);
    EXPECT_TRUE(Agree(gw, w, 1e-6)) << what << " weights";
    for (std::size_t a = 0; a < state.size(); ++a) {
      EXPECT_TRUE(Agree(gstate[a], state[a], 1e-6)) << what << " state " << a;
    }
  }
  // The checks are the CPU's (ops_checks.h): a missing state array is refused.
  Tensor gw = GpuFilled({4}, 1.0f);
  EXPECT_THAT(gpu_->OptimizerStep(GpuFilled({4}, 1.0f), gw, {},
                                  {.kind = kernels::OptimizerKind::kMomentum}, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("momentum keeps 1")));
}

struct ModelCase {
  const char* model;
  std::int64_t batch;
  // Forward in training mode; AlexNet's forward runs in inference mode instead, because its
  // dropout layers would draw different masks on the two backends (dropout is then a copy).
  bool training;
};
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.model << ", batch " << c.batch; }

class CudnnModelTest : public CudnnOpsTest, public ::testing::WithParamInterface<ModelCase> {};

// The same model, seed and batch on both backends: loss and every parameter's gradient agree.
// How well is set by the model itself: a ReLU network's gradient jumps where a pre-activation
// crosses zero, and batch norm's backward amplifies what changes where a small batch leaves few
// values per channel. On the CPU alone, moving every input by 16 ulps (2^-19 relative, 50x
// under an op's 1e-4 bar) moves ResNet-56 b4's gradients by up to 1.3e-2 and ResNet-50 b2's by
// up to 6.5e-2 (measured 2026-11-25 with this test's batches); on an H100 the GPU's gradients
// differ from the CPU's by up to 2.4e-3 and 3.3e-2. So each gradient's bar is the larger of
// 1e-3 and twice that CPU conditioning, measured here for the same batch: a wrong gradient is
// off by O(1), rounding by no more than the problem itself amplifies.
TEST_P(CudnnModelTest, LossAndEveryGradientAgreeWithOnednn) {
  constexpr double kModelTolerance = 1e-3;
  constexpr double kConditioningFactor = 2;
  const ModelCase c = GetParam();
  PHUB_ASSERT_OK_AND_ASSIGN(auto on_cpu, MakeModel(c.model, c.batch));
  PHUB_ASSERT_OK_AND_ASSIGN(auto nudged, MakeModel(c.model, c.batch));
  PHUB_ASSERT_OK_AND_ASSIGN(auto on_gpu, MakeModel(c.model, c.batch));
  PHUB_ASSERT_OK(on_cpu->Build(*cpu_, 5));
  PHUB_ASSERT_OK(nudged->Build(*cpu_, 5));
  // The convolution algorithms chosen for the GPU model, logged at debug, show in the output.
  spdlog::set_level(spdlog::level::debug);
  PHUB_ASSERT_OK(on_gpu->Build(*gpu_, 5));
  spdlog::set_level(spdlog::level::info);
  // Images or token ids, and labels, on the host.
  PHUB_ASSERT_OK_AND_ASSIGN(Batch batch, MakeSyntheticBatch(*on_cpu));
  FillSynthetic(*on_cpu, batch, rng_());
  const Tensor& x = batch.x;
  const Tensor& labels = batch.labels;

  PHUB_ASSERT_OK_AND_ASSIGN(const Tensor logits, on_cpu->Forward(x, c.training));
  PHUB_ASSERT_OK_AND_ASSIGN(const double loss, on_cpu->Loss(labels));
  PHUB_ASSERT_OK(on_cpu->Backward(labels));
  // The conditioning: the same on the CPU with every input moved by 16 ulps (token ids stay).
  Tensor x2 = Tensor::Empty(x.shape());
  std::bernoulli_distribution up(0.5);
  const bool tokens = c.model == std::string("lstm");
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float nudge = tokens ? 0.0f : std::ldexp(up(rng_) ? 1.0f : -1.0f, -19);
    x2.data()[i] = x.data()[i] * (1 + nudge);
  }
  PHUB_ASSERT_OK(nudged->Forward(x2, c.training).status());
  PHUB_ASSERT_OK(nudged->Loss(labels).status());
  PHUB_ASSERT_OK(nudged->Backward(labels));
  const Tensor gx = ToGpu(x);
  PHUB_ASSERT_OK_AND_ASSIGN(const Tensor glogits, on_gpu->Forward(gx, c.training));
  PHUB_ASSERT_OK_AND_ASSIGN(const double gloss, on_gpu->Loss(labels));
  PHUB_ASSERT_OK(on_gpu->Backward(labels));

  EXPECT_TRUE(Agree(glogits, logits, kModelTolerance)) << "logits";
  EXPECT_NEAR(gloss, loss, kModelTolerance * std::abs(loss));
  auto cpu_params = on_cpu->parameters();
  auto nudged_params = nudged->parameters();
  auto gpu_params = on_gpu->parameters();
  ASSERT_EQ(gpu_params.size(), cpu_params.size());
  double worst_conditioning = 0, worst_ratio = 0;
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    ASSERT_EQ(gpu_params[i]->name, cpu_params[i]->name);
    EXPECT_TRUE(Agree(gpu_params[i]->value, cpu_params[i]->value, 1e-7))
        << cpu_params[i]->name << " initial value";
    const double conditioning = RelativeError(nudged_params[i]->grad, cpu_params[i]->grad);
    const double bar = std::max(kModelTolerance, kConditioningFactor * conditioning);
    EXPECT_TRUE(Agree(gpu_params[i]->grad, cpu_params[i]->grad, bar))
        << cpu_params[i]->name << " gradient (CPU conditioning " << conditioning << ")";
    worst_conditioning = std::max(worst_conditioning, conditioning);
    const double error = RelativeError(ToHost(gpu_params[i]->grad), cpu_params[i]->grad);
    worst_ratio = std::max(worst_ratio, error / std::max(kModelTolerance, conditioning));
  }
  std::printf("%s b%lld: CPU conditioning up to %.3g; GPU error at most %.3g x max(1e-3, it)\n",
              c.model, static_cast<long long>(c.batch), worst_conditioning, worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, CudnnModelTest,
    ::testing::Values(ModelCase{"fashion-cnn", 8, true}, ModelCase{"fcn5", 8, true},
                      ModelCase{"resnet56", 4, true}, ModelCase{"alexnet", 2, false},
                      ModelCase{"resnet50", 2, true}, ModelCase{"lstm", 4, true}),
    [](const auto& info) {
      std::string name = info.param.model;
      std::erase(name, '-');
      return name;
    });

}  // namespace
}  // namespace phub::worker
