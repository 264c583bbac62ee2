// Launcher of kernels/moe.cu: MoE routing (spec model.md §4.8 steps 2-4), mirroring
// src/cpu/moe.cpp (device pointers, caller's stream). The experts themselves are matrix products
// driven by the engine (gather_rows, matmul, swiglu, scatter_add_rows).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace degen::cuda {

// Per row of logits [R, E] (T: bf16, or float for precision=ref): softmax over all E experts in fp32, the k most probable
// (descending, lower id first on ties), their weights p_e, divided by their sum when `renormalise`.
// experts int32 [R, k], weights fp32 [R, k].
template <typename T>
void moe_route_cuda(const T* logits, int64_t R, int E, int k, bool renormalise, int32_t* experts,
                    float* weights, cudaStream_t stream);

}  // namespace degen::cuda
