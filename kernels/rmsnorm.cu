// Norm kernels of the CUDA backend (src/cpu/rmsnorm.cpp is the reference): zero-centred and plain
// RMSNorm, the GDN gated RMSNorm (norm before gate) and the GDN q/k L2 norm. One block per row: the
// sum of squares is a block reduction in fp32, the output is computed in fp32 and rounded to bf16
// once (spec §4.2: "compute in fp32 and cast once").
#include "cuda/check.h"
#include "common.cuh"
#include "rmsnorm.h"

namespace degen::cuda {

namespace {
int threads_for(int64_t C) { return C >= 256 ? 256 : static_cast<int>((C + 31) / 32 * 32); }
}  // namespace

static __global__ void rmsnorm_bf16_kernel(const bf16* x, const bf16* w, bf16* out, int64_t C, float eps, bool plus_one) {
  __shared__ float scratch[32];
  const bf16* xr = x + blockIdx.x * C;
  bf16* orow = out + blockIdx.x * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = __bfloat162float(xr[c]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float wv = __bfloat162float(w[c]) + (plus_one ? 1.0f : 0.0f);
    orow[c] = __float2bfloat16_rn(__bfloat162float(xr[c]) * inv * wv);
  }
}

void rmsnorm_cuda(const bf16* x, const bf16* w, bf16* out, int64_t R, int64_t C, float eps, bool plus_one,
                  cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  rmsnorm_bf16_kernel<<<static_cast<unsigned>(R), threads_for(C), 0, stream>>>(x, w, out, C, eps, plus_one);
  CUDA_CHECK_LAUNCH("rmsnorm_bf16_kernel");
}

static __global__ void gated_rmsnorm_bf16_kernel(const bf16* x, const bf16* z, const bf16* w, bf16* out, int64_t C, float eps,
                                          bool plus_one) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = __bfloat162float(x[base + c]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float wv = __bfloat162float(w[c]) + (plus_one ? 1.0f : 0.0f);
    out[base + c] = __float2bfloat16_rn(wv * (__bfloat162float(x[base + c]) * inv) * siluf_(__bfloat162float(z[base + c])));
  }
}

void gated_rmsnorm_cuda(const bf16* x, const bf16* z, const bf16* w, bf16* out, int64_t R, int64_t C, float eps,
                        bool plus_one, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  gated_rmsnorm_bf16_kernel<<<static_cast<unsigned>(R), threads_for(C), 0, stream>>>(x, z, w, out, C, eps, plus_one);
  CUDA_CHECK_LAUNCH("gated_rmsnorm_bf16_kernel");
}

static __global__ void l2norm_bf16_kernel(const bf16* x, bf16* out, int64_t C, float eps, float scale, bool skip) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = __bfloat162float(x[base + c]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float s = skip ? scale : scale / sqrtf(ss + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[base + c] = __float2bfloat16_rn(__bfloat162float(x[base + c]) * s);
}

void l2norm_cuda(const bf16* x, bf16* out, int64_t R, int64_t C, float eps, float scale, bool skip, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  l2norm_bf16_kernel<<<static_cast<unsigned>(R), threads_for(C), 0, stream>>>(x, out, C, eps, scale, skip);
  CUDA_CHECK_LAUNCH("l2norm_bf16_kernel");
}

}  // namespace degen::cuda
