// Launcher of kernels/moe.cu: MoE routing (spec model.md §4.8 steps 2-4), mirroring
// src/cpu/moe.cpp (device pointers, caller's stream), and the routed experts at decode sizes without
// the routing leaving the device (above kGemvMaxRows rows the engine drives them: gather_rows,
// matmul, swiglu, scatter_add_rows).
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

// One routed expert's weights on the device (gate, up [I, H]; down [H, I]; bf16).
struct MoeExpertPtrs {
  const __nv_bfloat16* gate;
  const __nv_bfloat16* up;
  const __nv_bfloat16* down;
};

// The routed experts of N token rows x [N, H] (bf16), given the routing (experts int32 [N, k],
// weights fp32 [N, k], as moe_route_cuda writes them) and a device table of the E experts'
// weights: h [N * k, I] scratch (each (row, slot)'s SwiGLU), routed [N, H] = Σ over the row's experts
// in increasing id of round(w · round(down · h)), each partial sum rounded: bit for bit gather_rows,
// the gemv products and scatter_add_rows into zeros. Two launches, 16-byte loads: H and I multiples of
// 8, every pointer 16-byte aligned (where the gemv kernels load 16 bytes too).
void moe_experts_cuda(const __nv_bfloat16* x, const int32_t* experts, const float* weights,
                      const MoeExpertPtrs* table, __nv_bfloat16* h, __nv_bfloat16* routed, int64_t N, int64_t H,
                      int64_t I, int k, cudaStream_t stream);

}  // namespace degen::cuda
