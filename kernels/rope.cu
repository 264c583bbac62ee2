// Partial rotary embedding, rotate-half (NeoX) pairing (spec §4.5; src/cpu/rope.cpp is the
// reference): for i < R/2, u'_i = u_i c_i - u_{i+R/2} s_i and u'_{i+R/2} = u_{i+R/2} c_i + u_i s_i.
// note: the angle p·ω_i is an fp32 product (HF), cos/sin are taken in double of that angle and
// rounded to bf16 (HF and vLLM keep cos/sin caches in the model dtype; not for the fp32 activations
// of precision=ref), the rotation is fp32 and the result is rounded to the activation dtype once. One thread per (row, head, pair).
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/dispatch.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/rope.h"

#include <type_traits>

namespace degen::cuda {

// Rotates pair i of the head row u (of m pairs) by position p at frequency w: every RoPE of the
// backend goes through here (rope_partial_kernel, attn_inputs_kernel), so they agree bit for bit.
template <typename T>
__device__ __forceinline__ void rope_pair(T* u, int i, int m, int64_t p, float w, bool interleaved) {
  const float phi = static_cast<float>(p) * w;
  float c = static_cast<float>(cos(static_cast<double>(phi)));
  float s = static_cast<float>(sin(static_cast<double>(phi)));
  if (std::is_same<T, bf16>::value) {  // the model-dtype cos/sin caches of the GPU engines
    c = round_bf16(c);
    s = round_bf16(s);
  }
  const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + m;
  const float a = to_f32(u[i0]), b = to_f32(u[i1]);
  u[i0] = from_f32<T>(a * c - b * s);
  u[i1] = from_f32<T>(b * c + a * s);
}

template <typename T>
static __global__ void rope_partial_kernel(T* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads,
                                         int64_t D, int m, bool interleaved) {
  const int64_t total = N * heads * m;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % m);
    const int64_t nh = k / m, n = nh / heads;
    rope_pair(x + nh * D, i, m, pos[n], inv_freq[i], interleaved);
  }
}

template <typename T>
void rope_partial_cuda(T* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads, int64_t D,
                       int rotary_dim, bool interleaved, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  const int m = rotary_dim / 2;
  const int64_t total = N * heads * m;
  if (total == 0) return;
  rope_partial_kernel<T><<<std::min<unsigned>(blocks_for(total, 256), 65535u * 8), 256, 0, stream>>>(x, pos, inv_freq, N, heads,
                                                                                                  D, m, interleaved);
  CUDA_CHECK_LAUNCH("rope_partial_kernel");
}

// One block per (head, row): q heads first, then k heads. Each head row is an rmsnorm_row into its
// output (rmsnorm_kernel's computation), then, after a barrier, rotated there pair by pair by
// rope_pair (rope_partial_kernel's): bit for bit the ops it replaces. kStore: a k head's block then
// stores the rotated row and the v head row in the caches (kv_append_kernel's conversion).
template <typename T, typename W, typename KV, bool kStore>
static __global__ void attn_inputs_kernel(const T* qg, const T* kin, const W* qw, const W* kw, T* q, T* gate, T* k,
                                          const int64_t* pos, const float* inv_freq, int64_t N, int64_t nq,
                                          int64_t nkv, int64_t D, int m, float eps, float w_shift, bool interleaved,
                                          KvStore store) {
  __shared__ float scratch[32];
  const int64_t h = blockIdx.x;
  const bool is_q = h < nq;
  const int64_t hh = is_q ? h : h - nq;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const T* src = is_q ? qg + (n * nq + hh) * 2 * D : kin + (n * nkv + hh) * D;
    T* dst = is_q ? q + (n * nq + hh) * D : k + (n * nkv + hh) * D;
    if (is_q)
      for (int64_t c = threadIdx.x; c < D; c += blockDim.x) gate[(n * nq + hh) * D + c] = src[D + c];
    rmsnorm_row(src, is_q ? qw : kw, dst, D, eps, w_shift, scratch);
    __syncthreads();  // a pair spans elements that other threads normed
    for (int i = threadIdx.x; i < m; i += blockDim.x) rope_pair(dst, i, m, pos[n], inv_freq[i], interleaved);
    if (kStore && !is_q) {
      __syncthreads();  // the row's pairs were rotated by other threads
      const AttnSeq s = store.seqs[store.row_seq[n]];
      const int64_t at = (store.dst_row[n] * nkv + hh) * D;
      const T* vrow = static_cast<const T*>(store.v) + (n * nkv + hh) * D;
      for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        static_cast<KV*>(const_cast<void*>(s.k))[at + c] = from_f32<KV>(to_f32(dst[c]));
        static_cast<KV*>(const_cast<void*>(s.v))[at + c] = from_f32<KV>(to_f32(vrow[c]));
      }
    }
  }
}

template <typename T, typename W>
void attn_inputs_cuda(const T* qg, const T* kin, const W* qw, const W* kw, T* q, T* gate, T* k, const int64_t* pos,
                      const float* inv_freq, int64_t N, int64_t nq, int64_t nkv, int64_t D, int rotary_dim, float eps,
                      float w_shift, bool interleaved, const KvStore& store, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || nq + nkv == 0 || D == 0) return;
  const dim3 grid(static_cast<unsigned>(nq + nkv), static_cast<unsigned>(N < 65535 ? N : 65535));
  if (!store.v) {
    attn_inputs_kernel<T, W, T, false><<<grid, row_threads(D), 0, stream>>>(
        qg, kin, qw, kw, q, gate, k, pos, inv_freq, N, nq, nkv, D, rotary_dim / 2, eps, w_shift, interleaved, store);
  } else {
    dispatch_float(store.kv_dtype, "attn_inputs KV store", [&](auto kv) {
      using KV = decltype(kv);
      attn_inputs_kernel<T, W, KV, true><<<grid, row_threads(D), 0, stream>>>(
          qg, kin, qw, kw, q, gate, k, pos, inv_freq, N, nq, nkv, D, rotary_dim / 2, eps, w_shift, interleaved, store);
    });
  }
  CUDA_CHECK_LAUNCH("attn_inputs_kernel");
}
#define DEGEN_ATTN_INPUTS_INSTANTIATE(T, W)                                                                     \
  template void attn_inputs_cuda<T, W>(const T*, const T*, const W*, const W*, T*, T*, T*, const int64_t*,        \
                                       const float*, int64_t, int64_t, int64_t, int64_t, int, float, float, bool, \
                                       const KvStore&, cudaStream_t);
DEGEN_ATTN_INPUTS_INSTANTIATE(bf16, bf16)
DEGEN_ATTN_INPUTS_INSTANTIATE(float, bf16)
DEGEN_ATTN_INPUTS_INSTANTIATE(float, float)
#undef DEGEN_ATTN_INPUTS_INSTANTIATE

template void rope_partial_cuda<bf16>(bf16*, const int64_t*, const float*, int64_t, int64_t, int64_t, int, bool,
                                      cudaStream_t);
template void rope_partial_cuda<float>(float*, const int64_t*, const float*, int64_t, int64_t, int64_t, int, bool,
                                       cudaStream_t);

}  // namespace degen::cuda
