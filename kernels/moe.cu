// MoE router kernel (spec §4.8; src/cpu/moe.cpp is the reference): one block per token computes the
// fp32 softmax over all experts (probabilities kept in shared memory), then k rounds of a block
// arg-max (ties: the lower expert id) that each take one expert out, then the optional
// renormalisation of the k weights.
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/gemv_row.cuh"
#include "kernels/moe.h"

namespace degen::cuda {

namespace {
constexpr int kThreads = 128;
}

// (p, id) pair order: larger p first, then lower id.
__device__ __forceinline__ bool better(float pa, int ia, float pb, int ib) { return pa > pb || (pa == pb && ia < ib); }

template <typename T>
static __global__ void __launch_bounds__(kThreads) moe_route_kernel(const T* logits, int E, int k, bool renormalise,
                                                                    int32_t* experts, float* weights) {
  extern __shared__ float p[];  // [E]
  __shared__ float red[32];
  __shared__ float best_p[kThreads / 32];
  __shared__ int best_i[kThreads / 32];
  const T* l = logits + int64_t(blockIdx.x) * E;
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, to_f32(l[e]));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    p[e] = expf(to_f32(l[e]) - mx);
    sum += p[e];
  }
  sum = block_sum(sum, red);  // synchronises: p is complete
  for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] /= sum;
  __syncthreads();
  int32_t* ex = experts + int64_t(blockIdx.x) * k;
  float* wt = weights + int64_t(blockIdx.x) * k;
  float top = 0.0f;
  for (int r = 0; r < k; ++r) {
    float bp = -1.0f;  // taken experts are marked -1 below; every probability is >= 0 (or NaN)
    int bi = E;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      if (p[e] >= 0.0f && better(p[e], e, bp, bi)) { bp = p[e]; bi = e; }
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(op, oi, bp, bi)) { bp = op; bi = oi; }
    }
    if ((threadIdx.x & 31) == 0) { best_p[threadIdx.x >> 5] = bp; best_i[threadIdx.x >> 5] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w)
        if (better(best_p[w], best_i[w], bp, bi)) { bp = best_p[w]; bi = best_i[w]; }
      if (bi >= E) {  // NaN probabilities: the lowest untaken expert, its NaN weight propagates
        bi = 0;
        while (bi < E - 1 && p[bi] == -1.0f) ++bi;
        bp = p[bi];
      }
      ex[r] = bi;
      wt[r] = bp;
      top += bp;
      p[bi] = -1.0f;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && renormalise)
    for (int r = 0; r < k; ++r) wt[r] /= top;
}

template <typename T>
void moe_route_cuda(const T* logits, int64_t R, int E, int k, bool renormalise, int32_t* experts, float* weights,
                    cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0) return;
  const size_t shmem = size_t(E) * sizeof(float);
  if (shmem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(moe_route_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shmem)));
  moe_route_kernel<T><<<static_cast<unsigned>(R), kThreads, shmem, stream>>>(logits, E, k, renormalise, experts, weights);
  CUDA_CHECK_LAUNCH("moe_route_kernel");
}

template void moe_route_cuda<bf16>(const bf16*, int64_t, int, int, bool, int32_t*, float*, cudaStream_t);
template void moe_route_cuda<float>(const float*, int64_t, int, int, bool, int32_t*, float*, cudaStream_t);

// ---- the routed experts on the device (decode sizes) ----
// What the engine computes with the routing on the host, per token row t and each of its k experts
// e: gather_rows, matmul_swiglu (gate and up rounded to bf16, then silu(gate) * up rounded), matmul
// with down (rounded), then scatter_add_rows into zeros, expert after expert in increasing id, each
// weighted output rounded before its add and each running sum rounded. Every product row is the
// warp reduction of gemv_row.cuh, whose bits do not depend on the other rows of the launch, so the
// sums equal the gathered products' (one row here, n_e rows there) bit for bit.

// Row o of expert experts[p]'s gate and up times token p / k's row: h[p, o].
template <bool kVec>
static __global__ void __launch_bounds__(kGemvWarps * 32)
    moe_gate_up_kernel(const bf16* x, const int32_t* experts, const MoeExpertPtrs* table, bf16* h, int64_t H,
                       int64_t I, int k) {
  const int64_t o = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (o >= I) return;  // the whole warp
  const int64_t p = blockIdx.y, t = p / k;
  const MoeExpertPtrs w = table[experts[p]];
  float g, u;
  gemv_row_sums<1, kVec>(x + t * H, w.gate + o * H, H, &g);
  gemv_row_sums<1, kVec>(x + t * H, w.up + o * H, H, &u);
  if ((threadIdx.x & 31) == 0) h[p * I + o] = from_f32<bf16>(siluf_(round_bf16(g)) * round_bf16(u));
}

// Row o of the routed output of token t: its k experts' down rows in increasing expert id, each
// product rounded, weighted and rounded, added to the running sum (from +0) and rounded.
template <bool kVec>
static __global__ void __launch_bounds__(kGemvWarps * 32)
    moe_down_combine_kernel(const bf16* h, const int32_t* experts, const float* weights, const MoeExpertPtrs* table,
                            bf16* routed, int64_t H, int64_t I, int k) {
  const int64_t o = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (o >= H) return;
  const int64_t t = blockIdx.y;
  const int32_t* ex = experts + t * k;
  float r = 0.0f;
  int last = -1;
  for (int s = 0; s < k; ++s) {
    int slot = 0, e = INT32_MAX;  // the slot of the lowest expert id above the last one (ids are distinct)
    for (int i = 0; i < k; ++i)
      if (ex[i] > last && ex[i] < e) { e = ex[i]; slot = i; }
    last = e;
    float y;
    gemv_row_sums<1, kVec>(h + (t * k + slot) * I, table[e].down + o * I, I, &y);
    const float wy = round_bf16(weights[t * k + slot] * round_bf16(y));
    r = round_bf16(r + wy);
  }
  if ((threadIdx.x & 31) == 0) routed[t * H + o] = from_f32<bf16>(r);
}

void moe_experts_cuda(const bf16* x, const int32_t* experts, const float* weights, const MoeExpertPtrs* table,
                      bf16* h, bf16* routed, int64_t N, int64_t H, int64_t I, int k, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N == 0) return;
  DEGEN_ASSERT(N * k <= 65535 && H % 8 == 0 && I % 8 == 0, "moe_experts_cuda: ", N, " rows of ", k, " experts, H ", H,
               ", I ", I);
  const dim3 gu(blocks_for(I, kGemvWarps), static_cast<unsigned>(N * k));
  const dim3 dc(blocks_for(H, kGemvWarps), static_cast<unsigned>(N));
  moe_gate_up_kernel<true><<<gu, kGemvWarps * 32, 0, stream>>>(x, experts, table, h, H, I, k);
  CUDA_CHECK_LAUNCH("moe_gate_up_kernel");
  moe_down_combine_kernel<true><<<dc, kGemvWarps * 32, 0, stream>>>(h, experts, weights, table, routed, H, I, k);
  CUDA_CHECK_LAUNCH("moe_down_combine_kernel");
}

}  // namespace degen::cuda
