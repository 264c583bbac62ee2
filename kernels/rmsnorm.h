// Launchers of kernels/rmsnorm.cu (device pointers, caller's stream): the two RMSNorm variants, the
// GDN gated RMSNorm and the GDN q/k L2 norm (spec model.md §4.2, §4.7.3). Mirrors src/cpu/rmsnorm.cpp.
// One block per row; sums of squares in fp32; outputs rounded once to the activation dtype.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace degen::cuda {

// x, out [R, C] of T (bf16 on the GPU path, float for precision=ref); w [C] of W (bf16, or float
// where the reference keeps a wider stored weight).
// out = x / sqrt(mean(x²) + eps) * (w_shift + w): w_shift 1 zero-centred (1 + w), 0 plain, 2 under
// fault norm-double-plus-one (norm_weight_shift, engine/backend.h).
template <typename T, typename W>
void rmsnorm_cuda(const T* x, const W* w, T* out, int64_t R, int64_t C, float eps, float w_shift, cudaStream_t stream);
// sum = a + b (rounded to T), out = rmsnorm(sum) as rmsnorm_cuda computes it: one launch for the
// residual add and the norm after it.
template <typename T, typename W>
void add_rmsnorm_cuda(const T* a, const T* b, const W* w, T* sum, T* out, int64_t R, int64_t C, float eps,
                      float w_shift, cudaStream_t stream);
// out = w' ⊙ x̂ ⊙ silu(z), x̂ = x / sqrt(mean(x²) + eps), w' = w_shift + w (w_shift 0; 1 under fault
// gdn-norm-plus-one).
template <typename T, typename W>
void gated_rmsnorm_cuda(const T* x, const T* z, const W* w, T* out, int64_t R, int64_t C, float eps, float w_shift,
                        cudaStream_t stream);
// conv [N, 2 nk dk + nv dv] -> q [N, nk, dk] = l2norm(q part) * q_scale, k = l2norm(k part),
// v [N, nv, dv] copied (skip: fault gdn-skip-l2norm, as l2norm_cuda).
template <typename T>
void gdn_split_norm_cuda(const T* conv, T* q, T* k, T* v, int64_t N, int64_t nk, int64_t dk, int64_t nv, int64_t dv,
                         float eps, float q_scale, bool skip, cudaStream_t stream);
// out = x * scale / sqrt(Σx² + eps), or x * scale when `skip` (fault gdn-skip-l2norm).
template <typename T>
void l2norm_cuda(const T* x, T* out, int64_t R, int64_t C, float eps, float scale, bool skip, cudaStream_t stream);

}  // namespace degen::cuda
