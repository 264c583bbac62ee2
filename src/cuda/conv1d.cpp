// CudaBackend's depthwise causal conv + SiLU (spec §4.7 step 2; src/cpu/conv1d.cpp is the
// reference): kernels/conv1d.cu, per sequence span, from and into each sequence's window (stored in
// the window tensor's dtype, numerics().conv_dtype); fault conv-window-stuck honoured there.
// Shapes and spans are checked by Backend::conv1d_causal (src/engine/backend.cpp).
#include <algorithm>

#include "kernels/conv1d.h"
#include "cuda/bf16_args.h"
#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/seq_tables.h"

namespace degen {

using cuda_detail::GdnTimer;
using cuda_detail::words;

static_assert(sizeof(cuda::Conv1dSeq) == 3 * sizeof(int64_t), "the per-sequence table travels as int64 words");

namespace {
// The per-sequence table of a conv call (each window on the device, all in one dtype), the window
// dtype and the longest span.
struct ConvSeqs {
  std::vector<cuda::Conv1dSeq> seqs;
  DType window_dtype;
  int64_t max_rows = 0;
};
}  // namespace

static ConvSeqs conv_seqs(const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& windows, DType dflt) {
  ConvSeqs c{{}, dflt, 0};
  for (size_t s = 0; s < spans.size(); ++s) {
    Tensor& win = *windows[s];
    if (s == 0) c.window_dtype = win.dtype;
    DEGEN_ASSERT(win.dtype == c.window_dtype, "conv1d: windows of one call in one dtype (", dtype_name(c.window_dtype),
                 " and ", dtype_name(win.dtype), ")");
    c.seqs.push_back(cuda::Conv1dSeq{spans[s].row0, spans[s].rows, win.raw()});
    c.max_rows = std::max(c.max_rows, spans[s].rows);
  }
  return c;
}

Tensor CudaBackend::do_conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                                     const std::vector<Tensor*>& windows) {
  require_device(x, "conv1d_causal");
  DEGEN_ASSERT(x.dtype == act_dtype(), "conv1d_causal: ", dtype_name(act_dtype()), " activations, got ", dtype_name(x.dtype));
  const int64_t N = x.rows(), C = x.cols();
  const int64_t K = w.shape[2];
  GdnTimer timer(*this);
  for (const Tensor* win : windows) require_device(*win, "conv1d window");
  const ConvSeqs cs = conv_seqs(spans, windows, numerics_.conv_dtype);
  Tensor out = device_tensor({N, C}, x.dtype, "conv1d_causal");
  if (cs.seqs.empty()) return out;
  const Tensor table = upload(words(cs.seqs), DType::i64, "conv1d sequences");
  const Tensor& W = weight(w);
  cuda::with_act_weight(x.dtype, W.dtype, "conv1d_causal", [&](auto a, auto b) {
    using T = decltype(a);
    using Wt = decltype(b);
    cuda::conv1d_causal_cuda<T, Wt>(cuda::cptr<T>(x), cuda::cptr<Wt>(W), cuda::mptr<T>(out), C, K,
                                    static_cast<const cuda::Conv1dSeq*>(table.raw()), static_cast<int>(cs.seqs.size()),
                                    cs.max_rows, cs.window_dtype, numerics_.has(Fault::conv_window_stuck),
                                    context()->stream());
  });
  return out;
}

Backend::GdnInputs CudaBackend::do_gdn_inputs(const Tensor& qkv, const TensorView& conv_w,
                                              const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& windows,
                                              const Tensor& a, const Tensor& b, const TensorView& A_log,
                                              const TensorView& dt_bias, const GdnHeads& h, double eps,
                                              double q_scale) {
  const int64_t N = qkv.rows(), K = conv_w.shape[2];
  for (const Tensor* t : {&qkv, &a, &b}) require_device(*t, "gdn_inputs");
  for (const Tensor* win : windows) require_device(*win, "conv1d window");
  const ConvSeqs cs = conv_seqs(spans, windows, numerics_.conv_dtype);
  if (cs.seqs.empty() || cs.max_rows > cuda::kConvFusedRows || K < 2 || qkv.dtype != act_dtype() ||
      a.dtype != qkv.dtype || b.dtype != qkv.dtype)
    return Backend::do_gdn_inputs(qkv, conv_w, spans, windows, a, b, A_log, dt_bias, h, eps, q_scale);
  GdnTimer timer(*this);
  GdnInputs r;
  r.q = device_tensor({N, h.nk, h.dk}, qkv.dtype, "l2norm");
  r.k = device_tensor({N, h.nk, h.dk}, qkv.dtype, "l2norm");
  r.v = device_tensor({N, h.nv, h.dv}, qkv.dtype, "slice_cols");
  r.g = device_tensor(a.shape, DType::f32, "gdn g");
  r.beta = device_tensor(a.shape, a.dtype, "gdn beta");
  const Tensor table = upload(words(cs.seqs), DType::i64, "conv1d sequences");
  // An observed layer: the kernel writes its conv output as well (the step gdn_conv inside the op)
  Tensor conv_tap;
  if (taps_wanted()) conv_tap = device_tensor({N, qkv.cols()}, qkv.dtype, "gdn_conv tap");
  const Tensor& W = weight(conv_w);
  const Tensor& Al = weight(A_log, /*keep_dtype=*/true);
  const Tensor& dt = weight(dt_bias, /*keep_dtype=*/true);
  DEGEN_ASSERT((Al.dtype == DType::f32 || Al.dtype == DType::bf16) && (dt.dtype == DType::f32 || dt.dtype == DType::bf16),
               "gdn_inputs: A_log / dt_bias dtypes");
  cuda::with_act_weight(qkv.dtype, W.dtype, "gdn_inputs", [&](auto x, auto y) {
    using T = decltype(x);
    using Wt = decltype(y);
    cuda::GdnConvInputs<T> io;
    io.a = cuda::cptr<T>(a);
    io.b = cuda::cptr<T>(b);
    io.A_log = Al.raw();
    io.a_log_f32 = Al.dtype == DType::f32;
    io.dt_bias = dt.raw();
    io.dt_f32 = dt.dtype == DType::f32;
    io.no_exp = numerics_.has(Fault::alog_no_exp);
    io.q = cuda::mptr<T>(r.q);
    io.k = cuda::mptr<T>(r.k);
    io.v = cuda::mptr<T>(r.v);
    io.g = r.g.data<float>();
    io.beta = cuda::mptr<T>(r.beta);
    io.nk = h.nk;
    io.dk = h.dk;
    io.nv = h.nv;
    io.dv = h.dv;
    io.eps = static_cast<float>(eps);
    io.q_scale = static_cast<float>(q_scale);
    io.skip_l2norm = numerics_.has(Fault::gdn_skip_l2norm);
    if (!conv_tap.empty()) io.conv = cuda::mptr<T>(conv_tap);
    cuda::gdn_conv_inputs_cuda<T, Wt>(cuda::cptr<T>(qkv), cuda::cptr<Wt>(W), K,
                                      static_cast<const cuda::Conv1dSeq*>(table.raw()),
                                      static_cast<int>(cs.seqs.size()), cs.window_dtype,
                                      numerics_.has(Fault::conv_window_stuck), io, context()->stream());
  });
  if (!conv_tap.empty()) write_tap(TapRole::gdn_conv, conv_tap);
  return r;
}

}  // namespace degen
