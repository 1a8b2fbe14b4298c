#include "worker/backend/cudnn/conv_algorithms.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

namespace phub::worker::cudnn {
namespace {

// The Find calls try only algorithms whose workspace fits what they are given: this much at most
// (and at most half the free memory), which admits the FFT and Winograd variants of ResNet-50's
// layers at the batch sizes we train with.
constexpr std::size_t kMaxTuningWorkspace = std::size_t{1} << 30;

std::string Key(const Context& ctx, const Conv2dSpec& s) {
  return absl::StrCat(ctx.device(), ctx.allow_tf32() ? "/tf32/" : "/fp32/", s.batch, ",",
                      s.in_channels, ",", s.height, ",", s.width, ",", s.out_channels, ",",
                      s.kernel_h, ",", s.kernel_w, ",", s.stride_h, ",", s.stride_w, ",", s.pad_h,
                      ",", s.pad_w);
}

// The first (fastest) result that ran and uses an allowed math type. cuDNN sorts by time.
template <class Perf>
ConvChoice Fastest(const Perf* perf, int count, bool allow_tf32, const char* direction,
                   const Conv2dSpec& s) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (!allow_tf32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
    return {static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory};
  }
  throw std::runtime_error(
      absl::StrCat("cuDNN found no ", direction, " algorithm for the convolution [", s.batch, ", ",
                   s.in_channels, ", ", s.height, ", ", s.width, "] -> ", s.out_channels,
                   " channels, kernel ", s.kernel_h, "x", s.kernel_w, " (", count, " tried",
                   allow_tf32 ? "" : ", float32 math only", ")"));
}

ConvAlgorithms Measure(Context& ctx, const Conv2dSpec& s) {
  ConvDescriptors d(s, ctx.math_type());
  const auto bytes = [](std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); };
  // Scratch tensors of the real shape (zeros: garbage could hold NaNs or denormals that time
  // differently), freed when tuning is done.
  DeviceMemory x(bytes(s.batch * s.in_channels * s.height * s.width));
  DeviceMemory w(bytes(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w));
  DeviceMemory y(bytes(s.batch * s.out_channels * s.out_height() * s.out_width()));
  for (DeviceMemory* m : {&x, &w, &y}) {
    PHUB_CUDA_CHECK(cudaMemsetAsync(m->get(), 0, m->bytes(), ctx.stream()));
  }
  std::size_t free = 0, total = 0;
  PHUB_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  DeviceMemory ws(std::min(kMaxTuningWorkspace, free / 2));
  ctx.Synchronize();

  const bool tf32 = ctx.allow_tf32();
  ConvAlgorithms out;
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  PHUB_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
      ctx.cudnn(), d.x, x.get(), d.w, w.get(), d.conv, d.y, y.get(),
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd, ws.get(), ws.bytes()));
  out.forward = Fastest(fwd, n, tf32, "forward", s);

  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  PHUB_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
      ctx.cudnn(), d.w, w.get(), d.y, y.get(), d.conv, d.x, x.get(),
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, data, ws.get(), ws.bytes()));
  out.backward_data = Fastest(data, n, tf32, "backward-data", s);

  cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  PHUB_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      ctx.cudnn(), d.x, x.get(), d.y, y.get(), d.conv, d.w, w.get(),
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, filter, ws.get(), ws.bytes()));
  out.backward_filter = Fastest(filter, n, tf32, "backward-filter", s);
  return out;
}

}  // namespace

void SetConvolution(const ConvolutionDesc& conv, const Conv2dSpec& s, cudnnMathType_t math) {
  const char* op = "Conv2d";
  PHUB_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      conv, ToInt(op, "pad_h", s.pad_h), ToInt(op, "pad_w", s.pad_w),
      ToInt(op, "stride_h", s.stride_h), ToInt(op, "stride_w", s.stride_w), 1, 1,
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  PHUB_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
}

ConvDescriptors::ConvDescriptors(const Conv2dSpec& s, cudnnMathType_t math) {
  const char* op = "Conv2d";
  SetNchw(x, op, s.batch, s.in_channels, s.height, s.width);
  SetNchw(y, op, s.batch, s.out_channels, s.out_height(), s.out_width());
  PHUB_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ToInt(op, "out_channels", s.out_channels),
      ToInt(op, "in_channels", s.in_channels), ToInt(op, "kernel_h", s.kernel_h),
      ToInt(op, "kernel_w", s.kernel_w)));
  SetConvolution(conv, s, math);
  // cuDNN's output size (symmetric padding, floor) must be ours (ops.h); a mismatch would be a
  // bug here, not bad input.
  int n = 0, c = 0, h = 0, wd = 0;
  PHUB_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd));
  if (h != s.out_height() || wd != s.out_width() || c != s.out_channels || n != s.batch) {
    throw std::logic_error(absl::StrCat(
        "Conv2d: cuDNN's output [", n, ", ", c, ", ", h, ", ", wd, "] differs from the spec's [",
        s.batch, ", ", s.out_channels, ", ", s.out_height(), ", ", s.out_width(), "]"));
  }
}

ConvAlgorithms FindConvAlgorithms(Context& ctx, const Conv2dSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, ConvAlgorithms> cache;
  // Measuring under the lock: two threads asking for one shape measure it once, and the
  // timings of one are not disturbed by the other's.
  std::lock_guard lock(mutex);
  const std::string key = Key(ctx, spec);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, Measure(ctx, spec)).first;
  return it->second;
}

}  // namespace phub::worker::cudnn
