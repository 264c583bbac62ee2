// The argument checks of the Backend interface: made once here, so that a backend only computes.
#include "engine/backend.h"

#include <cmath>

#include "util/error.h"

namespace degen {

std::vector<float> Backend::rope_inv_freq(int rotary_dim, double theta, int freq_dim) {
  const float den = static_cast<float>(freq_dim > 0 ? freq_dim : rotary_dim);
  std::vector<float> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / den);
  return inv_freq;
}

std::vector<Tensor> Backend::matmul_many(const Tensor& x, std::span<const TensorView* const> ws) {
  std::vector<Tensor> out;
  out.reserve(ws.size());
  for (const TensorView* w : ws) out.push_back(matmul(x, *w));
  return out;
}

Tensor Backend::matmul_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up) {
  return swiglu(matmul(x, gate), matmul(x, up));
}

void Backend::write_tap(TapRole role, const Tensor& t) {
  if (tap_sink_) tap_sink_->got.emplace_back(role, clone(t));
}

std::vector<Tensor> Backend::norm_matmul_many(const Tensor& h, const PreNorm& pre,
                                              std::span<const TensorView* const> ws) {
  const Tensor x = rmsnorm(h, *pre.w, pre.eps, pre.kind);
  write_tap(TapRole::normed_input, x);
  return matmul_many(x, ws);
}

Tensor Backend::norm_matmul_swiglu(const Tensor& h, const PreNorm& pre, const TensorView& gate, const TensorView& up) {
  const Tensor x = rmsnorm(h, *pre.w, pre.eps, pre.kind);
  write_tap(TapRole::normed_input, x);
  return matmul_swiglu(x, gate, up);
}

Tensor Backend::matmul_add(const Tensor& x, const TensorView& w, const Tensor& res) {
  const Tensor p = matmul(x, w);
  write_tap(TapRole::product, p);
  return add(res, p);
}
Tensor Backend::matmul_gate_add(const Tensor& x, const TensorView& w, const Tensor& gate, const Tensor& res) {
  const Tensor g = sigmoid_mul(matmul(x, w), gate);
  write_tap(TapRole::gated, g);
  return add(res, g);
}

Tensor Backend::gated_norm_matmul(const Tensor& x, const Tensor& z, const TensorView& norm_w, double eps,
                                  const TensorView& w, const Tensor* res) {
  const int64_t N = x.rows(), in = x.cols(), g = norm_w.numel();
  DEGEN_ASSERT(g > 0 && in % g == 0 && z.shape == x.shape, "gated_norm_matmul: rows of ", in, " in groups of ", g,
               ", z ", shape_str(z.shape));
  const Tensor y = gated_rmsnorm(x.reshape({N * in / g, g}), z.reshape({N * in / g, g}), norm_w, eps).reshape({N, in});
  write_tap(TapRole::gated, y);
  return res ? matmul_add(y, w, *res) : matmul(y, w);
}

Tensor Backend::sigmoid_gate_matmul(const Tensor& x, const Tensor& gate, const TensorView& w, const Tensor* res) {
  const Tensor y = sigmoid_mul(x, gate);
  write_tap(TapRole::gated, y);
  return res ? matmul_add(y, w, *res) : matmul(y, w);
}

Tensor Backend::rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) {
  DEGEN_ASSERT(w.numel() == x.cols(), "rmsnorm weight ", w.name, " has ", w.numel(), " elements, rows have ", x.cols());
  return do_rmsnorm(x, w, eps, kind);
}

std::pair<Tensor, Tensor> Backend::add_rmsnorm(const Tensor& a, const Tensor& b, const TensorView& w, double eps,
                                               NormKind kind) {
  Tensor u = add(a, b);
  Tensor y = rmsnorm(u, w, eps, kind);
  return {std::move(u), std::move(y)};
}

Backend::GdnQkv Backend::gdn_split_norm(const Tensor& conv, int64_t nk, int64_t dk, int64_t nv, int64_t dv, double eps,
                                        double q_scale) {
  const int64_t N = conv.rows(), dkey = nk * dk, dval = nv * dv;
  GdnQkv r;
  r.q = l2norm(slice_cols(conv, 0, dkey).reshape({N, nk, dk}), eps, q_scale);
  r.k = l2norm(slice_cols(conv, dkey, dkey).reshape({N, nk, dk}), eps, 1.0);
  r.v = slice_cols(conv, 2 * dkey, dval).reshape({N, nv, dv});
  return r;
}

Backend::AttnInputs Backend::attn_inputs(const Tensor& qg0, const Tensor& k0, const TensorView& q_norm,
                                         const TensorView& k_norm, double eps, NormKind kind,
                                         const std::vector<int64_t>& pos, int rotary_dim, double theta, int64_t nq,
                                         int64_t nkv, int64_t D) {
  const int64_t N = qg0.rows();
  const Tensor qg = qg0.reshape({N * nq, 2 * D});
  AttnInputs r;
  r.q = rmsnorm(slice_cols(qg, 0, D), q_norm, eps, kind).reshape({N, nq, D});
  r.gate = slice_cols(qg, D, D).reshape({N, nq * D});
  r.k = rmsnorm(k0.reshape({N * nkv, D}), k_norm, eps, kind).reshape({N, nkv, D});
  rope_partial(r.q, pos, rotary_dim, theta);
  rope_partial(r.k, pos, rotary_dim, theta);
  return r;
}

