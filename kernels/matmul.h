// Launchers of kernels/matmul.cu: y = x Wᵀ with bf16 operands and fp32 accumulation, the result
// rounded to bf16 once (x [N, in], W [out, in] row-major as in the checkpoint, y [N, out]).
// Mirrors src/cpu/matmul.cpp. Device pointers, caller's stream / handle.
#pragma once
#include <cstdint>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace degen::cuda {

// gemm=cublas: cublasGemmEx, CUBLAS_COMPUTE_32F (the handle is bound to the backend's stream).
void matmul_bf16_cublas(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                        int64_t N, int64_t in, int64_t out);
// gemm=simple: a plain shared-memory tiled kernel (fp32 FMA, no tensor cores) that does not depend
// on cuBLAS, to clear or convict it.
void matmul_bf16_simple_cuda(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t N, int64_t in,
                             int64_t out, cudaStream_t stream);

}  // namespace degen::cuda
