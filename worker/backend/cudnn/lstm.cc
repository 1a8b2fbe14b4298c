// One LSTM layer on cuDNN's RNN API (v8: cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8), the whole sequence per call. cuDNN's LSTM has ops.h's equations
// and gate order: its linear layers 0-3 are the input-side matrices of gates i, f, g (its "new
// memory"), o and 4-7 the recurrent ones, and CUDNN_RNN_SINGLE_INP_BIAS gives one bias per gate,
// on the input side. cuDNN keeps all weights in one packed "weight space" whose layout is its
// own: cudnnGetRNNWeightParams says where each gate's [H, In] matrix and [H] bias lie, once,
// and each forward copies our w_ih, w_hh, bias blocks there (12 small device copies); the
// backward reads the gradients back out of a twin space the same way.
// The data are time-major [T, N, *] with every sequence of length T: the packed layout (which
// needs no padded-IO flag). Zero initial state: hx, cx null.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

constexpr int kGates = 4;

class Lstm final : public LstmOp {
 public:
  Lstm(Context& ctx, const LstmSpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    const char* op = "LSTM";
    PHUB_ASSIGN_OR_RETURN(const int t, ToInt(op, "seq_len", s_.seq_len));
    PHUB_ASSIGN_OR_RETURN(const int n, ToInt(op, "batch", s_.batch));
    PHUB_ASSIGN_OR_RETURN(const int in, ToInt(op, "input_size", s_.input_size));
    PHUB_ASSIGN_OR_RETURN(const int h, ToInt(op, "hidden_size", s_.hidden_size));
    PHUB_ASSIGN_OR_RETURN(const int n_h,
                          ToInt(op, "batch * hidden_size", s_.batch * s_.hidden_size));
    for (Status st :
         {dropout_.Init(), rnn_.Init(), x_desc_.Init(), y_desc_.Init(), state_desc_.Init()}) {
      PHUB_RETURN_IF_ERROR(st);
    }
    // One layer has no dropout; cuDNN still wants a descriptor, and one with p = 0 needs no
    // generator states (PyTorch passes the same).
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnSetDropoutDescriptor(dropout_, ctx_.cudnn(), 0.0f, nullptr, 0, 0));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetRNNDescriptor_v8(
        rnn_, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_SINGLE_INP_BIAS, CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, ctx_.math_type(), in, h,
        /*projSize=*/h, /*numLayers=*/1, dropout_, CUDNN_RNN_PADDED_IO_DISABLED));
    std::vector<int> lengths(static_cast<std::size_t>(n), t);
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetRNNDataDescriptor(x_desc_, CUDNN_DATA_FLOAT,
                                                         CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t,
                                                         n, in, lengths.data(), nullptr));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetRNNDataDescriptor(y_desc_, CUDNN_DATA_FLOAT,
                                                         CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t,
                                                         n, h, lengths.data(), nullptr));
    const int dims[3] = {1, n, h};  // [layers, N, H], packed
    const int strides[3] = {n_h, h, 1};
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnSetTensorNdDescriptor(state_desc_, CUDNN_DATA_FLOAT, 3, dims, strides));
    // The kernels read the sequence lengths from device memory, asynchronously.
    PHUB_ASSIGN_OR_RETURN(lengths_, DeviceMemory::Allocate(sizeof(int) * lengths.size()));
    PHUB_RETURN_IF_CUDA_ERROR(
        cudaMemcpy(lengths_.get(), lengths.data(), lengths_.bytes(), cudaMemcpyHostToDevice));

    std::size_t weight_bytes = 0;
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetRNNWeightSpaceSize(ctx_.cudnn(), rnn_, &weight_bytes));
    PHUB_ASSIGN_OR_RETURN(weights_, DeviceMemory::Allocate(weight_bytes));
    PHUB_ASSIGN_OR_RETURN(dweights_, DeviceMemory::Allocate(weight_bytes));
    PHUB_RETURN_IF_ERROR(LocateWeights());

    std::size_t train_ws = 0, reserve = 0, infer_ws = 0, unused = 0;
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetRNNTempSpaceSizes(
        ctx_.cudnn(), rnn_, CUDNN_FWD_MODE_TRAINING, x_desc_, &train_ws, &reserve));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetRNNTempSpaceSizes(
        ctx_.cudnn(), rnn_, CUDNN_FWD_MODE_INFERENCE, x_desc_, &infer_ws, &unused));
    workspace_ = std::max(train_ws, infer_ws);
    PHUB_RETURN_IF_ERROR(ctx_.Workspace(workspace_).status());
    // Forward (training) to backward: the op's own.
    PHUB_ASSIGN_OR_RETURN(reserve_, DeviceMemory::Allocate(reserve));
    return absl::OkStatus();
  }

  Status Forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                 Tensor& y, bool training) override {
    PHUB_RETURN_IF_ERROR(CheckLstmForward(s_, Device::kCuda, x, w_ih, w_hh, bias, y));
    PHUB_RETURN_IF_ERROR(CopyWeights(w_ih, w_hh, bias));
    PHUB_ASSIGN_OR_RETURN(void* ws, ctx_.Workspace(workspace_));
    PHUB_RETURN_IF_ERROR(RunForward(x, y.data(), ws, training));
    reserve_fresh_ = training;
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                  const Tensor& y, const Tensor& dy, Tensor* dx, Tensor& dw_ih, Tensor& dw_hh,
                  Tensor& dbias) override {
    PHUB_RETURN_IF_ERROR(
        CheckLstmBackward(s_, Device::kCuda, x, w_ih, w_hh, bias, y, dy, dx, dw_ih, dw_hh, dbias));
    const std::int64_t x_n = s_.seq_len * s_.batch * s_.input_size;
    // The weight gradient needs what the data backward leaves in the reserve space, so the
    // data backward runs even when nobody wants dx.
    if (dx == nullptr && dx_scratch_.bytes() == 0) {
      PHUB_ASSIGN_OR_RETURN(dx_scratch_,
                            DeviceMemory::Allocate(static_cast<std::size_t>(x_n) * sizeof(float)));
    }
    void* dx_out = dx != nullptr ? static_cast<void*>(dx->data()) : dx_scratch_.get();
    PHUB_ASSIGN_OR_RETURN(void* ws, ctx_.Workspace(workspace_));
    // The data backward also writes the reserve space (found on an H100: a second Backward
    // after one Forward gave gradients 100x too small), so a Backward that is not the first
    // since the training Forward first runs that Forward again, into a scratch y: the same
    // bits (same inputs, same algorithm), and the reserve space as the data backward needs it.
    if (!reserve_fresh_) {
      if (y_scratch_.bytes() == 0) {
        PHUB_ASSIGN_OR_RETURN(y_scratch_, DeviceMemory::Allocate(y.bytes()));
      }
      PHUB_RETURN_IF_ERROR(RunForward(x, y_scratch_.get(), ws, /*training=*/true));
    }
    reserve_fresh_ = false;
    // The weight space still holds the forward's weights (the same, by contract).
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnRNNBackwardData_v8(
        ctx_.cudnn(), rnn_, lengths_.as<int>(), y_desc_, y.data(), dy.data(), x_desc_, dx_out,
        state_desc_, /*hx=*/nullptr, /*dhy=*/nullptr, /*dhx=*/nullptr, state_desc_, /*cx=*/nullptr,
        /*dcy=*/nullptr, /*dcx=*/nullptr, weights_.bytes(), weights_.get(), workspace_, ws,
        reserve_.bytes(), reserve_.get()));
    // cuDNN only adds weight gradients (CUDNN_WGRAD_MODE_ADD); ops.h overwrites: start at zero.
    PHUB_RETURN_IF_CUDA_ERROR(
        cudaMemsetAsync(dweights_.get(), 0, dweights_.bytes(), ctx_.stream()));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnRNNBackwardWeights_v8(
        ctx_.cudnn(), rnn_, CUDNN_WGRAD_MODE_ADD, lengths_.as<int>(), x_desc_, x.data(),
        state_desc_, /*hx=*/nullptr, y_desc_, y.data(), dweights_.bytes(), dweights_.get(),
        workspace_, ws, reserve_.bytes(), reserve_.get()));
    return CopyGradients(dw_ih, dw_hh, dbias);
  }

 private:
  // The whole sequence forward from the weight space; training fills the reserve space.
  Status RunForward(const Tensor& x, void* y, void* ws, bool training) {
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnRNNForward(
        ctx_.cudnn(), rnn_, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
        lengths_.as<int>(), x_desc_, x.data(), y_desc_, y, state_desc_, /*hx=*/nullptr,
        /*hy=*/nullptr, state_desc_, /*cx=*/nullptr, /*cy=*/nullptr, weights_.bytes(),
        weights_.get(), workspace_, ws, training ? reserve_.bytes() : 0,
        training ? reserve_.get() : nullptr));
    return absl::OkStatus();
  }

  // Where cuDNN put each gate's matrices and bias, as byte offsets into the weight space (the
  // gradient space has the same layout). Checked to be the packed row-major [H, cols] blocks
  // the copies assume.
  Status LocateWeights() {
    const int h = static_cast<int>(s_.hidden_size), in = static_cast<int>(s_.input_size);
    TensorDesc m_desc, b_desc;
    PHUB_RETURN_IF_ERROR(m_desc.Init());
    PHUB_RETURN_IF_ERROR(b_desc.Init());
    for (int id = 0; id < 2 * kGates; ++id) {
      void* m = nullptr;
      void* b = nullptr;
      PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetRNNWeightParams(ctx_.cudnn(), rnn_, /*pseudoLayer=*/0,
                                                         weights_.bytes(), weights_.get(), id,
                                                         m_desc, &m, b_desc, &b));
      PHUB_RETURN_IF_ERROR(ExpectBlock(m_desc, m, id, h, id < kGates ? in : h, "matrix"));
      matrix_at_[id] = Offset(m);
      if (id < kGates) {
        PHUB_RETURN_IF_ERROR(ExpectBlock(b_desc, b, id, h, 1, "bias"));
        bias_at_[id] = Offset(b);
      }
    }
    return absl::OkStatus();
  }

  // Internal: a layout other than the one assumed is a cuDNN this code does not know.
  Status ExpectBlock(const TensorDesc& desc, const void* at, int id, int rows, int cols,
                     const char* what) const {
    cudnnDataType_t type;
    int nb = 0, dims[3] = {}, strides[3] = {};
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnGetTensorNdDescriptor(desc, 3, &type, &nb, dims, strides));
    // {1, rows, cols}, rows of cols contiguous floats.
    const bool ok = at != nullptr && nb == 3 && dims[0] == 1 && dims[1] == rows &&
                    dims[2] == cols && strides[2] == 1 && strides[1] == cols;
    if (!ok) {
      return absl::InternalError(absl::StrCat(
          "LSTM: cuDNN's weight space holds linear layer ", id, "'s ", what, " as ", nb, "-d [",
          dims[0], ", ", dims[1], ", ", dims[2], "] strides [", strides[0], ", ", strides[1], ", ",
          strides[2], "]", at == nullptr ? " (absent)" : "", ", expected [1, ", rows, ", ", cols,
          "] packed: this cuDNN lays out LSTM weights differently"));
    }
    return absl::OkStatus();
  }

  std::size_t Offset(const void* p) const {
    return static_cast<std::size_t>(static_cast<const char*>(p) -
                                    static_cast<const char*>(weights_.get()));
  }

  // Calls f(tensor, offset in cuDNN's space in bytes, offset in our tensor in floats, floats)
  // for each block: gate g of tensor 0 (w_ih), 1 (w_hh), 2 (bias) is our rows g*H .. g*H+H-1.
  // Stops at, and returns, the first error f returns.
  template <class F>
  Status ForEachBlock(F f) const {
    const std::size_t h = static_cast<std::size_t>(s_.hidden_size);
    const std::size_t in = static_cast<std::size_t>(s_.input_size);
    for (int g = 0; g < kGates; ++g) {
      const auto row = static_cast<std::size_t>(g) * h;  // our first row of gate g
      PHUB_RETURN_IF_ERROR(f(0, matrix_at_[g], row * in, h * in));
      PHUB_RETURN_IF_ERROR(f(1, matrix_at_[kGates + g], row * h, h * h));
      PHUB_RETURN_IF_ERROR(f(2, bias_at_[g], row, h));
    }
    return absl::OkStatus();
  }

  Status CopyWeights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias) {
    const float* ours[3] = {w_ih.data(), w_hh.data(), bias.data()};
    return ForEachBlock(
        [&](int t, std::size_t at, std::size_t first, std::size_t floats) -> Status {
          PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(weights_.as<char>() + at, ours[t] + first,
                                                    floats * sizeof(float),
                                                    cudaMemcpyDeviceToDevice, ctx_.stream()));
          return absl::OkStatus();
        });
  }

  Status CopyGradients(Tensor& dw_ih, Tensor& dw_hh, Tensor& dbias) {
    float* ours[3] = {dw_ih.data(), dw_hh.data(), dbias.data()};
    return ForEachBlock(
        [&](int t, std::size_t at, std::size_t first, std::size_t floats) -> Status {
          PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(ours[t] + first, dweights_.as<char>() + at,
                                                    floats * sizeof(float),
                                                    cudaMemcpyDeviceToDevice, ctx_.stream()));
          return absl::OkStatus();
        });
  }

  Context& ctx_;
  LstmSpec s_;
  DropoutDesc dropout_;
  RnnDesc rnn_;
  RnnDataDesc x_desc_, y_desc_;
  TensorDesc state_desc_;  // h and c: [1, N, H]
  DeviceMemory lengths_;   // N ints, all T
  DeviceMemory weights_, dweights_, reserve_, dx_scratch_, y_scratch_;
  bool reserve_fresh_ = false;  // the reserve space is as the last training Forward left it
  std::size_t workspace_ = 0;
  std::size_t matrix_at_[2 * kGates] = {};
  std::size_t bias_at_[kGates] = {};
};

}  // namespace

StatusOr<std::unique_ptr<LstmOp>> MakeLstm(Context& ctx, const LstmSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<Lstm>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
