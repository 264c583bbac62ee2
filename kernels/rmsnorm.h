// Launchers of kernels/rmsnorm.cu (device pointers, caller's stream): the two RMSNorm variants, the
// GDN gated RMSNorm and the GDN q/k L2 norm (spec model.md §4.2, §4.7.3). Mirrors src/cpu/rmsnorm.cpp.
// One block per row; sums of squares in fp32; outputs bf16, rounded once.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace degen::cuda {

// out = x / sqrt(mean(x²) + eps) * (plus_one ? 1 + w : w)   (x, out [R, C]; w bf16 [C]).
void rmsnorm_cuda(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int64_t R, int64_t C, float eps,
                  bool plus_one, cudaStream_t stream);
// out = w' ⊙ x̂ ⊙ silu(z), x̂ = x / sqrt(mean(x²) + eps), w' = w (or 1 + w: fault gdn-norm-plus-one).
void gated_rmsnorm_cuda(const __nv_bfloat16* x, const __nv_bfloat16* z, const __nv_bfloat16* w, __nv_bfloat16* out,
                        int64_t R, int64_t C, float eps, bool plus_one, cudaStream_t stream);
// out = x * scale / sqrt(Σx² + eps), or x * scale when `skip` (fault gdn-skip-l2norm).
void l2norm_cuda(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t R, int64_t C, float eps, float scale, bool skip,
                 cudaStream_t stream);

}  // namespace degen::cuda
