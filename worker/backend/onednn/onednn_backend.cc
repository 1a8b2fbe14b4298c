#include "worker/backend/onednn/onednn_backend.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker {
namespace {

using onednn::Check;
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

  std::unique_ptr<Conv2dOp> MakeConv2d(const Conv2dSpec& s) override {
    return onednn::MakeConv2d(ctx_, s);
  }
  std::unique_ptr<LinearOp> MakeLinear(const LinearSpec& s) override {
    return onednn::MakeLinear(ctx_, s);
  }
  std::unique_ptr<BatchNormOp> MakeBatchNorm(const BatchNormSpec& s) override {
    return onednn::MakeBatchNorm(ctx_, s);
  }
  std::unique_ptr<ActivationOp> MakeActivation(ActivationKind kind, const Shape& shape) override {
    return onednn::MakeActivation(ctx_, kind, shape);
  }
  std::unique_ptr<PoolOp> MakePool(const PoolSpec& s) override {
    return onednn::MakePool(ctx_, s);
  }
  std::unique_ptr<DropoutOp> MakeDropout(const Shape& shape, float p) override {
    return onednn::MakeDropout(ctx_, shape, p);
  }
  std::unique_ptr<ShortcutOp> MakeShortcut(const ShortcutSpec& s) override {
    return onednn::MakeShortcut(ctx_, s);
  }
  std::unique_ptr<LrnOp> MakeLrn(const LrnSpec& s) override { return onednn::MakeLrn(ctx_, s); }
  std::unique_ptr<SoftmaxCrossEntropyOp> MakeSoftmaxCrossEntropy(
      const SoftmaxCrossEntropySpec& s) override {
    return onednn::MakeSoftmaxCrossEntropy(ctx_, s);
  }
  std::unique_ptr<LstmOp> MakeLstm(const LstmSpec& s) override { return onednn::MakeLstm(ctx_, s); }
  std::unique_ptr<EmbeddingOp> MakeEmbedding(const EmbeddingSpec& s) override {
    return onednn::MakeEmbedding(ctx_, s);
  }

  void Add(const Tensor& a, const Tensor& b, Tensor& y) override {
    const dims flat = {a.numel()};
    Check("Add", "b", b, flat);
    Check("Add", "y", y, flat);
    AddPrimitive(a.numel()).execute(ctx_.stream, {{DNNL_ARG_SRC_0, onednn::Wrap(ctx_, flat, a)},
                                                  {DNNL_ARG_SRC_1, onednn::Wrap(ctx_, flat, b)},
                                                  {DNNL_ARG_DST, onednn::Wrap(ctx_, flat, y)}});
    ctx_.stream.wait();
  }

  void Accumulate(const Tensor& x, Tensor& y) override { Add(y, x, y); }

  Tensor Allocate(const Shape& shape) override { return Tensor::Empty(shape); }

  void CopyFromHost(const Tensor& host, Tensor& mine) override { HostCopy(host, mine); }
  void CopyToHost(const Tensor& mine, Tensor& host) override { HostCopy(mine, host); }
  void Copy(const Tensor& from, Tensor& to) override { HostCopy(from, to); }
  void Synchronize() override { ctx_.stream.wait(); }

 private:
  static void HostCopy(const Tensor& from, Tensor& to) {
    Check("Copy", "destination", to, {from.numel()});
    if (from.numel() > 0) std::memcpy(to.data(), from.data(), from.bytes());
  }

  // oneDNN's binary add, one primitive per element count (a model has a handful).
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

  Context ctx_;
  std::map<std::int64_t, dnnl::binary> adds_;
};

}  // namespace

std::unique_ptr<Backend> MakeOnednnBackend() { return std::make_unique<OnednnBackend>(); }

}  // namespace phub::worker
