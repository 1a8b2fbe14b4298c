// BatchNorm on cuDNN's spatial batch normalisation (statistics over N, H, W per channel). cuDNN
// saves the batch mean and the inverse standard deviation, and keeps running stats its own way;
// ops.h wants the biased variance saved and PyTorch's running-stat rule (unbiased variance,
// with m = 1 left uncorrected as the CPU backend does), so cuDNN is asked for no running stats
// and one small kernel derives the variance and updates them (kernels.h). The backward takes
// the saved variance it is given, turned back into the inverse standard deviation cuDNN uses.
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class BatchNorm final : public BatchNormOp {
 public:
  BatchNorm(Context& ctx, const BatchNormSpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    PHUB_ASSIGN_OR_RETURN(
        inv_std_, DeviceMemory::Allocate(sizeof(float) * static_cast<std::size_t>(s_.channels)));
    PHUB_RETURN_IF_ERROR(SetNchw(x_desc_, "BatchNorm", s_.batch, s_.channels, s_.height, s_.width));
    PHUB_RETURN_IF_ERROR(c_desc_.Init());
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnDeriveBNTensorDescriptor(c_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
    return absl::OkStatus();
  }

  Status ForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                         Tensor& save_mean, Tensor& save_var, Tensor& running_mean,
                         Tensor& running_var) override {
    PHUB_RETURN_IF_ERROR(CheckBatchNormForwardTraining(
        s_, Device::kCuda, x, gamma, beta, y, save_mean, save_var, running_mean, running_var));
    // Null running stats: cuDNN leaves them alone (BatchNormStats updates them below).
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnBatchNormalizationForwardTraining(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_desc_, x.data(), x_desc_, y.data(),
        c_desc_, gamma.data(), beta.data(), /*exponentialAverageFactor=*/0.0,
        /*resultRunningMean=*/nullptr, /*resultRunningVariance=*/nullptr, s_.eps, save_mean.data(),
        inv_std_.get()));
    const double m = static_cast<double>(s_.batch * s_.height * s_.width);
    const float unbias = m > 1 ? static_cast<float>(m / (m - 1)) : 1.0f;
    PHUB_RETURN_IF_CUDA_ERROR(LaunchBatchNormStats(
        inv_std_.as<float>(), save_mean.data(), save_var.data(), running_mean.data(),
        running_var.data(), s_.channels, s_.eps, s_.momentum, unbias, ctx_.stream()));
    return absl::OkStatus();
  }

  Status ForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var,
                          Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckBatchNormForwardInference(s_, Device::kCuda, x, gamma, beta,
                                                        running_mean, running_var, y));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnBatchNormalizationForwardInference(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_desc_, x.data(), x_desc_, y.data(),
        c_desc_, gamma.data(), beta.data(), running_mean.data(), running_var.data(), s_.eps));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                  const Tensor& save_var, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                  Tensor& dbeta) override {
    PHUB_RETURN_IF_ERROR(CheckBatchNormBackward(s_, Device::kCuda, x, gamma, save_mean, save_var,
                                                dy, dx, dgamma, dbeta));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchInverseStd(save_var.data(), inv_std_.as<float>(), s_.channels,
                                               s_.eps, ctx_.stream()));
    // alpha/beta pairs for dx and for dgamma, dbeta: overwrite both (ops.h).
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnBatchNormalizationBackward(
        ctx_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, x_desc_, x.data(),
        x_desc_, dy.data(), x_desc_, dx.data(), c_desc_, gamma.data(), dgamma.data(), dbeta.data(),
        s_.eps, save_mean.data(), inv_std_.get()));
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  BatchNormSpec s_;
  TensorDesc x_desc_, c_desc_;  // [N, C, H, W] and cuDNN's [1, C, 1, 1]
  DeviceMemory inv_std_;        // [C]: cuDNN's saved 1/sqrt(var + eps)
};

}  // namespace

StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(Context& ctx, const BatchNormSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<BatchNorm>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
