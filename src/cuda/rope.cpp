// CudaBackend partial RoPE (kernels/rope.cu; src/cpu/rope.cpp is the reference).
// note: ω_i = 1 / θ^(2i/R) comes from Backend::rope_inv_freq, as the CPU's does, so both backends
// rotate by the same fp32 angles. Fault rope-interleaved (numerics()) reaches the kernel as a flag.
#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/rope.h"

namespace degen {

void CudaBackend::rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) {
  require_device(x, "rope_partial");
  DEGEN_ASSERT(x.shape.size() == 3, "rope_partial expects [N, heads, D], got ", shape_str(x.shape));
  const int64_t N = x.shape[0], heads = x.shape[1], D = x.shape[2];
  DEGEN_ASSERT(static_cast<int64_t>(pos.size()) == N, "rope_partial: ", pos.size(), " positions for ", N, " rows");
  DEGEN_ASSERT(rotary_dim % 2 == 0 && rotary_dim <= D, "rotary_dim ", rotary_dim, " for head dim ", D);
  Tensor p = upload(pos, DType::i64, "rope positions");
  Tensor f = upload(rope_inv_freq(rotary_dim, theta, numerics_.has(Fault::rope_freq_head_dim) ? static_cast<int>(D) : 0),
                    DType::f32, "rope frequencies");  // (fault rope-freq-head-dim: the exponent counts head_dim)
  cuda::with_act(x.dtype, "rope_partial", [&](auto a) {
    using T = decltype(a);
    cuda::rope_partial_cuda<T>(cuda::mptr<T>(x), p.data<int64_t>(), f.data<float>(), N, heads, D, rotary_dim,
                               numerics_.has(Fault::rope_interleaved), context()->stream());
  });
}

bool CudaBackend::attn_inputs_fusable(const TensorView& q_norm, const TensorView& k_norm, int64_t D) {
  return weight(q_norm).dtype == weight(k_norm).dtype && q_norm.numel() == D && k_norm.numel() == D;
}

Backend::AttnInputs CudaBackend::attn_inputs(const Tensor& qg, const Tensor& k, const TensorView& q_norm,
                                             const TensorView& k_norm, double eps, NormKind kind,
                                             const std::vector<int64_t>& pos, int rotary_dim, double theta, int64_t nq,
                                             int64_t nkv, int64_t D) {
  if (!attn_inputs_fusable(q_norm, k_norm, D))
    return Backend::attn_inputs(qg, k, q_norm, k_norm, eps, kind, pos, rotary_dim, theta, nq, nkv, D);
  return attn_inputs_launch(qg, k, q_norm, k_norm, eps, kind, pos, rotary_dim, theta, nq, nkv, D, cuda::KvStore{});
}

Backend::AttnCore CudaBackend::attn_inputs_attention(const Tensor& qg, const Tensor& k, const Tensor& v,
                                                     const TensorView& q_norm, const TensorView& k_norm, double eps,
                                                     NormKind kind, const std::vector<int64_t>& pos, int rotary_dim,
                                                     double theta, int64_t nq, int64_t nkv, int64_t D,
                                                     const std::vector<SeqSpan>& spans,
                                                     const std::vector<KvCache*>& caches) {
  if (!attn_inputs_fusable(q_norm, k_norm, D))
    return Backend::attn_inputs_attention(qg, k, v, q_norm, k_norm, eps, kind, pos, rotary_dim, theta, nq, nkv, D, spans,
                                          caches);
  require_device(v, "attention");
  const int64_t N = qg.rows();
  DEGEN_ASSERT(v.numel() == N * nkv * D && v.dtype == qg.dtype && qg.dtype == act_dtype(), "attention: v ",
               shape_str(v.shape), " ", dtype_name(v.dtype), " for ", N, " rows of ", nkv, " x ", D, " in ",
               dtype_name(act_dtype()));
  DEGEN_ASSERT(spans.size() == caches.size(), "attention: one cache per sequence");
  const AttnPlan p = attention_plan(N, nq, nkv, D, spans, caches);
  AttnInputs in = attn_inputs_launch(qg, k, q_norm, k_norm, eps, kind, pos, rotary_dim, theta, nq, nkv, D, kv_store(p, v));
  write_tap(TapRole::attn_q, in.q);  // an observed layer: the kernel's q and k rows (it writes both)
  write_tap(TapRole::attn_k, in.k);
  return {attention_run(p, in.q), std::move(in.gate)};
}

Backend::AttnInputs CudaBackend::attn_inputs_launch(const Tensor& qg, const Tensor& k, const TensorView& q_norm,
                                                    const TensorView& k_norm, double eps, NormKind kind,
                                                    const std::vector<int64_t>& pos, int rotary_dim, double theta,
                                                    int64_t nq, int64_t nkv, int64_t D, const cuda::KvStore& store) {
  const Tensor& QW = weight(q_norm);
  const Tensor& KW = weight(k_norm);
  require_device(qg, "attn_inputs");
  require_device(k, "attn_inputs");
  const int64_t N = qg.rows();
  DEGEN_ASSERT(qg.numel() == N * nq * 2 * D && k.numel() == N * nkv * D && k.dtype == qg.dtype,
               "attn_inputs: qg ", shape_str(qg.shape), ", k ", shape_str(k.shape));
  DEGEN_ASSERT(static_cast<int64_t>(pos.size()) == N, "attn_inputs: ", pos.size(), " positions for ", N, " rows");
  DEGEN_ASSERT(rotary_dim % 2 == 0 && rotary_dim <= D, "rotary_dim ", rotary_dim, " for head dim ", D);
  Tensor p = upload(pos, DType::i64, "rope positions");
  Tensor f = upload(rope_inv_freq(rotary_dim, theta, numerics_.has(Fault::rope_freq_head_dim) ? static_cast<int>(D) : 0),
                    DType::f32, "rope frequencies");  // (fault rope-freq-head-dim: the exponent counts head_dim)
  AttnInputs r;
  r.q = device_tensor({N, nq, D}, qg.dtype, "rmsnorm");
  r.gate = device_tensor({N, nq * D}, qg.dtype, "slice_cols");
  r.k = device_tensor({N, nkv, D}, qg.dtype, "rmsnorm");
  cuda::with_act_weight(qg.dtype, QW.dtype, "attn_inputs", [&](auto a, auto b) {
    using T = decltype(a);
    using Wt = decltype(b);
    cuda::attn_inputs_cuda<T, Wt>(cuda::cptr<T>(qg), cuda::cptr<T>(k), cuda::cptr<Wt>(QW), cuda::cptr<Wt>(KW),
                                  cuda::mptr<T>(r.q), cuda::mptr<T>(r.gate), cuda::mptr<T>(r.k), p.data<int64_t>(),
                                  f.data<float>(), N, nq, nkv, D, rotary_dim, static_cast<float>(eps),
                                  norm_weight_shift(kind), numerics_.has(Fault::rope_interleaved), store,
                                  context()->stream());
  });
  return r;
}

}  // namespace degen
