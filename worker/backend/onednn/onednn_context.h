// What every oneDNN op shares: the CPU engine and stream, and the helpers that wrap our plain
// tensors as oneDNN memory and reorder them to and from the layouts oneDNN's primitives choose.
//
// Errors: oneDNN's C++ API reports failures by throwing dnnl::error (and std::bad_alloc from its
// wrappers). That is caught right at the library boundary, OnednnCall below, the checked
// wrapper of this backend, and turned into a Status naming the op and oneDNN's status; nothing
// thrown by oneDNN leaves an op. Everything oneDNN is called with runs inside one.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include "oneapi/dnnl/dnnl.hpp"
#include "phub/common/status.h"
#include "worker/tensor/tensor.h"

namespace phub::worker::onednn {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

// Made by OnednnBackend, inside an OnednnCall (creating the engine and stream can throw).
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// The Status for a failure oneDNN threw while running `what` ("Conv2d forward"):
// ResourceExhausted when it was out of memory, Internal otherwise (a bad descriptor is a bug
// here: specs and tensors are validated before oneDNN sees them).
Status OnednnError(const char* what, const dnnl::error& e);
Status HostMemoryError(const char* what);

// Runs f (which calls oneDNN) and returns its failure as a Status instead of an exception.
template <class F>
Status OnednnCall(const char* what, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return absl::OkStatus();
  } catch (const dnnl::error& e) {
    return OnednnError(what, e);
  } catch (const std::bad_alloc&) {
    return HostMemoryError(what);
  }
}

// An op object of type T made from args (its constructor builds oneDNN primitives), as the
// interface type Op, or the failure as a Status.
template <class Op, class T, class... Args>
StatusOr<std::unique_ptr<Op>> MakeOp(const char* what, Args&&... args) {
  std::unique_ptr<Op> op;
  PHUB_RETURN_IF_ERROR(
      OnednnCall(what, [&] { op = std::make_unique<T>(std::forward<Args>(args)...); }));
  return op;
}

// A plain (row-major) f32 descriptor: nchw for rank 4, nc for 2, a for 1.
dnnl::memory::desc PlainDesc(const dims& shape);
// A descriptor that lets the primitive choose the layout.
dnnl::memory::desc AnyDesc(const dims& shape);
// Our tensor's bytes seen as oneDNN memory of the plain layout (no copy). REQUIRES: the op
// checked t (ops_checks.h): a cpu tensor of shape's element count.
dnnl::memory Wrap(Context& ctx, const dims& shape, const Tensor& t);

// A tensor as the primitive wants it: the user's memory when the layouts agree, else a scratch
// buffer (allocated once) the user's bytes are reordered into (In) or out of (Out). Every call
// may throw dnnl::error (run it inside an OnednnCall). REQUIRES: the tensors passed hold the
// bytes of the user descriptor (checked: the op's check of the same tensor, ops_checks.h,
// guarantees it).
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
