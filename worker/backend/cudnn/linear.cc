// Linear (fully connected) on cuBLAS: y = x W^T + b with x [N, In], W [Out, In], all row-major.
// cuBLAS is column-major, and a row-major [r, c] matrix is the column-major [c, r] one, its
// transpose; so each product below is written for the transposes:
//   y^T [Out, N]  = W (= op T of W's column-major [In, Out]) . x^T           (forward)
//   dx^T [In, N]  = W^T [In, Out] . dy^T [Out, N]                            (backward data)
//   dW^T [In, Out] = x^T [In, N] . dy [N, Out] (= op T of dy's [Out, N])      (backward weights)
// The bias is a rank-1 update b . 1^T on y^T, its gradient dy^T . 1: both need a vector of N
// ones, made once.
#include <vector>

#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

class Linear final : public LinearOp {
 public:
  Linear(Context& ctx, const LinearSpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    PHUB_ASSIGN_OR_RETURN(n_, ToInt("Linear", "batch", s_.batch));
    PHUB_ASSIGN_OR_RETURN(in_, ToInt("Linear", "in_features", s_.in_features));
    PHUB_ASSIGN_OR_RETURN(out_, ToInt("Linear", "out_features", s_.out_features));
    if (s_.bias) {
      PHUB_ASSIGN_OR_RETURN(ones_,
                            DeviceMemory::Allocate(sizeof(float) * static_cast<std::size_t>(n_)));
      const std::vector<float> host(static_cast<std::size_t>(n_), 1.0f);
      PHUB_RETURN_IF_CUDA_ERROR(
          cudaMemcpy(ones_.get(), host.data(), ones_.bytes(), cudaMemcpyHostToDevice));
    }
    return absl::OkStatus();
  }

  Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckLinearForward(s_, Device::kCuda, x, w, b, y));
    PHUB_RETURN_IF_CUBLAS_ERROR(cublasSgemm(ctx_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out_, n_, in_,
                                            &kOne, w.data(), in_, x.data(), in_, &kZero, y.data(),
                                            out_));
    if (s_.bias) {
      PHUB_RETURN_IF_CUBLAS_ERROR(cublasSger(ctx_.cublas(), out_, n_, &kOne, b.data(), 1,
                                             ones_.as<float>(), 1, y.data(), out_));
    }
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                  Tensor& db) override {
    PHUB_RETURN_IF_ERROR(CheckLinearBackward(s_, Device::kCuda, x, w, dy, dx, dw, db));
    if (dx != nullptr) {
      PHUB_RETURN_IF_CUBLAS_ERROR(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, in_, n_,
                                              out_, &kOne, w.data(), in_, dy.data(), out_, &kZero,
                                              dx->data(), in_));
    }
    PHUB_RETURN_IF_CUBLAS_ERROR(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, n_,
                                            &kOne, x.data(), in_, dy.data(), out_, &kZero,
                                            dw.data(), in_));
    if (s_.bias) {
      PHUB_RETURN_IF_CUBLAS_ERROR(cublasSgemv(ctx_.cublas(), CUBLAS_OP_N, out_, n_, &kOne,
                                              dy.data(), out_, ones_.as<float>(), 1, &kZero,
                                              db.data(), 1));
    }
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  LinearSpec s_;
  int n_ = 0, in_ = 0, out_ = 0;
  DeviceMemory ones_;  // [N] of 1.0f, with a bias only
};

}  // namespace

StatusOr<std::unique_ptr<LinearOp>> MakeLinear(Context& ctx, const LinearSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<Linear>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
