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
  Linear(Context& ctx, const LinearSpec& s)
      : ctx_(ctx),
        s_(s),
        n_(ToInt("Linear", "batch", s.batch)),
        in_(ToInt("Linear", "in_features", s.in_features)),
        out_(ToInt("Linear", "out_features", s.out_features)) {
    if (s.bias) {
      ones_ = DeviceMemory(sizeof(float) * static_cast<std::size_t>(n_));
      const std::vector<float> host(static_cast<std::size_t>(n_), 1.0f);
      PHUB_CUDA_CHECK(cudaMemcpy(ones_.get(), host.data(), ones_.bytes(), cudaMemcpyHostToDevice));
    }
  }

  void Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const char* op = "Linear forward";
    Check(op, "x", x, s_.batch * s_.in_features);
    Check(op, "w", w, s_.out_features * s_.in_features);
    Check(op, "y", y, s_.batch * s_.out_features);
    PHUB_CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out_, n_, in_, &kOne,
                                  w.data(), in_, x.data(), in_, &kZero, y.data(), out_));
    if (s_.bias) {
      Check(op, "b", b, s_.out_features);
      PHUB_CUBLAS_CHECK(cublasSger(ctx_.cublas(), out_, n_, &kOne, b.data(), 1, ones_.as<float>(),
                                   1, y.data(), out_));
    }
  }

  void Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    const char* op = "Linear backward";
    Check(op, "x", x, s_.batch * s_.in_features);
    Check(op, "dy", dy, s_.batch * s_.out_features);
    Check(op, "dw", dw, s_.out_features * s_.in_features);
    if (dx != nullptr) {
      Check(op, "w", w, s_.out_features * s_.in_features);
      Check(op, "dx", *dx, s_.batch * s_.in_features);
      PHUB_CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, in_, n_, out_, &kOne,
                                    w.data(), in_, dy.data(), out_, &kZero, dx->data(), in_));
    }
    PHUB_CUBLAS_CHECK(cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, n_, &kOne,
                                  x.data(), in_, dy.data(), out_, &kZero, dw.data(), in_));
    if (s_.bias) {
      Check(op, "db", db, s_.out_features);
      PHUB_CUBLAS_CHECK(cublasSgemv(ctx_.cublas(), CUBLAS_OP_N, out_, n_, &kOne, dy.data(), out_,
                                    ones_.as<float>(), 1, &kZero, db.data(), 1));
    }
  }

 private:
  Context& ctx_;
  LinearSpec s_;
  int n_, in_, out_;
  DeviceMemory ones_;  // [N] of 1.0f, with a bias only
};

}  // namespace

std::unique_ptr<LinearOp> MakeLinear(Context& ctx, const LinearSpec& spec) {
  Validate(spec);
  return std::make_unique<Linear>(ctx, spec);
}

}  // namespace phub::worker::cudnn
