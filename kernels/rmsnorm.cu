// Norm kernels of the CUDA backend (src/cpu/rmsnorm.cpp is the reference): zero-centred and plain
// RMSNorm, the GDN gated RMSNorm (norm before gate) and the GDN q/k L2 norm. One block per row: the
// sum of squares is a block reduction in fp32, the output is computed in fp32 and rounded to the activation dtype
// once (spec §4.2: "compute in fp32 and cast once").
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/rmsnorm.h"

namespace degen::cuda {

template <typename T, typename W>
static __global__ void rmsnorm_kernel(const T* x, const W* w, T* out, int64_t C, float eps, float w_shift) {
  __shared__ float scratch[32];
  rmsnorm_row(x + blockIdx.x * C, w, out + blockIdx.x * C, C, eps, w_shift, scratch);
}

template <typename T, typename W>
void rmsnorm_cuda(const T* x, const W* w, T* out, int64_t R, int64_t C, float eps, float w_shift,
                  cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  rmsnorm_kernel<T, W><<<static_cast<unsigned>(R), row_threads(C), 0, stream>>>(x, w, out, C, eps, w_shift);
  CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

// The residual add and the norm after it in one pass: sum = a + b rounded to T and stored, then
// rmsnorm_row of the stored sum: bit for bit add_kernel followed by rmsnorm_kernel. Each thread
// reads back only the elements it wrote (norm_row.cuh), so no barrier is needed between the two.
template <typename T, typename W>
static __global__ void add_rmsnorm_kernel(const T* a, const T* b, const W* w, T* sum, T* out, int64_t C, float eps,
                                          float w_shift) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    sum[base + c] = from_f32<T>(to_f32(a[base + c]) + to_f32(b[base + c]));
  rmsnorm_row(sum + base, w, out + base, C, eps, w_shift, scratch);
}

template <typename T, typename W>
void add_rmsnorm_cuda(const T* a, const T* b, const W* w, T* sum, T* out, int64_t R, int64_t C, float eps,
                      float w_shift, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  add_rmsnorm_kernel<T, W><<<static_cast<unsigned>(R), row_threads(C), 0, stream>>>(a, b, w, sum, out, C, eps, w_shift);
  CUDA_CHECK_LAUNCH("add_rmsnorm_kernel");
}

template <typename T, typename W>
static __global__ void gated_rmsnorm_kernel(const T* x, const T* z, const W* w, T* out, int64_t C, float eps,
                                          float w_shift) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * C;
  gated_rmsnorm_row(x + base, z + base, w, out + base, C, eps, w_shift, scratch);
}

template <typename T, typename W>
void gated_rmsnorm_cuda(const T* x, const T* z, const W* w, T* out, int64_t R, int64_t C, float eps,
                        float w_shift, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  gated_rmsnorm_kernel<T, W><<<static_cast<unsigned>(R), row_threads(C), 0, stream>>>(x, z, w, out, C, eps, w_shift);
  CUDA_CHECK_LAUNCH("gated_rmsnorm_kernel");
}

template <typename T>
static __global__ void l2norm_kernel(const T* x, T* out, int64_t C, float eps, float scale, bool skip) {
  __shared__ float scratch[32];
  l2norm_row(x + blockIdx.x * C, out + blockIdx.x * C, C, eps, scale, skip, scratch);
}

template <typename T>
void l2norm_cuda(const T* x, T* out, int64_t R, int64_t C, float eps, float scale, bool skip, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R == 0 || C == 0) return;
  l2norm_kernel<T><<<static_cast<unsigned>(R), row_threads(C), 0, stream>>>(x, out, C, eps, scale, skip);
  CUDA_CHECK_LAUNCH("l2norm_kernel");
}

// The GDN conv output's split (spec §4.7.3) in one launch: per row of conv [N, 2 nk dk + nv dv], the
// nk query heads L2-normalised and scaled by q_scale, the nk key heads L2-normalised, the nv value
// heads copied; one block per (head, row), each q/k head an l2norm_row of dk, as l2norm_kernel
// computes it: bit for bit slice_cols + l2norm.
template <typename T>
static __global__ void gdn_split_norm_kernel(const T* conv, T* q, T* k, T* v, int64_t N, int64_t nk, int64_t dk,
                                             int64_t nv, int64_t dv, float eps, float q_scale, bool skip) {
  __shared__ float scratch[32];
  const int64_t C = 2 * nk * dk + nv * dv, h = blockIdx.x;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const T* row = conv + n * C;
    if (h < 2 * nk) {  // block-uniform branch: every thread of the block reaches block_sum
      const bool is_k = h >= nk;
      const int64_t hh = is_k ? h - nk : h;
      l2norm_row(row + (is_k ? nk * dk : 0) + hh * dk, (is_k ? k : q) + (n * nk + hh) * dk, dk, eps,
                 is_k ? 1.0f : q_scale, skip, scratch);
    } else {
      const int64_t hh = h - 2 * nk;
      const T* src = row + 2 * nk * dk + hh * dv;
      T* dst = v + (n * nv + hh) * dv;
      for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) dst[c] = src[c];
    }
  }
}

template <typename T>
void gdn_split_norm_cuda(const T* conv, T* q, T* k, T* v, int64_t N, int64_t nk, int64_t dk, int64_t nv, int64_t dv,
                         float eps, float q_scale, bool skip, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || 2 * nk + nv == 0) return;
  const dim3 grid(static_cast<unsigned>(2 * nk + nv), static_cast<unsigned>(N < 65535 ? N : 65535));
  gdn_split_norm_kernel<T><<<grid, row_threads(dk), 0, stream>>>(conv, q, k, v, N, nk, dk, nv, dv, eps, q_scale, skip);
  CUDA_CHECK_LAUNCH("gdn_split_norm_kernel");
}
template void gdn_split_norm_cuda<bf16>(const bf16*, bf16*, bf16*, bf16*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        float, float, bool, cudaStream_t);
template void gdn_split_norm_cuda<float>(const float*, float*, float*, float*, int64_t, int64_t, int64_t, int64_t,
                                         int64_t, float, float, bool, cudaStream_t);

// bf16 activations and weights (the GPU path); float activations with bf16 or float weights (precision=ref).
#define DEGEN_NORM_INSTANTIATE(T, W)                                                                         \
  template void rmsnorm_cuda<T, W>(const T*, const W*, T*, int64_t, int64_t, float, float, cudaStream_t);       \
  template void add_rmsnorm_cuda<T, W>(const T*, const T*, const W*, T*, T*, int64_t, int64_t, float, float,      \
                                       cudaStream_t);                                                           \
  template void gated_rmsnorm_cuda<T, W>(const T*, const T*, const W*, T*, int64_t, int64_t, float, float, cudaStream_t);
DEGEN_NORM_INSTANTIATE(bf16, bf16)
DEGEN_NORM_INSTANTIATE(float, bf16)
DEGEN_NORM_INSTANTIATE(float, float)
#undef DEGEN_NORM_INSTANTIATE
template void l2norm_cuda<bf16>(const bf16*, bf16*, int64_t, int64_t, float, float, bool, cudaStream_t);
template void l2norm_cuda<float>(const float*, float*, int64_t, int64_t, float, float, bool, cudaStream_t);

}  // namespace degen::cuda
