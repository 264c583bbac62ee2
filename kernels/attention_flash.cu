// attn=flash (DESIGN.md §5): FlashAttention-2 style online softmax over tiles of kFlashTile keys, the
// running max and sum in fp32, each tile's probabilities summed unrounded and rounded to bf16
// before P·V (the 16-bit operand of the tensor-core product), one division by the sum at the end.
// src/cpu/attention.cpp (run == flash) is the reference.
// note: one block per (query row, head) re-reads the keys for every query row; a query-tiled
// tensor-core kernel is the optimisation, this is the numerics.
#include "cuda/check.h"
#include "attention.cuh"

namespace degen::cuda {

template <typename KV, typename A>
static __global__ void __launch_bounds__(kAttnThreads) attention_flash_kernel(AttnArgs a) {
  __shared__ float q[kAttnMaxHeadDim];
  __shared__ float s_tile[kFlashTile];
  const AttnRow<KV> r = attn_row<KV>(a, blockIdx.x);
  load_query<A>(a, r.row, r.h, q);
  float m, l, acc[kAttnPerThread];
  flash_range<KV>(a, r, q, 0, r.ctx, s_tile, m, l, acc);
  A* o = static_cast<A*>(a.out) + (r.row * a.n_q + r.h) * a.D;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int e = threadIdx.x + i * kAttnThreads;
    if (e < a.D) o[e] = from_f32<A>(acc[i] / l);
  }
}

void attention_flash_cuda(const AttnArgs& a, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const unsigned blocks = static_cast<unsigned>(a.M * a.n_q);
  dispatch_kv_act(a.kv_dtype, a.act_dtype, [&](auto kv, auto act) {
    using KV = decltype(kv);
    using A = decltype(act);
    attention_flash_kernel<KV, A><<<blocks, kAttnThreads, 0, stream>>>(a);
  });
  CUDA_CHECK_LAUNCH("attention_flash_kernel");
}

}  // namespace degen::cuda
