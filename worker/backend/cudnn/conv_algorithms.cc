#include "worker/backend/cudnn/conv_algorithms.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/backend/cudnn/kernels.h"

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

// Algorithms that compute in a transformed space (FFT, Winograd): in float32 their rounding
// error grows with the transform's size and is relative to the largest terms, not to the
// result, so where a sum cancels (a weight gradient over a batch) they can be off by percents:
// on an H200, AlexNet b2's conv weight gradients through them differed from oneDNN's by up to
// 4 % where every other algorithm stays under 1e-3. Strict float32 mode keeps them out, as it
// keeps TF32 out; --tf32 (speed over the last bits) takes them.
bool Transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool Transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool Transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

std::string Describe(const Conv2dSpec& s) {
  return absl::StrCat("[", s.batch, ", ", s.in_channels, ", ", s.height, ", ", s.width, "] -> ",
                      s.out_channels, " channels, kernel ", s.kernel_h, "x", s.kernel_w,
                      ", stride ", s.stride_h, ", pad ", s.pad_h);
}

// The first (fastest) result that ran and that the math mode allows. cuDNN sorts by time.
// Logs the ranking (algorithm number, milliseconds, and why one was passed over), so that a
// choice can be traced when a model's numbers move.
template <class Perf>
StatusOr<ConvChoice> Fastest(const Perf* perf, int count, bool allow_tf32, const char* direction,
                             const Conv2dSpec& s) {
  std::string ranking;
  std::optional<ConvChoice> choice;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    const char* passed_over = nullptr;
    if (!allow_tf32 && perf[i].mathType != CUDNN_FMA_MATH) passed_over = "tf32";
    if (!allow_tf32 && Transforms(perf[i].algo)) passed_over = "transform";
    absl::StrAppend(&ranking, ranking.empty() ? "" : ", ", static_cast<int>(perf[i].algo), " ",
                    absl::SixDigits(perf[i].time), " ms",
                    passed_over ? absl::StrCat(" (", passed_over, ")") : std::string(),
                    !passed_over && !choice ? " *" : "");
    if (!passed_over && !choice) {
      choice = ConvChoice{static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory};
    }
  }
  spdlog::debug("cuDNN {} algorithms for {}: {}", direction, Describe(s), ranking);
  if (choice) return *choice;
  return absl::UnimplementedError(
      absl::StrCat("cuDNN found no ", direction, " algorithm for the convolution ", Describe(s),
                   " (", count, " tried", allow_tf32 ? "" : ", float32 math only", ")"));
}

StatusOr<ConvAlgorithms> Measure(Context& ctx, const Conv2dSpec& s) {
  ConvDescriptors d;
  PHUB_RETURN_IF_ERROR(d.Init(s, ctx.math_type()));
  const auto bytes = [](std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); };
  // Scratch tensors of the real shape, freed when tuning is done, holding uniform values:
  // garbage could hold NaNs or denormals that time differently, and zeros can run faster than
  // real data (METHOD.md saw it with a matrix product on an H200).
  PHUB_ASSIGN_OR_RETURN(
      DeviceMemory x, DeviceMemory::Allocate(bytes(s.batch * s.in_channels * s.height * s.width)));
  PHUB_ASSIGN_OR_RETURN(
      DeviceMemory w,
      DeviceMemory::Allocate(bytes(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w)));
  PHUB_ASSIGN_OR_RETURN(
      DeviceMemory y,
      DeviceMemory::Allocate(bytes(s.batch * s.out_channels * s.out_height() * s.out_width())));
  std::uint64_t seed = 1;
  for (DeviceMemory* m : {&x, &w, &y}) {
    PHUB_RETURN_IF_CUDA_ERROR(LaunchFillUniform(static_cast<float*>(m->get()),
                                                static_cast<std::int64_t>(m->bytes() / sizeof(float)),
                                                seed++, ctx.stream()));
  }
  std::size_t free = 0, total = 0;
  PHUB_RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free, &total));
  PHUB_ASSIGN_OR_RETURN(DeviceMemory ws,
                        DeviceMemory::Allocate(std::min(kMaxTuningWorkspace, free / 2)));
  PHUB_RETURN_IF_ERROR(ctx.Synchronize());

  const bool tf32 = ctx.allow_tf32();
  ConvAlgorithms out;
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnFindConvolutionForwardAlgorithmEx(
      ctx.cudnn(), d.x, x.get(), d.w, w.get(), d.conv, d.y, y.get(),
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd, ws.get(), ws.bytes()));
  PHUB_ASSIGN_OR_RETURN(out.forward, Fastest(fwd, n, tf32, "forward", s));

  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(
      ctx.cudnn(), d.w, w.get(), d.y, y.get(), d.conv, d.x, x.get(),
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, data, ws.get(), ws.bytes()));
  PHUB_ASSIGN_OR_RETURN(out.backward_data, Fastest(data, n, tf32, "backward-data", s));

  cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      ctx.cudnn(), d.x, x.get(), d.y, y.get(), d.conv, d.w, w.get(),
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, filter, ws.get(), ws.bytes()));
  PHUB_ASSIGN_OR_RETURN(out.backward_filter, Fastest(filter, n, tf32, "backward-filter", s));
  return out;
}

}  // namespace

