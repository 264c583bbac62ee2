// attn=naive (DESIGN.md §5): materialised softmax as HF eager computes it under bf16 — scores
// q·k·s rounded to bf16 into a scratch matrix, softmax in fp32 over those, probabilities rounded to
// bf16 into the same matrix, P·V accumulated in fp32 and rounded to bf16 once. With fp32
// activations (precision=ref) the same steps in fp32.
// src/cpu/attention.cpp (run == naive) is the reference.
#include "kernels/check.h"
#include "kernels/attention.cuh"

namespace degen::cuda {

template <typename KV, typename A>
static __global__ void __launch_bounds__(kAttnThreads) attention_naive_kernel(AttnArgs a, A* scratch) {
  __shared__ float q[kAttnMaxHeadDim];
  __shared__ float red[32];
  const AttnRow<KV> r = attn_row<KV>(a, blockIdx.x);
  load_query<A>(a, r.row, r.h, q);
  A* S = scratch + int64_t(blockIdx.x) * a.max_ctx;
  const int64_t stride = int64_t(a.n_kv) * a.D;
  const int warp = threadIdx.x >> 5;
  // 1. scores, materialised in A
  for (int64_t u = warp; u < r.ctx; u += kAttnWarps) {
    const float d = warp_dot(q, r.K + u * stride, a.D);
    if ((threadIdx.x & 31) == 0) S[u] = from_f32<A>(d * a.scale);
  }
  __syncthreads();
  // 2. fp32 softmax over the materialised scores; probabilities materialised in A
  float mx = -INFINITY;
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x) mx = fmaxf(mx, to_f32(S[u]));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x) sum += expf(to_f32(S[u]) - mx);
  sum = block_sum(sum, red);
  for (int64_t u = threadIdx.x; u < r.ctx; u += blockDim.x)
    S[u] = from_f32<A>(expf(to_f32(S[u]) - mx) / sum);
  __syncthreads();
  // 3. P·V in fp32
  float acc[kAttnPerThread] = {};
  for (int64_t u = 0; u < r.ctx; ++u) {
    const float p = to_f32(S[u]);
    const KV* vrow = r.V + u * stride;
#pragma unroll
    for (int i = 0; i < kAttnPerThread; ++i) {
      const int e = threadIdx.x + i * kAttnThreads;
      if (e < a.D) acc[i] += p * to_f32(vrow[e]);
    }
  }
  A* o = static_cast<A*>(a.out) + (r.row * a.n_q + r.h) * a.D;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int e = threadIdx.x + i * kAttnThreads;
    if (e < a.D) o[e] = from_f32<A>(acc[i]);
  }
}

void attention_naive_cuda(const AttnArgs& a, void* scratch, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const unsigned blocks = static_cast<unsigned>(a.M * a.n_q);
  dispatch_kv_act(a.kv_dtype, a.act_dtype, [&](auto kv, auto act) {
    using KV = decltype(kv);
    using A = decltype(act);
    attention_naive_kernel<KV, A><<<blocks, kAttnThreads, 0, stream>>>(a, static_cast<A*>(scratch));
  });
  CUDA_CHECK_LAUNCH("attention_naive_kernel");
}

}  // namespace degen::cuda
