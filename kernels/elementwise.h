// Launchers of kernels/elementwise.cu (device pointers, caller's stream): embedding gather,
// residual add, sigmoid gate, SwiGLU, logits padding mask. Mirrors src/cpu/elementwise.cpp.
// Activations are bf16; every result is computed in fp32 and rounded once.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// out[i, :] = table[ids[i], :]  (table [V, H] bf16; ids device int32 [N], already range-checked).
void embed_cuda(const __nv_bfloat16* table, int64_t H, const int32_t* ids, int64_t N, __nv_bfloat16* out,
                cudaStream_t stream);
// out = a + b (n elements).
void add_cuda(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, int64_t n, cudaStream_t stream);
// out[r, c] = x[r, c] * sigmoid(gate[r, c]), or gate[r] when `bcast` (gate [R, 1]).
void sigmoid_mul_cuda(const __nv_bfloat16* x, const __nv_bfloat16* gate, __nv_bfloat16* out, int64_t R, int64_t C,
                      bool bcast, cudaStream_t stream);
// out = silu(gate) * up (n elements).
void swiglu_cuda(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, int64_t n,
                 cudaStream_t stream);
// logits[r, v] = -inf where mask[v] (logits [R, V] of dtype bf16 or f32; mask device u8 [V]).
void mask_logits_cuda(void* logits, DType dtype, int64_t R, int64_t V, const uint8_t* mask, cudaStream_t stream);

}  // namespace degen::cuda
