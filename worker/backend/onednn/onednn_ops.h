// The oneDNN op factories (one file each); OnednnBackend hands them its Context. Each validates
// its spec (ops.h) and builds its primitives once; each call checks its tensors (ops_checks.h,
// on Device::kCpu) before oneDNN sees them.
#pragma once

#include <memory>

#include "worker/backend/onednn/onednn_context.h"
#include "worker/backend/ops.h"
#include "worker/backend/ops_checks.h"

namespace phub::worker::onednn {

StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(Context& ctx, const Conv2dSpec& spec);
StatusOr<std::unique_ptr<LinearOp>> MakeLinear(Context& ctx, const LinearSpec& spec);
StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(Context& ctx, const BatchNormSpec& spec);
StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(Context& ctx, ActivationKind kind,
                                                       const Shape& shape);
StatusOr<std::unique_ptr<PoolOp>> MakePool(Context& ctx, const PoolSpec& spec);
StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(Context& ctx, const Shape& shape, float p);
StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(Context& ctx, const ShortcutSpec& spec);
StatusOr<std::unique_ptr<LrnOp>> MakeLrn(Context& ctx, const LrnSpec& spec);
StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
    Context& ctx, const SoftmaxCrossEntropySpec& spec);
StatusOr<std::unique_ptr<LstmOp>> MakeLstm(Context& ctx, const LstmSpec& spec);
StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(Context& ctx, const EmbeddingSpec& spec);

}  // namespace phub::worker::onednn
