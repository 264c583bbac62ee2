// attn=splitkv (DESIGN.md §5), flash-decoding: the keys of a decode row are cut into
// min(kSplits, ctx) contiguous parts of ceil(ctx / splits) keys; one block per (row, head, part)
// reduces its part with the flash recurrence to a partial output acc / l (fp32) and its log-sum-exp
// m + log l; a second kernel merges the parts with weights exp(lse_s - lse).
// src/cpu/attention.cpp (run == splitkv) is the reference. Multi-row calls (prefill) run flash:
// the host code only sends one-row sequences here.
#include "kernels/check.h"
#include "kernels/attention.cuh"

namespace degen::cuda {

__device__ __forceinline__ void split_layout(int64_t ctx, int64_t& len, int& parts) {
  const int64_t splits = ctx < kSplits ? ctx : int64_t(kSplits);
  len = (ctx + splits - 1) / splits;
  parts = static_cast<int>((ctx + len - 1) / len);
}

template <typename KV, typename A>
static __global__ void __launch_bounds__(kAttnThreads) attention_split_kernel(AttnArgs a, float* part, float* lse) {
  __shared__ float q[kAttnMaxHeadDim];
  __shared__ float s_tile[kFlashTile];
  const AttnRow<KV> r = attn_row<KV>(a, blockIdx.x);
  int64_t len;
  int parts;
  split_layout(r.ctx, len, parts);
  const int sp = blockIdx.y;
  if (sp >= parts) return;  // the whole block leaves: no barrier is split
  load_query<A>(a, r.row, r.h, q);
  const int64_t u0 = sp * len, u1 = r.ctx < u0 + len ? r.ctx : u0 + len;
  float m, l, acc[kAttnPerThread];
  flash_range<KV>(a, r, q, u0, u1, s_tile, m, l, acc);
  float* p = part + (int64_t(blockIdx.x) * kSplits + sp) * a.D;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int e = threadIdx.x + i * kAttnThreads;
    if (e < a.D) p[e] = acc[i] / l;
  }
  if (threadIdx.x == 0) lse[int64_t(blockIdx.x) * kSplits + sp] = m + logf(l);
}

template <typename A>
static __global__ void attention_merge_kernel(AttnArgs a, const float* part, const float* lse) {
  const AttnRow<bf16> r = attn_row<bf16>(a, blockIdx.x);  // only row, head and ctx are used
  int64_t len;
  int parts;
  split_layout(r.ctx, len, parts);
  merge_parts(part + int64_t(blockIdx.x) * kSplits * a.D, lse + int64_t(blockIdx.x) * kSplits, parts, a.D,
              static_cast<A*>(a.out) + (r.row * a.n_q + r.h) * a.D);
}

void attention_splitkv_cuda(const AttnArgs& a, float* part, float* lse, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const dim3 grid(static_cast<unsigned>(a.M * a.n_q), kSplits);
  dispatch_kv_act(a.kv_dtype, a.act_dtype, [&](auto kv, auto act) {
    using KV = decltype(kv);
    using A = decltype(act);
    attention_split_kernel<KV, A><<<grid, kAttnThreads, 0, stream>>>(a, part, lse);
    CUDA_CHECK_LAUNCH("attention_split_kernel");
    attention_merge_kernel<A><<<static_cast<unsigned>(a.M * a.n_q), kAttnThreads, 0, stream>>>(a, part, lse);
    CUDA_CHECK_LAUNCH("attention_merge_kernel");
  });
}

}  // namespace degen::cuda
