// Device pieces the gated delta rule kernels share (kernels/gdn.cu: recurrent and chunked;
// kernels/gdn_fla.cu: gdn=fla), so that each is computed one way: the key head a value head reads
// (and the fault gdn-head-mod), the output's store (and the fault gdn-out-fp16), the state's
// storage rounding, a chunk's cumulative log decay, the UT transform's forward substitution, and
// the host's check of a call's shape.
#pragma once
#include "kernels/common.cuh"
#include "kernels/check.h"
#include "kernels/gdn.h"

namespace degen::cuda {

// Value head j reads key head j / r (fault gdn-head-mod: j mod n_k).
__device__ __forceinline__ int key_head(const GdnShape& sh, int j) {
  return sh.head_mod ? j % sh.n_k : j / (sh.n_v / sh.n_k);
}

// o as stored in the activation dtype A, once from fp32 (fault gdn-out-fp16: through fp16 first,
// inf beyond ±65504).
template <typename A>
__device__ __forceinline__ A out_value(const GdnShape& sh, float x) {
  if (sh.out_fp16) x = __half2float(__float2half_rn(x));
  return from_f32<A>(x);
}

// x as stored in SW and read back (identity for fp32).
template <typename SW>
__device__ __forceinline__ float stored(float x) {
  return to_f32(from_f32<SW>(x));
}

// G_i = Σ_{m<=i} g_m for i < n, summed in order as the reference does, by the thread with tid 0
// (the caller synchronises before reading G).
__device__ __forceinline__ void chunk_log_decay(const float* g, float* G, int n, int tid) {
  if (tid != 0) return;
  float run = 0.0f;
  for (int i = 0; i < n; ++i) G[i] = (run += g[i]);
}

// T = (I + M)⁻¹ for the strictly lower M of L rows (row stride ld, in shared memory), by forward
// substitution row by row: T_ij = −(M_ij + Σ_{j<l<i} M_il T_lj), T_ii = 1; the entries above the
// diagonal and past L are not written. Every thread of the block calls it (a barrier per row);
// tid / nt: the caller's flat thread index and count.
__device__ __forceinline__ void unit_lower_inverse(const float* M, float* T, int L, int ld, int tid, int nt) {
  for (int i = 0; i < L; ++i) {
    for (int jj = tid; jj < i; jj += nt) {
      float s = M[i * ld + jj];
      for (int l = jj + 1; l < i; ++l) s = fmaf(M[i * ld + l], T[l * ld + jj], s);
      T[i * ld + jj] = -s;
    }
    if (tid == 0) T[i * ld + i] = 1.0f;
    __syncthreads();
  }
}

// The shapes every gdn launcher takes (the kernels index heads and sequences with int, one grid
// dimension per sequence).
inline void gdn_check_shape(const GdnShape& sh, int n_seq) {
  DEGEN_ASSERT(sh.n_k > 0 && sh.n_v % sh.n_k == 0, "gdn: n_v ", sh.n_v, " not a multiple of n_k ", sh.n_k);
  DEGEN_ASSERT(sh.d_k > 0 && sh.d_k <= kGdnMaxDk, "gdn: d_k ", sh.d_k, " outside 1..", kGdnMaxDk);
  DEGEN_ASSERT(sh.d_v > 0, "gdn: d_v ", sh.d_v);
  DEGEN_ASSERT(n_seq <= 65535, "gdn: ", n_seq, " sequences in one call");
}

}  // namespace degen::cuda
