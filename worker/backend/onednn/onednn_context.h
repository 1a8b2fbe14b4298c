// What every oneDNN op shares: the CPU engine and stream, and the helpers that wrap our plain
// tensors as oneDNN memory and reorder them to and from the layouts oneDNN's primitives choose.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "oneapi/dnnl/dnnl.hpp"
#include "worker/tensor/tensor.h"

namespace phub::worker::onednn {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// A plain (row-major) f32 descriptor: nchw for rank 4, nc for 2, a for 1.
dnnl::memory::desc PlainDesc(const dims& shape);
// A descriptor that lets the primitive choose the layout.
dnnl::memory::desc AnyDesc(const dims& shape);
// Our tensor's bytes seen as oneDNN memory of the plain layout (no copy).
dnnl::memory Wrap(Context& ctx, const dims& shape, const Tensor& t);
// Throws std::invalid_argument naming the op, the argument and both shapes when t is not
// `shape` (element count) on the CPU.
void Check(const char* op, const char* arg, const Tensor& t, const dims& shape);

// A tensor as the primitive wants it: the user's memory when the layouts agree, else a scratch
// buffer (allocated once) the user's bytes are reordered into (In) or out of (Out).
class Staged {
 public:
  Staged() = default;
  Staged(Context& ctx, const dims& shape, const dnnl::memory::desc& wanted);
  // The user's bytes in a layout other than the plain row-major one (an LSTM's ldgoi weights).
  Staged(Context& ctx, const dnnl::memory::desc& user, const dnnl::memory::desc& wanted);
  // Input: returns memory in the wanted layout holding t's values.
  dnnl::memory In(Context& ctx, const Tensor& t);
  // Output: memory to give the primitive; call Finish after it ran to land it in t.
  dnnl::memory Out(Context& ctx, Tensor& t);
  void Finish(Context& ctx, Tensor& t);
  // Zeroes what Out returns (for primitives that accumulate into their output).
  void ZeroOut(Context& ctx, Tensor& t);

 private:
  dnnl::memory User(Context& ctx, const Tensor& t) const;

  dnnl::memory::desc plain_, wanted_;
  dnnl::memory scratch_;  // empty when no reorder is needed
  dnnl::reorder to_wanted_, to_plain_;  // made once: creating a reorder JIT-compiles it
};

}  // namespace phub::worker::onednn
