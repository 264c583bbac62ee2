// attn=naive (DESIGN.md §5): materialised softmax as HF eager computes it under bf16 — scores
// q·k·s rounded to bf16 into a scratch matrix, softmax in fp32 over those, probabilities rounded to
// bf16 into the same matrix, P·V accumulated in fp32 and rounded to bf16 once.
// src/cpu/attention.cpp (run == naive) is the reference.
#include "cuda/check.h"
#include "attention.cuh"

namespace degen::cuda {

template <typename KV>
static __global__ void __launch_bounds__(kAttnThreads) attention_naive_kernel(AttnArgs a, bf16* scratch) {
  __shared__ float q[kAttnMaxHeadDim];
  __shared__ float red[32];
  const AttnRow<KV> r = attn_row<KV>(a, blockIdx.x);
  load_query(a, r.row, r.h, q);
  bf16* S = scratch + int64_t(blockIdx.x) * a.max_ctx;
  const int64_t stride = int64_t(a.n_kv) * a.D;
  const int warp = threadIdx.x >> 5;
  // 1. scores, materialised in bf16
  for (int64_t u = warp; u < r.ctx; u += kAttnWarps) {
    const float d = warp_dot(q, r.K + u * stride, a.D);
    if ((threadIdx.x & 31) == 0) S[u] = __float2bfloat16_rn(d * a.scale);
  }
  __syncthreads();
  // 2. fp32 softmax over the materialised scores; probabilities materialised in bf16
  float mx = -INFINITY;
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x) mx = fmaxf(mx, __bfloat162float(S[u]));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x) sum += expf(__bfloat162float(S[u]) - mx);
  sum = block_sum(sum, red);
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x)
    S[u] = __float2bfloat16_rn(expf(__bfloat162float(S[u]) - mx) / sum);
  __syncthreads();
  // 3. P·V in fp32
  float acc[kAttnPerThread] = {};
  for (int64_t u = 0; u < r.ctx; ++u) {
    const float p = __bfloat162float(S[u]);
    const KV* vrow = r.V + u * stride;
#pragma unroll
    for (int i = 0; i < kAttnPerThread; ++i) {
      const int e = threadIdx.x + i * kAttnThreads;
      if (e < a.D) acc[i] += p * to_f32(vrow[e]);
    }
  }
  bf16* o = a.out + (r.row * a.n_q + r.h) * a.D;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int e = threadIdx.x + i * kAttnThreads;
    if (e < a.D) o[e] = __float2bfloat16_rn(acc[i]);
  }
}

void attention_naive_cuda(const AttnArgs& a, bf16* scratch, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const unsigned blocks = static_cast<unsigned>(a.M * a.n_q);
  dispatch_kv(a.kv_dtype, [&](auto kv) {
    attention_naive_kernel<decltype(kv)><<<blocks, kAttnThreads, 0, stream>>>(a, scratch);
  });
  CUDA_CHECK_LAUNCH("attention_naive_kernel");
}

}  // namespace degen::cuda
