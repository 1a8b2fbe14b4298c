// Which cuDNN algorithm each direction of a convolution uses, chosen by measurement: cuDNN's
// Find*Ex runs every algorithm that fits the workspace on scratch tensors of the real shape and
// ranks them by time (PyTorch's cudnn.benchmark). That takes from milliseconds to a second, so
// it happens once per shape in the process: results are cached, process-wide, by device, math
// mode and Conv2dSpec (a ResNet has a few dozen convolutions but only a handful of shapes, and
// several models or backends in one process share the results). Thread-safe.
#pragma once

#include <cstddef>

#include "worker/backend/cudnn/cudnn_context.h"
#include "worker/backend/ops.h"

namespace phub::worker::cudnn {

struct ConvChoice {
  int algo = 0;                           // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;  // set on the convolution descriptor that runs it
  std::size_t workspace = 0;              // bytes
};

struct ConvAlgorithms {
  ConvChoice forward, backward_data, backward_filter;
};

// The descriptors of a convolution in NCHW float32, made by Init. REQUIRES: Validate(spec)
// passed.
struct ConvDescriptors {
  Status Init(const Conv2dSpec& spec, cudnnMathType_t math);
  TensorDesc x, y;
  FilterDesc w;
  ConvolutionDesc conv;
};

// Makes conv `spec`'s padding and strides (cross-correlation, as PyTorch's Conv2d) with `math`.
Status SetConvolution(ConvolutionDesc& conv, const Conv2dSpec& spec, cudnnMathType_t math);

// The fastest algorithm per direction (cached). Without TF32 (ctx.allow_tf32()), only
// algorithms that cuDNN reports as strict float32 (FMA math) and that do not compute through
// an FFT or Winograd transform are taken; Unimplemented when no algorithm qualifies. A failure is not cached: the next call measures again.
StatusOr<ConvAlgorithms> FindConvAlgorithms(Context& ctx, const Conv2dSpec& spec);

}  // namespace phub::worker::cudnn
