// One LSTM layer on oneDNN's lstm_forward / lstm_backward (the whole sequence in one primitive:
// oneDNN batches the input GEMM over all time steps and runs the recurrence in its own kernels).
// Our weights are PyTorch's [4H, In] row blocks, which is oneDNN's ldgoi with L = D = 1; the
// primitives get them in whatever layout they chose (ldigo for the forward), reordered by
// Staged. Gate order i, f, g, o is the same in both. Zero initial state: src_iter is left out.
#include <algorithm>
#include <cstring>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

memory::desc Desc(const dims& shape, tag t) {
  return memory::desc(shape, memory::data_type::f32, t);
}

class Lstm final : public LstmOp {
 public:
  Lstm(Context& ctx, const LstmSpec& s) : ctx_(ctx), s_(s) {
    const std::int64_t H = s.hidden_size, I = s.input_size;
    x_ = {s.seq_len, s.batch, I};
    y_ = {s.seq_len, s.batch, H};
    const dims w_layer = {1, 1, I, 4, H}, w_iter = {1, 1, H, 4, H}, bias = {1, 1, 4, H};
    const memory::desc none;  // final state not wanted
    const auto x_md = Desc(x_, tag::tnc), y_md = Desc(y_, tag::tnc);
    // The zero initial state (and its unused gradient) are given explicitly: with them left
    // out, oneDNN 2.6's backward gets the weights_iter gradient wrong (nonzero for T = 1, where
    // h_{-1} = 0 makes it zero; caught by the finite-difference test).
    const auto state_md = Desc({1, 1, s.batch, H}, tag::ldnc);
    zero_state_ = memory(state_md, ctx.engine);
    std::memset(zero_state_.get_data_handle(), 0, state_md.get_size());
    const auto b_md = Desc(bias, tag::ldgo);
    fwd_pd_ = lstm_forward::primitive_desc(
        lstm_forward::desc(prop_kind::forward_training, rnn_direction::unidirectional_left2right,
                           x_md, state_md, state_md, Desc(w_layer, tag::any),
                           Desc(w_iter, tag::any), b_md, y_md, none, none),
        ctx.engine);
    fwd_ = lstm_forward(fwd_pd_);
    bwd_pd_ = lstm_backward::primitive_desc(
        lstm_backward::desc(prop_kind::backward, rnn_direction::unidirectional_left2right, x_md,
                            state_md, state_md, Desc(w_layer, tag::any), Desc(w_iter, tag::any),
                            b_md, y_md, none, none, x_md, state_md, state_md,
                            Desc(w_layer, tag::any),
                            Desc(w_iter, tag::any), b_md, y_md, none, none),
        ctx.engine, fwd_pd_);
    bwd_ = lstm_backward(bwd_pd_);
    workspace_ = memory(fwd_pd_.workspace_desc(), ctx.engine);
    const auto user_layer = Desc(w_layer, tag::ldgoi), user_iter = Desc(w_iter, tag::ldgoi);
    f_w_layer_ = Staged(ctx, user_layer, fwd_pd_.weights_layer_desc());
    f_w_iter_ = Staged(ctx, user_iter, fwd_pd_.weights_iter_desc());
    b_w_layer_ = Staged(ctx, user_layer, bwd_pd_.weights_layer_desc());
    b_w_iter_ = Staged(ctx, user_iter, bwd_pd_.weights_iter_desc());
    d_w_layer_ = Staged(ctx, user_layer, bwd_pd_.diff_weights_layer_desc());
    d_w_iter_ = Staged(ctx, user_iter, bwd_pd_.diff_weights_iter_desc());
    bias_ = {4 * H};
  }

