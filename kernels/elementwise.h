// Launchers of kernels/elementwise.cu (device pointers, caller's stream): embedding gather,
// residual add, sigmoid gate, SwiGLU, logits padding mask. Mirrors src/cpu/elementwise.cpp.
// Activations T are bf16 (the GPU path) or float (precision=ref); the embedding table W is bf16 or
// float; every result is computed in fp32 and rounded once to T.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// out[i, :] = table[ids[i], :]  (table [V, H]; ids device int32 [N], already range-checked).
template <typename T, typename W>
void embed_cuda(const W* table, int64_t H, const int32_t* ids, int64_t N, T* out, cudaStream_t stream);
// out = a + b (n elements).
template <typename T>
void add_cuda(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
// out[r, c] = x[r, c] * sigmoid(gate[r, c]), or gate[r] when `bcast` (gate [R, 1]).
template <typename T>
void sigmoid_mul_cuda(const T* x, const T* gate, T* out, int64_t R, int64_t C, bool bcast, cudaStream_t stream);
// out = silu(gate) * up (n elements).
template <typename T>
void swiglu_cuda(const T* gate, const T* up, T* out, int64_t n, cudaStream_t stream);
// logits[r, v] = -inf where mask[v] (logits [R, V] of dtype bf16 or f32; mask device u8 [V]).
void mask_logits_cuda(void* logits, DType dtype, int64_t R, int64_t V, const uint8_t* mask, cudaStream_t stream);

}  // namespace degen::cuda
