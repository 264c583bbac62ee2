// Device code shared by the attention kernels: one block of kAttnThreads threads computes one
// (query row, head); the query row lives in shared memory as fp32, each thread owns output dims
// e = threadIdx.x + i * kAttnThreads. Included by kernels/attention_*.cu only.
#pragma once
#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/dispatch.cuh"

namespace degen::cuda {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnPerThread = kAttnMaxHeadDim / kAttnThreads;

// Where a block of the launch works: batch row, query head, KV head, context length and the
// sequence's cache rows of KV head j.
template <typename KV>
struct AttnRow {
  int64_t row = 0;
  int h = 0, j = 0;
  int64_t ctx = 0;
  const KV* K = nullptr;  // row u of KV head j: K + u * n_kv * D
  const KV* V = nullptr;
};

template <typename KV>
__device__ __forceinline__ AttnRow<KV> attn_row(const AttnArgs& a, int64_t item) {
  AttnRow<KV> r;
  const int64_t m = item / a.n_q;
  r.h = static_cast<int>(item % a.n_q);
  r.j = r.h / (a.n_q / a.n_kv);
  r.row = a.rows[m];
  const AttnSeq s = a.seqs[a.row_seq[m]];
  r.ctx = s.pos0 + (r.row - s.row0) + 1;  // causal: keys 0..pos
  r.K = static_cast<const KV*>(s.k) + int64_t(r.j) * a.D;
  r.V = static_cast<const KV*>(s.v) + int64_t(r.j) * a.D;
  return r;
}

// Loads the (row, head) query (activation type A) into shared fp32 q[D]; synchronises.
template <typename A>
__device__ __forceinline__ void load_query(const AttnArgs& a, int64_t row, int h, float* q) {
  const A* src = static_cast<const A*>(a.q) + (row * a.n_q + h) * a.D;
  for (int e = threadIdx.x; e < a.D; e += blockDim.x) q[e] = to_f32(src[e]);
  __syncthreads();
}

// q · k_u in fp32 by one warp (lanes over D); every lane gets the sum.
template <typename KV>
__device__ __forceinline__ float warp_dot(const float* q, const KV* k, int D) {
  float d = 0.0f;
  for (int e = threadIdx.x & 31; e < D; e += 32) d += q[e] * to_f32(k[e]);
  return warp_sum(d);
}

// The flash recurrence over keys [u0, u1) (src/cpu/attention.cpp flash_range): tiles of kFlashTile
// keys, running max m and sum l of the fp32 probabilities, acc = Σ bf16(p) v (under every
// precision, as src/cpu/attention.cpp: the rounding is part of the flash algorithm). `s_tile` is shared
// [kFlashTile]. Every thread returns m and l; acc holds its own dims.
template <typename KV>
__device__ void flash_range(const AttnArgs& a, const AttnRow<KV>& r, const float* q, int64_t u0, int64_t u1,
                            float* s_tile, float& m, float& l, float (&acc)[kAttnPerThread]) {
  const int warp = threadIdx.x >> 5;
  const int64_t stride = int64_t(a.n_kv) * a.D;
  m = -INFINITY;
  l = 0.0f;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) acc[i] = 0.0f;
  for (int64_t t0 = u0; t0 < u1; t0 += kFlashTile) {
    const int n = static_cast<int>(u1 - t0 < kFlashTile ? u1 - t0 : int64_t(kFlashTile));
    for (int u = warp; u < n; u += kAttnWarps) {
      const float d = warp_dot(q, r.K + (t0 + u) * stride, a.D);
      if ((threadIdx.x & 31) == 0) s_tile[u] = d * a.scale;
    }
    __syncthreads();
    float mt = m;
    for (int u = 0; u < n; ++u) mt = fmaxf(mt, s_tile[u]);
    const float corr = expf(m - mt);  // 0 on the first tile (m = -inf)
    l *= corr;
#pragma unroll
    for (int i = 0; i < kAttnPerThread; ++i) acc[i] *= corr;
    for (int u = 0; u < n; ++u) {
      const float p = expf(s_tile[u] - mt);
      l += p;                          // the row sum takes the fp32 probabilities
      const float pb = round_bf16(p);  // P·V takes them in bf16 (part of the algorithm: every precision)
      const KV* vrow = r.V + (t0 + u) * stride;
#pragma unroll
      for (int i = 0; i < kAttnPerThread; ++i) {
        const int e = threadIdx.x + i * kAttnThreads;
        if (e < a.D) acc[i] += pb * to_f32(vrow[e]);
      }
    }
    m = mt;
    __syncthreads();  // s_tile is rewritten by the next tile
  }
}

// The split-KV merge of one (row, head) (src/cpu/attention.cpp): `parts` partial outputs part[i * D ..]
// (fp32) with log-sum-exps L[i], weighted exp(L[i] - lse) with lse their log-sum-exp, into o[D]. The
// block's threads share the dims.
template <typename A>
__device__ __forceinline__ void merge_parts(const float* part, const float* L, int parts, int D, A* o) {
  float lmax = -INFINITY;
  for (int i = 0; i < parts; ++i) lmax = fmaxf(lmax, L[i]);
  float sum = 0.0f;
  for (int i = 0; i < parts; ++i) sum += expf(L[i] - lmax);
  const float lse_all = lmax + logf(sum);
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < parts; ++i) acc += expf(L[i] - lse_all) * part[int64_t(i) * D + e];
    o[e] = from_f32<A>(acc);
  }
}

// Calls f(KV{}) for the cache dtype.
template <typename F>
void dispatch_kv(DType t, F&& f) {
  switch (t) {
    case DType::bf16: f(bf16{}); return;
    case DType::f8_e4m3: f(e4m3{}); return;
    case DType::f32: f(float{}); return;
    default: throw std::logic_error(cat("attention: KV cache dtype ", dtype_name(t), " is not bf16, f8_e4m3 or f32"));
  }
}

// Calls f(KV{}, A{}) for the cache dtype and the activation dtype (bf16 or f32).
template <typename F>
void dispatch_kv_act(DType kv, DType act, F&& f) {
  dispatch_kv(kv, [&](auto k) {
    if (act == DType::bf16) f(k, bf16{});
    else if (act == DType::f32) f(k, float{});
    else throw std::logic_error(cat("attention: activations in ", dtype_name(act), ", not bf16 or f32"));
  });
}

}  // namespace degen::cuda