  Status Forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                 Tensor& y, bool /*training: the workspace is always kept*/) override {
    PHUB_RETURN_IF_ERROR(CheckLstmForward(s_, Device::kCpu, x, w_ih, w_hh, bias, y));
    return OnednnCall("LSTM forward", [&] {
      fwd_.execute(ctx_.stream, {{DNNL_ARG_SRC_LAYER, Wrap(ctx_, x_, x)},
                                 {DNNL_ARG_SRC_ITER, zero_state_},
                                 {DNNL_ARG_SRC_ITER_C, zero_state_},
                                 {DNNL_ARG_WEIGHTS_LAYER, f_w_layer_.In(ctx_, w_ih)},
                                 {DNNL_ARG_WEIGHTS_ITER, f_w_iter_.In(ctx_, w_hh)},
                                 {DNNL_ARG_BIAS, Wrap(ctx_, bias_, bias)},
                                 {DNNL_ARG_DST_LAYER, Wrap(ctx_, y_, y)},
                                 {DNNL_ARG_WORKSPACE, workspace_}});
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
                  const Tensor& y, const Tensor& dy, Tensor* dx, Tensor& dw_ih, Tensor& dw_hh,
                  Tensor& dbias) override {
    PHUB_RETURN_IF_ERROR(
        CheckLstmBackward(s_, Device::kCpu, x, w_ih, w_hh, bias, y, dy, dx, dw_ih, dw_hh, dbias));
    if (dx == nullptr && !dx_scratch_.defined()) {
      PHUB_ASSIGN_OR_RETURN(dx_scratch_, Tensor::Allocate(Shape(x_)));
    }
    Tensor& dx_out = dx != nullptr ? *dx : dx_scratch_;
    return OnednnCall("LSTM backward",
                      [&] { Run(x, w_ih, w_hh, bias, y, dy, dx_out, dw_ih, dw_hh, dbias); });
  }

 private:
  // Backward's oneDNN calls (they may throw: run inside an OnednnCall).
  void Run(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& bias,
           const Tensor& y, const Tensor& dy, Tensor& dx_out, Tensor& dw_ih, Tensor& dw_hh,
           Tensor& dbias) {
    // oneDNN's RNN backward ADDS to the weight gradients; ours overwrite (ops.h).
    d_w_layer_.ZeroOut(ctx_, dw_ih);
    d_w_iter_.ZeroOut(ctx_, dw_hh);
    std::fill(dbias.data(), dbias.data() + dbias.numel(), 0.0f);
    if (!diff_h0_) {
      diff_h0_ = memory(zero_state_.get_desc(), ctx_.engine);
      diff_c0_ = memory(zero_state_.get_desc(), ctx_.engine);
    }
    bwd_.execute(ctx_.stream, {{DNNL_ARG_SRC_LAYER, Wrap(ctx_, x_, x)},
                               {DNNL_ARG_SRC_ITER, zero_state_},
                               {DNNL_ARG_SRC_ITER_C, zero_state_},
                               {DNNL_ARG_DIFF_SRC_ITER, diff_h0_},  // not wanted
                               {DNNL_ARG_DIFF_SRC_ITER_C, diff_c0_},
                               {DNNL_ARG_WEIGHTS_LAYER, b_w_layer_.In(ctx_, w_ih)},
                               {DNNL_ARG_WEIGHTS_ITER, b_w_iter_.In(ctx_, w_hh)},
                               {DNNL_ARG_BIAS, Wrap(ctx_, bias_, bias)},
                               {DNNL_ARG_DST_LAYER, Wrap(ctx_, y_, y)},
                               {DNNL_ARG_DIFF_DST_LAYER, Wrap(ctx_, y_, dy)},
                               {DNNL_ARG_DIFF_SRC_LAYER, Wrap(ctx_, x_, dx_out)},
                               {DNNL_ARG_DIFF_WEIGHTS_LAYER, d_w_layer_.Out(ctx_, dw_ih)},
                               {DNNL_ARG_DIFF_WEIGHTS_ITER, d_w_iter_.Out(ctx_, dw_hh)},
                               {DNNL_ARG_DIFF_BIAS, Wrap(ctx_, bias_, dbias)},
                               {DNNL_ARG_WORKSPACE, workspace_}});
    d_w_layer_.Finish(ctx_, dw_ih);
    d_w_iter_.Finish(ctx_, dw_hh);
    ctx_.stream.wait();
  }

  Context& ctx_;
  LstmSpec s_;
  dims x_, y_, bias_;
  lstm_forward::primitive_desc fwd_pd_;
  lstm_forward fwd_;
  lstm_backward::primitive_desc bwd_pd_;
  lstm_backward bwd_;
  memory workspace_, zero_state_, diff_h0_, diff_c0_;
  Staged f_w_layer_, f_w_iter_, b_w_layer_, b_w_iter_, d_w_layer_, d_w_iter_;
  Tensor dx_scratch_;
};

}  // namespace

StatusOr<std::unique_ptr<LstmOp>> MakeLstm(Context& ctx, const LstmSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return MakeOp<LstmOp, Lstm>("LSTM", ctx, spec);
}

}  // namespace phub::worker::onednn
