#include "worker/backend/onednn/onednn_backend.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "phub/staging/host_copy_engine.h"
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker {
namespace {

using onednn::Context;
using onednn::dims;

const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse4.1";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512-vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512-bf16";
    default: return "other";
  }
}

class OnednnBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }

  std::string Describe() const override {
    const dnnl_version_t* v = dnnl_version();
    return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " (cpu, ",
                        IsaName(dnnl::get_effective_cpu_isa()), ")");
  }

  StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(const Conv2dSpec& s) override {
    return onednn::MakeConv2d(ctx_, s);
  }
  StatusOr<std::unique_ptr<LinearOp>> MakeLinear(const LinearSpec& s) override {
    return onednn::MakeLinear(ctx_, s);
  }
  StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(const BatchNormSpec& s) override {
    return onednn::MakeBatchNorm(ctx_, s);
  }
  StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(ActivationKind kind,
                                                         const Shape& shape) override {
    return onednn::MakeActivation(ctx_, kind, shape);
  }
  StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolSpec& s) override {
    return onednn::MakePool(ctx_, s);
  }
  StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(const Shape& shape, float p) override {
    return onednn::MakeDropout(ctx_, shape, p);
  }
  StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(const ShortcutSpec& s) override {
    return onednn::MakeShortcut(ctx_, s);
  }
  StatusOr<std::unique_ptr<LrnOp>> MakeLrn(const LrnSpec& s) override {
    return onednn::MakeLrn(ctx_, s);
  }
  StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
      const SoftmaxCrossEntropySpec& s) override {
    return onednn::MakeSoftmaxCrossEntropy(ctx_, s);
  }
  StatusOr<std::unique_ptr<LstmOp>> MakeLstm(const LstmSpec& s) override {
    return onednn::MakeLstm(ctx_, s);
  }
  StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(const EmbeddingSpec& s) override {
    return onednn::MakeEmbedding(ctx_, s);
  }

  Status Add(const Tensor& a, const Tensor& b, Tensor& y) override {
    const dims flat = {a.numel()};
    PHUB_RETURN_IF_ERROR(CheckTensor("Add", "a", a, Device::kCpu, Shape(flat)));
    PHUB_RETURN_IF_ERROR(CheckTensor("Add", "b", b, Device::kCpu, Shape(flat)));
    PHUB_RETURN_IF_ERROR(CheckTensor("Add", "y", y, Device::kCpu, Shape(flat)));
    if (a.numel() == 0) return absl::OkStatus();  // oneDNN takes no zero-sized memory
    return onednn::OnednnCall("Add", [&] {
      AddPrimitive(a.numel()).execute(ctx_.stream, {{DNNL_ARG_SRC_0, onednn::Wrap(ctx_, flat, a)},
                                                    {DNNL_ARG_SRC_1, onednn::Wrap(ctx_, flat, b)},
                                                    {DNNL_ARG_DST, onednn::Wrap(ctx_, flat, y)}});
      ctx_.stream.wait();
    });
  }

  Status Accumulate(const Tensor& x, Tensor& y) override { return Add(y, x, y); }

  // phubd's own kernel, with one input.
  Status OptimizerStep(const Tensor& grad, Tensor& weights, std::span<Tensor> state,
                       const kernels::OptimizerConfig& config, std::uint64_t step) override {
    PHUB_RETURN_IF_ERROR(CheckOptimizerStep(Device::kCpu, grad, weights, state, config, step));
    float* arrays[2] = {nullptr, nullptr};
    for (std::size_t i = 0; i < state.size(); ++i) arrays[i] = state[i].data();
    const float* input = grad.data();
    kernels::AggregateAndStep(std::span<const float* const>(&input, 1), weights.span(),
                              std::span<float* const>(arrays, state.size()), config, step);
    return absl::OkStatus();
  }

  StatusOr<Tensor> Allocate(const Shape& shape) override { return Tensor::Allocate(shape); }

  Status CopyFromHost(const Tensor& host, Tensor& mine) override {
    return HostCopy("CopyFromHost", host, mine);
  }
  Status CopyToHost(const Tensor& mine, Tensor& host) override {
    return HostCopy("CopyToHost", mine, host);
  }
  Status Copy(const Tensor& from, Tensor& to) override { return HostCopy("Copy", from, to); }
  Status Synchronize() override {
    return onednn::OnednnCall("Synchronize", [&] { ctx_.stream.wait(); });
  }
  StatusOr<std::unique_ptr<staging::CopyEngine>> MakeCopyEngine() override {
    return staging::MakeHostCopyEngine();
  }

  // The context is made by MakeOnednnBackend, where a failure can be returned.
  explicit OnednnBackend(std::unique_ptr<Context> ctx) : ctx_(*ctx), owned_ctx_(std::move(ctx)) {}

 private:
  static Status HostCopy(const char* op, const Tensor& from, Tensor& to) {
    PHUB_RETURN_IF_ERROR(CheckTensor(op, "source", from, Device::kCpu, Shape{from.numel()}));
    PHUB_RETURN_IF_ERROR(CheckTensor(op, "destination", to, Device::kCpu, Shape{from.numel()}));
    if (from.numel() > 0) std::memcpy(to.data(), from.data(), from.bytes());
    return absl::OkStatus();
  }

  // oneDNN's binary add, one primitive per element count (a model has a handful). May throw.
  dnnl::binary& AddPrimitive(std::int64_t n) {
    auto it = adds_.find(n);
    if (it == adds_.end()) {
      const auto md = onednn::PlainDesc({n});
      it = adds_.emplace(n, dnnl::binary(dnnl::binary::primitive_desc(
                                dnnl::binary::desc(dnnl::algorithm::binary_add, md, md, md),
                                ctx_.engine)))
               .first;
    }
    return it->second;
  }

  Context& ctx_;
  std::unique_ptr<Context> owned_ctx_;
  std::map<std::int64_t, dnnl::binary> adds_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeOnednnBackend() {
  std::unique_ptr<Context> ctx;
  PHUB_RETURN_IF_ERROR(onednn::OnednnCall("oneDNN backend (CPU engine)",
                                          [&] { ctx = std::make_unique<Context>(); }));
  return std::make_unique<OnednnBackend>(std::move(ctx));
}

}  // namespace phub::worker
