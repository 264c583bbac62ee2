// MoE router kernel (spec §4.8; src/cpu/moe.cpp is the reference): one block per token computes the
// fp32 softmax over all experts (probabilities kept in shared memory), then k rounds of a block
// arg-max (ties: the lower expert id) that each take one expert out, then the optional
// renormalisation of the k weights.
#include "cuda/check.h"
#include "common.cuh"
#include "moe.h"

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

}  // namespace degen::cuda
