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
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

constexpr int kGates = 4;

class Lstm final : public LstmOp {
 public:
  Lstm(Context& ctx, const LstmSpec& s) : ctx_(ctx), s_(s) {
    const char* op = "LSTM";
    const int t = ToInt(op, "seq_len", s.seq_len), n = ToInt(op, "batch", s.batch);
    const int in = ToInt(op, "input_size", s.input_size),
              h = ToInt(op, "hidden_size", s.hidden_size);
    // One layer has no dropout; cuDNN still wants a descriptor, and one with p = 0 needs no
    // generator states (PyTorch passes the same).
    PHUB_CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout_, ctx.cudnn(), 0.0f, nullptr, 0, 0));
    PHUB_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        rnn_, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_SINGLE_INP_BIAS, CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, ctx.math_type(), in, h,
        /*projSize=*/h, /*numLayers=*/1, dropout_, CUDNN_RNN_PADDED_IO_DISABLED));
    std::vector<int> lengths(static_cast<std::size_t>(n), t);
    PHUB_CUDNN_CHECK(cudnnSetRNNDataDescriptor(x_desc_, CUDNN_DATA_FLOAT,
                                               CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t, n, in,
                                               lengths.data(), nullptr));
    PHUB_CUDNN_CHECK(cudnnSetRNNDataDescriptor(y_desc_, CUDNN_DATA_FLOAT,
                                               CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t, n, h,
                                               lengths.data(), nullptr));
    const int dims[3] = {1, n, h};  // [layers, N, H], packed
    const int strides[3] = {ToInt(op, "batch * hidden_size", s.batch * s.hidden_size), h, 1};
    PHUB_CUDNN_CHECK(cudnnSetTensorNdDescriptor(state_desc_, CUDNN_DATA_FLOAT, 3, dims, strides));
    // The kernels read the sequence lengths from device memory, asynchronously.
    lengths_ = DeviceMemory(sizeof(int) * lengths.size());
    PHUB_CUDA_CHECK(
        cudaMemcpy(lengths_.get(), lengths.data(), lengths_.bytes(), cudaMemcpyHostToDevice));

    std::size_t weight_bytes = 0;
    PHUB_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(ctx.cudnn(), rnn_, &weight_bytes));
    weights_ = DeviceMemory(weight_bytes);
    dweights_ = DeviceMemory(weight_bytes);
    LocateWeights();

    std::size_t train_ws = 0, reserve = 0, infer_ws = 0, unused = 0;
    PHUB_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(ctx.cudnn(), rnn_, CUDNN_FWD_MODE_TRAINING, x_desc_,
                                               &train_ws, &reserve));
    PHUB_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(ctx.cudnn(), rnn_, CUDNN_FWD_MODE_INFERENCE, x_desc_,
                                               &infer_ws, &unused));
    workspace_ = std::max(train_ws, infer_ws);
    ctx.Workspace(workspace_);
    reserve_ = DeviceMemory(reserve);  // forward (training) to backward: the op's own
  }

  void Forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
               Tensor& y, bool training) override {
    const char* op = "LSTM forward";
    CheckWeights(op, w_ih, w_hh, bias);
    Check(op, "x", x, s_.seq_len * s_.batch * s_.input_size);
    Check(op, "y", y, s_.seq_len * s_.batch * s_.hidden_size);
    CopyWeights(w_ih, w_hh, bias);
    void* ws = ctx_.Workspace(workspace_);
    PHUB_CUDNN_CHECK(cudnnRNNForward(
        ctx_.cudnn(), rnn_, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
        lengths_.as<int>(), x_desc_, x.data(), y_desc_, y.data(), state_desc_, /*hx=*/nullptr,
        /*hy=*/nullptr, state_desc_, /*cx=*/nullptr, /*cy=*/nullptr, weights_.bytes(),
        weights_.get(), workspace_, ws, training ? reserve_.bytes() : 0,
        training ? reserve_.get() : nullptr));
  }

  void Backward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                const Tensor& y, const Tensor& dy, Tensor* dx, Tensor& dw_ih, Tensor& dw_hh,
                Tensor& dbias) override {
    const char* op = "LSTM backward";
    CheckWeights(op, w_ih, w_hh, bias);
    CheckWeights(op, dw_ih, dw_hh, dbias);
    const std::int64_t x_n = s_.seq_len * s_.batch * s_.input_size;
    Check(op, "x", x, x_n);
    Check(op, "y", y, s_.seq_len * s_.batch * s_.hidden_size);
    Check(op, "dy", dy, s_.seq_len * s_.batch * s_.hidden_size);
    if (dx != nullptr) Check(op, "dx", *dx, x_n);
    // The weight gradient needs what the data backward leaves in the reserve space, so the
    // data backward runs even when nobody wants dx.
    if (dx == nullptr && dx_scratch_.bytes() == 0) {
      dx_scratch_ = DeviceMemory(static_cast<std::size_t>(x_n) * sizeof(float));
    }
    void* dx_out = dx != nullptr ? static_cast<void*>(dx->data()) : dx_scratch_.get();
    void* ws = ctx_.Workspace(workspace_);
    // The weight space still holds the forward's weights (the same, by contract).
    PHUB_CUDNN_CHECK(cudnnRNNBackwardData_v8(
        ctx_.cudnn(), rnn_, lengths_.as<int>(), y_desc_, y.data(), dy.data(), x_desc_, dx_out,
        state_desc_, /*hx=*/nullptr, /*dhy=*/nullptr, /*dhx=*/nullptr, state_desc_, /*cx=*/nullptr,
        /*dcy=*/nullptr, /*dcx=*/nullptr, weights_.bytes(), weights_.get(), workspace_, ws,
        reserve_.bytes(), reserve_.get()));
    // cuDNN only adds weight gradients (CUDNN_WGRAD_MODE_ADD); ops.h overwrites: start at zero.
    PHUB_CUDA_CHECK(cudaMemsetAsync(dweights_.get(), 0, dweights_.bytes(), ctx_.stream()));
    PHUB_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
        ctx_.cudnn(), rnn_, CUDNN_WGRAD_MODE_ADD, lengths_.as<int>(), x_desc_, x.data(),
        state_desc_, /*hx=*/nullptr, y_desc_, y.data(), dweights_.bytes(), dweights_.get(),
        workspace_, ws, reserve_.bytes(), reserve_.get()));
    CopyGradients(dw_ih, dw_hh, dbias);
  }

 private:
  // Where cuDNN put each gate's matrices and bias, as byte offsets into the weight space (the
  // gradient space has the same layout). Checked to be the packed row-major [H, cols] blocks
  // the copies assume.
  void LocateWeights() {
    const int h = static_cast<int>(s_.hidden_size), in = static_cast<int>(s_.input_size);
    TensorDesc m_desc, b_desc;
    for (int id = 0; id < 2 * kGates; ++id) {
      void* m = nullptr;
      void* b = nullptr;
      PHUB_CUDNN_CHECK(cudnnGetRNNWeightParams(ctx_.cudnn(), rnn_, /*pseudoLayer=*/0,
                                               weights_.bytes(), weights_.get(), id, m_desc, &m,
                                               b_desc, &b));
      ExpectBlock(m_desc, m, id, h, id < kGates ? in : h, "matrix");
      matrix_at_[id] = Offset(m);
      if (id < kGates) {
        ExpectBlock(b_desc, b, id, h, 1, "bias");
        bias_at_[id] = Offset(b);
      }
    }
  }

  void ExpectBlock(const TensorDesc& desc, const void* at, int id, int rows, int cols,
                   const char* what) const {
    cudnnDataType_t type;
    int nb = 0, dims[3] = {}, strides[3] = {};
    PHUB_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 3, &type, &nb, dims, strides));
    // {1, rows, cols}, rows of cols contiguous floats.
    const bool ok = at != nullptr && nb == 3 && dims[0] == 1 && dims[1] == rows &&
                    dims[2] == cols && strides[2] == 1 && strides[1] == cols;
    if (!ok) {
      throw std::runtime_error(absl::StrCat(
          "LSTM: cuDNN's weight space holds linear layer ", id, "'s ", what, " as ", nb, "-d [",
          dims[0], ", ", dims[1], ", ", dims[2], "] strides [", strides[0], ", ", strides[1], ", ",
          strides[2], "]", at == nullptr ? " (absent)" : "", ", expected [1, ", rows, ", ", cols,
          "] packed: this cuDNN lays out LSTM weights differently"));
    }
  }

  std::size_t Offset(const void* p) const {
    return static_cast<std::size_t>(static_cast<const char*>(p) -
                                    static_cast<const char*>(weights_.get()));
  }

  void CheckWeights(const char* op, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& bias) const {
    const std::int64_t h4 = kGates * s_.hidden_size;
    Check(op, "w_ih", w_ih, h4 * s_.input_size);
    Check(op, "w_hh", w_hh, h4 * s_.hidden_size);
    Check(op, "bias", bias, h4);
  }

  // Calls f(tensor, offset in cuDNN's space in bytes, offset in our tensor in floats, floats)
  // for each block: gate g of tensor 0 (w_ih), 1 (w_hh), 2 (bias) is our rows g*H .. g*H+H-1.
  template <class F>
  void ForEachBlock(F f) const {
    const std::size_t h = static_cast<std::size_t>(s_.hidden_size);
    const std::size_t in = static_cast<std::size_t>(s_.input_size);
    for (int g = 0; g < kGates; ++g) {
      const auto row = static_cast<std::size_t>(g) * h;  // our first row of gate g
      f(0, matrix_at_[g], row * in, h * in);
      f(1, matrix_at_[kGates + g], row * h, h * h);
      f(2, bias_at_[g], row, h);
    }
  }

  void CopyWeights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias) {
    const float* ours[3] = {w_ih.data(), w_hh.data(), bias.data()};
    ForEachBlock([&](int t, std::size_t at, std::size_t first, std::size_t floats) {
      PHUB_CUDA_CHECK(cudaMemcpyAsync(weights_.as<char>() + at, ours[t] + first,
                                      floats * sizeof(float), cudaMemcpyDeviceToDevice,
                                      ctx_.stream()));
    });
  }

  void CopyGradients(Tensor& dw_ih, Tensor& dw_hh, Tensor& dbias) {
    float* ours[3] = {dw_ih.data(), dw_hh.data(), dbias.data()};
    ForEachBlock([&](int t, std::size_t at, std::size_t first, std::size_t floats) {
      PHUB_CUDA_CHECK(cudaMemcpyAsync(ours[t] + first, dweights_.as<char>() + at,
                                      floats * sizeof(float), cudaMemcpyDeviceToDevice,
                                      ctx_.stream()));
    });
  }

  Context& ctx_;
  LstmSpec s_;
  DropoutDesc dropout_;
  RnnDesc rnn_;
  RnnDataDesc x_desc_, y_desc_;
  TensorDesc state_desc_;  // h and c: [1, N, H]
  DeviceMemory lengths_;   // N ints, all T
  DeviceMemory weights_, dweights_, reserve_, dx_scratch_;
  std::size_t workspace_ = 0;
  std::size_t matrix_at_[2 * kGates] = {};
  std::size_t bias_at_[kGates] = {};
};

}  // namespace

std::unique_ptr<LstmOp> MakeLstm(Context& ctx, const LstmSpec& spec) {
  Validate(spec);
  return std::make_unique<Lstm>(ctx, spec);
}

}  // namespace phub::worker::cudnn
