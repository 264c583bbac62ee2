// Launchers of kernels/matmul.cu: y = x Wᵀ with fp32 accumulation, the result rounded once to y's
// dtype: bf16 operands on the GPU path, fp32 on the reference (precision=ref) (x [N, in], W [out, in] row-major as in the checkpoint, y [N, out]).
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
// The reference's product (precision=ref): fp32 x [N, in] times fp32 rows W [out, in], fp32 sums
// (CUBLAS_COMPUTE_32F on fp32 operands: no TF32 under the handle's default math mode), into the
// columns [0, out) of y, whose rows are ldy apart (y may be a column block of a wider matrix).
void matmul_f32_cublas(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t N, int64_t in,
                       int64_t out, int64_t ldy);
// gemm=auto (the default) at N <= kGemvMaxRows rows, the decode steps' products: a matrix-vector
// kernel that reads W once with 16-byte loads, fp32 sums, bf16 x bf16 -> bf16. Larger N go to
// cuBLAS. Caller's stream.
constexpr int64_t kGemvMaxRows = 8;
// The matrix-vector kernels' 16-byte loads need 16-byte aligned rows (with `in` a multiple of 8).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// The op before a product done by the product itself: each block computes the N rows of its input
// from x into shared memory, as the op's own kernel stores them (bit for bit), then multiplies.
//   rmsnorm:       rmsnorm_cuda of x with w (the decode step's input and post-attention norms);
//   gated_rmsnorm: gated_rmsnorm_cuda of x and z per group of `group` elements (the GDN out_proj's);
//   sigmoid_gate:  sigmoid_mul_cuda of x and z (the attention output gate, before o_proj).
// N x in x 2 bytes of shared memory, at most kGemvPrologueSmemBytes (the default limit).
struct GemvPrologue {
  enum Kind : int { none, rmsnorm, gated_rmsnorm, sigmoid_gate };
  Kind kind = none;
  const __nv_bfloat16* w = nullptr;  // the norm weight
  const __nv_bfloat16* z = nullptr;  // the gate rows [N, in]
  int64_t group = 0;                 // gated_rmsnorm: the norm's length
  float eps = 0.0f;
  float w_shift = 0.0f;              // the norm weight is (w_shift + w): 0, 1 (1 + w) or 2
};
constexpr int64_t kGemvPrologueSmemBytes = 48 * 1024;
// res (nullable, [N, out]): y = res + x Wᵀ, the residual add in the epilogue (add_cuda of the stored
// product: bit for bit matmul then add). row_gate (nullable, [N]): the stored product times
// sigmoid(row_gate[n]), rounded (sigmoid_mul_cuda with a one-column gate), before the add: the MoE
// shared expert's scalar gate (matmul, sigmoid_mul, add: bit for bit).
void matmul_gemv_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t N, int64_t in,
                      int64_t out, const GemvPrologue& pro, const __nv_bfloat16* res, cudaStream_t stream,
                      const __nv_bfloat16* row_gate = nullptr);
// Up to kGemvMaxMats products of the same x [N, in] in one launch (the projections of a layer
// input: GDN qkv, z, b, a; attention q, k, v): y[j] [N, out[j]] = x W[j]ᵀ; rows_end[j] = Σ out[..j].
constexpr int kGemvMaxMats = 4;
struct GemvMany {
  const __nv_bfloat16* w[kGemvMaxMats] = {};
  __nv_bfloat16* y[kGemvMaxMats] = {};
  int64_t out[kGemvMaxMats] = {};
  int64_t rows_end[kGemvMaxMats] = {};
  int n = 0;
};
void matmul_gemv_many_bf16(const __nv_bfloat16* x, const GemvMany& m, int64_t N, int64_t in, const GemvPrologue& pro,
                           cudaStream_t stream);
// The MLP's first half in one launch: y = silu(x Gᵀ) * (x Uᵀ), each product rounded to bf16 before
// the SwiGLU (the storage points of matmul, matmul, swiglu); G, U [out, in].
void matmul_gemv_swiglu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* wg, const __nv_bfloat16* wu,
                             __nv_bfloat16* y, int64_t N, int64_t in, int64_t out, const GemvPrologue& pro,
                             cudaStream_t stream);
// gemm=simple: a plain shared-memory tiled kernel (fp32 FMA, no tensor cores) that does not depend
// on cuBLAS, to clear or convict it. X, W, Y: bf16 (the GPU path) or float (precision=ref: float x
// and y, bf16 or float weights).
template <typename X, typename W, typename Y>
void matmul_simple_cuda(const X* x, const W* w, Y* y, int64_t N, int64_t in, int64_t out, cudaStream_t stream);

}  // namespace degen::cuda