Backend::AttnCore Backend::attn_inputs_attention(const Tensor& qg, const Tensor& k, const Tensor& v,
                                                  const TensorView& q_norm, const TensorView& k_norm, double eps,
                                                  NormKind kind, const std::vector<int64_t>& pos, int rotary_dim,
                                                  double theta, int64_t nq, int64_t nkv, int64_t D,
                                                  const std::vector<SeqSpan>& spans,
                                                  const std::vector<KvCache*>& caches) {
  AttnInputs in = attn_inputs(qg, k, q_norm, k_norm, eps, kind, pos, rotary_dim, theta, nq, nkv, D);
  write_tap(TapRole::attn_q, in.q);
  write_tap(TapRole::attn_k, in.k);
  return {attention(in.q, in.k, v, spans, caches), std::move(in.gate)};
}

Tensor Backend::gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) {
  DEGEN_ASSERT(x.shape == z.shape && x.dtype == z.dtype, "gated_rmsnorm: operands differ: ", shape_str(x.shape), " vs ",
               shape_str(z.shape));
  DEGEN_ASSERT(w.numel() == x.cols(), "gated norm weight ", w.name, " has ", w.numel(), " elements, rows have ", x.cols());
  return do_gated_rmsnorm(x, z, w, eps);
}

Tensor Backend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                          const std::vector<KvCache*>& caches) {
  DEGEN_ASSERT(q.shape.size() == 3 && k.shape.size() == 3 && k.shape == v.shape, "attention shapes ",
               shape_str(q.shape), shape_str(k.shape), shape_str(v.shape));
  DEGEN_ASSERT(k.shape[0] == q.shape[0] && k.shape[2] == q.shape[2] && k.shape[1] > 0 && q.shape[1] % k.shape[1] == 0,
               "attention head layout");
  DEGEN_ASSERT(spans.size() == caches.size(), "attention: one cache per sequence");
  return do_attention(q, k, v, spans, caches);
}

// The arguments of a conv1d_causal call (also those of gdn_inputs' conv).
static void check_conv1d(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                         const std::vector<Tensor*>& windows) {
  const int64_t C = x.cols();
  DEGEN_ASSERT(w.shape.size() == 3 && w.shape[0] == C && w.shape[1] == 1, "conv weight ", w.name, " ",
               shape_str(w.shape), " for ", C, " channels");
  const int64_t K = w.shape[2];
  DEGEN_ASSERT(spans.size() == windows.size(), "conv1d: one window per sequence");
  for (const SeqSpan& s : spans)
    DEGEN_ASSERT(s.row0 >= 0 && s.rows >= 0 && s.row0 + s.rows <= x.rows(), "conv1d: span rows ", s.row0, "+", s.rows,
                 " outside the ", x.rows(), " rows of the batch");
  for (const Tensor* win : windows)
    DEGEN_ASSERT(win->rows() == K - 1 && win->cols() == C, "conv window ", shape_str(win->shape), ", expected [", K - 1,
                 ", ", C, "]");
}

Tensor Backend::conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                              const std::vector<Tensor*>& windows) {
  check_conv1d(x, w, spans, windows);
  return do_conv1d_causal(x, w, spans, windows);
}

Backend::GdnInputs Backend::gdn_inputs(const Tensor& qkv, const TensorView& conv_w, const std::vector<SeqSpan>& spans,
                                       const std::vector<Tensor*>& windows, const Tensor& a, const Tensor& b,
                                       const TensorView& A_log, const TensorView& dt_bias, const GdnHeads& h,
                                       double eps, double q_scale) {
  check_conv1d(qkv, conv_w, spans, windows);
  DEGEN_ASSERT(qkv.cols() == 2 * h.nk * h.dk + h.nv * h.dv, "gdn_inputs: qkv has ", qkv.cols(), " columns, expected ",
               2 * h.nk * h.dk + h.nv * h.dv);
  DEGEN_ASSERT(a.shape == b.shape && a.rows() == qkv.rows() && a.cols() == h.nv, "gdn_inputs: a ", shape_str(a.shape),
               ", b ", shape_str(b.shape), " for ", qkv.rows(), " rows of ", h.nv, " heads");
  DEGEN_ASSERT(A_log.numel() == h.nv && dt_bias.numel() == h.nv, "gdn_inputs: A_log / dt_bias for ", h.nv, " heads");
  return do_gdn_inputs(qkv, conv_w, spans, windows, a, b, A_log, dt_bias, h, eps, q_scale);
}

Backend::GdnInputs Backend::do_gdn_inputs(const Tensor& qkv, const TensorView& conv_w, const std::vector<SeqSpan>& spans,
                                          const std::vector<Tensor*>& windows, const Tensor& a, const Tensor& b,
                                          const TensorView& A_log, const TensorView& dt_bias, const GdnHeads& h,
                                          double eps, double q_scale) {
  const Tensor conv = conv1d_causal(qkv, conv_w, spans, windows);
  write_tap(TapRole::gdn_conv, conv);
  GdnQkv s = gdn_split_norm(conv, h.nk, h.dk, h.nv, h.dv, eps, q_scale);
  GdnInputs r{std::move(s.q), std::move(s.k), std::move(s.v), {}, {}};
  gdn_gates(a, b, A_log, dt_bias, r.g, r.beta);
  return r;
}

void check_kv_dtype(const KvCache& c, DType dtype) {
  if (!c.k.empty() && c.k.dtype != dtype)
    input_error("KV cache holds ", dtype_name(c.k.dtype), " rows but this layer stores ", dtype_name(dtype),
                ": a state must be used with the toggles it was made with");
}

}  // namespace degen
