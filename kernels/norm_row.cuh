// One row's norms, as every norm kernel computes them (kernels/rmsnorm.cu, and the fused kernels of
// kernels/rope.cu): one block per row of C, row_threads(C) threads, thread t taking elements t,
// t + blockDim, ...; the sum of squares a block reduction in fp32; each output computed in fp32 and
// rounded once. A fused kernel that calls these computes bit for bit what the plain kernel does.
// Each thread reads back only the elements it wrote, so a row may be normed in place of its input.
#pragma once
#include "kernels/common.cuh"

namespace degen::cuda {

// The block size of the row kernels: one warp per 32 elements, at most 256.
inline int row_threads(int64_t C) { return C >= 256 ? 256 : static_cast<int>((C + 31) / 32 * 32); }

// Σ x² over the row in fp32: thread t sums elements t, t + blockDim, ..., then a block reduction
// (every thread gets the sum). The one sum of squares of every row norm below.
template <typename T>
__device__ __forceinline__ float row_sum_squares(const T* x, int64_t C, float* scratch) {
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_f32(x[c]);
    ss += v * v;
  }
  return block_sum(ss, scratch);
}

// out = x / sqrt(mean(x²) + eps) * (w_shift + w): w_shift 1 zero-centred, 0 plain, 2 under fault
// norm-double-plus-one (norm_weight_shift of engine/backend.h). `scratch`: 32 floats of shared memory.
template <typename T, typename W>
__device__ __forceinline__ void rmsnorm_row(const T* x, const W* w, T* out, int64_t C, float eps, float w_shift,
                                            float* scratch) {
  const float inv = 1.0f / sqrtf(row_sum_squares(x, C, scratch) / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float wv = to_f32(w[c]) + w_shift;
    out[c] = from_f32<T>(to_f32(x[c]) * inv * wv);
  }
}

// The GDN gated norm (norm before gate, spec §4.2b): out = w' ⊙ x̂ ⊙ silu(z), w' = w_shift + w
// (w_shift 0; 1 under fault gdn-norm-plus-one).
template <typename T, typename W>
__device__ __forceinline__ void gated_rmsnorm_row(const T* x, const T* z, const W* w, T* out, int64_t C, float eps,
                                                  float w_shift, float* scratch) {
  const float inv = 1.0f / sqrtf(row_sum_squares(x, C, scratch) / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float wv = to_f32(w[c]) + w_shift;
    out[c] = from_f32<T>(wv * (to_f32(x[c]) * inv) * siluf_(to_f32(z[c])));
  }
}

// out = x * scale / sqrt(Σx² + eps), or x * scale when `skip` (fault gdn-skip-l2norm).
template <typename T>
__device__ __forceinline__ void l2norm_row(const T* x, T* out, int64_t C, float eps, float scale, bool skip,
                                           float* scratch) {
  const float s = skip ? scale : scale / sqrtf(row_sum_squares(x, C, scratch) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = from_f32<T>(to_f32(x[c]) * s);
}

}  // namespace degen::cuda