Status SetConvolution(ConvolutionDesc& conv, const Conv2dSpec& s, cudnnMathType_t math) {
  const char* op = "Conv2d";
  PHUB_ASSIGN_OR_RETURN(const int pad_h, ToInt(op, "pad_h", s.pad_h));
  PHUB_ASSIGN_OR_RETURN(const int pad_w, ToInt(op, "pad_w", s.pad_w));
  PHUB_ASSIGN_OR_RETURN(const int stride_h, ToInt(op, "stride_h", s.stride_h));
  PHUB_ASSIGN_OR_RETURN(const int stride_w, ToInt(op, "stride_w", s.stride_w));
  PHUB_RETURN_IF_ERROR(conv.Init());
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetConvolution2dDescriptor(
      conv, pad_h, pad_w, stride_h, stride_w, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetConvolutionMathType(conv, math));
  return absl::OkStatus();
}

Status ConvDescriptors::Init(const Conv2dSpec& s, cudnnMathType_t math) {
  const char* op = "Conv2d";
  PHUB_RETURN_IF_ERROR(SetNchw(x, op, s.batch, s.in_channels, s.height, s.width));
  PHUB_RETURN_IF_ERROR(SetNchw(y, op, s.batch, s.out_channels, s.out_height(), s.out_width()));
  PHUB_ASSIGN_OR_RETURN(const int out_c, ToInt(op, "out_channels", s.out_channels));
  PHUB_ASSIGN_OR_RETURN(const int in_c, ToInt(op, "in_channels", s.in_channels));
  PHUB_ASSIGN_OR_RETURN(const int kernel_h, ToInt(op, "kernel_h", s.kernel_h));
  PHUB_ASSIGN_OR_RETURN(const int kernel_w, ToInt(op, "kernel_w", s.kernel_w));
  PHUB_RETURN_IF_ERROR(w.Init());
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                        out_c, in_c, kernel_h, kernel_w));
  PHUB_RETURN_IF_ERROR(SetConvolution(conv, s, math));
  // cuDNN's output size (symmetric padding, floor) must be ours (ops.h); a mismatch would be a
  // bug here, not bad input: Internal.
  int n = 0, c = 0, h = 0, wd = 0;
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd));
  if (h != s.out_height() || wd != s.out_width() || c != s.out_channels || n != s.batch) {
    return absl::InternalError(absl::StrCat(
        "Conv2d: cuDNN's output [", n, ", ", c, ", ", h, ", ", wd, "] differs from the spec's [",
        s.batch, ", ", s.out_channels, ", ", s.out_height(), ", ", s.out_width(), "]"));
  }
  return absl::OkStatus();
}

StatusOr<ConvAlgorithms> FindConvAlgorithms(Context& ctx, const Conv2dSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, ConvAlgorithms> cache;
  // Measuring under the lock: two threads asking for one shape measure it once, and the
  // timings of one are not disturbed by the other's.
  std::lock_guard lock(mutex);
  const std::string key = Key(ctx, spec);
  auto it = cache.find(key);
  if (it == cache.end()) {
    PHUB_ASSIGN_OR_RETURN(ConvAlgorithms measured, Measure(ctx, spec));
    it = cache.emplace(key, measured).first;
  }
  return it->second;
}

}  // namespace phub::worker::cudnn
