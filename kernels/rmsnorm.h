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
// out = x / sqrt(mean(x²) + eps) * (plus_one ? 1 + w : w).
template <typename T, typename W>
void rmsnorm_cuda(const T* x, const W* w, T* out, int64_t R, int64_t C, float eps, bool plus_one, cudaStream_t stream);
// out = w' ⊙ x̂ ⊙ silu(z), x̂ = x / sqrt(mean(x²) + eps), w' = w (or 1 + w: fault gdn-norm-plus-one).
template <typename T, typename W>
void gated_rmsnorm_cuda(const T* x, const T* z, const W* w, T* out, int64_t R, int64_t C, float eps, bool plus_one,
                        cudaStream_t stream);
// out = x * scale / sqrt(Σx² + eps), or x * scale when `skip` (fault gdn-skip-l2norm).
template <typename T>
void l2norm_cuda(const T* x, T* out, int64_t R, int64_t C, float eps, float scale, bool skip, cudaStream_t stream);

}  // namespace degen::cuda
