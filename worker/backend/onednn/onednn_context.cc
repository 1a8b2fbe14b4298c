#include "worker/backend/onednn/onednn_context.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/tensor/check.h"

namespace phub::worker::onednn {
namespace {

// The ops only describe their own fixed-rank tensors (1 to 4 dimensions): another rank is a
// bug in an op, not something a caller can pass.
tag PlainTag(std::size_t rank) {
  PHUB_WORKER_CHECK(rank >= 1 && rank <= 4, absl::StrCat("oneDNN backend: a plain descriptor of "
                                                         "rank ",
                                                         rank, " (1 to 4 are made)"));
  static constexpr tag kTags[] = {tag::a, tag::ab, tag::abc, tag::abcd};
  return kTags[rank - 1];
}

}  // namespace

Status OnednnError(const char* what, const dnnl::error& e) {
  const std::string message = absl::StrCat(what, ": oneDNN failed: ", e.what(), " (status ",
                                           static_cast<int>(e.status), ")");
  if (e.status == dnnl_out_of_memory) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, ": out of host memory (a smaller --batch or model)"));
  }
  return absl::InternalError(message);
}

Status HostMemoryError(const char* what) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ": out of host memory (a smaller --batch or model)"));
}

dnnl::memory::desc PlainDesc(const dims& shape) {
  return dnnl::memory::desc(shape, dnnl::memory::data_type::f32, PlainTag(shape.size()));
}

dnnl::memory::desc AnyDesc(const dims& shape) {
  return dnnl::memory::desc(shape, dnnl::memory::data_type::f32, tag::any);
}

dnnl::memory Wrap(Context& ctx, const dims& shape, const Tensor& t) {
  // oneDNN takes a non-const handle; inputs are only read by the primitives they are given to.
  return dnnl::memory(PlainDesc(shape), ctx.engine, const_cast<float*>(t.data()));
}

Staged::Staged(Context& ctx, const dims& shape, const dnnl::memory::desc& wanted)
    : Staged(ctx, PlainDesc(shape), wanted) {}

Staged::Staged(Context& ctx, const dnnl::memory::desc& user, const dnnl::memory::desc& wanted)
    : plain_(user), wanted_(wanted) {
  if (wanted_ == plain_) return;
  scratch_ = dnnl::memory(wanted_, ctx.engine);
  to_wanted_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, plain_, ctx.engine, wanted_));
  to_plain_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, wanted_, ctx.engine, plain_));
}

dnnl::memory Staged::User(Context& ctx, const Tensor& t) const {
  PHUB_WORKER_CHECK(
      static_cast<std::size_t>(t.bytes()) == plain_.get_size(),
      absl::StrCat("oneDNN backend: tensor ", t.ToString(), " holds ", t.bytes(),
                   " bytes, the op expects ", plain_.get_size(), " (the op did not check it)"));
  return dnnl::memory(plain_, ctx.engine, const_cast<float*>(t.data()));
}

dnnl::memory Staged::In(Context& ctx, const Tensor& t) {
  dnnl::memory user = User(ctx, t);
  if (!scratch_) return user;
  to_wanted_.execute(ctx.stream, user, scratch_);
  return scratch_;
}

dnnl::memory Staged::Out(Context& ctx, Tensor& t) {
  return scratch_ ? scratch_ : User(ctx, t);
}

void Staged::ZeroOut(Context& ctx, Tensor& t) {
  dnnl::memory m = Out(ctx, t);
  std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
}

void Staged::Finish(Context& ctx, Tensor& t) {
  if (!scratch_) return;
  dnnl::memory user = User(ctx, t);
  to_plain_.execute(ctx.stream, scratch_, user);
}

}  // namespace phub::worker::onednn
