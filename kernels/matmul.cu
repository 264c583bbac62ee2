// Matrix products of the CUDA backend (src/cpu/matmul.cpp is the reference): cuBLAS bf16 GEMM with
// fp32 accumulation (fp32 GEMM for precision=ref), and a plain tiled kernel (gemm=simple) with the
// same contract.
#include "cuda/check.h"
#include "common.cuh"
#include "matmul.h"

namespace degen::cuda {

void matmul_bf16_cublas(cublasHandle_t handle, const bf16* x, const bf16* w, bf16* y, int64_t N, int64_t in,
                        int64_t out) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || out == 0) return;
  // note: row-major y[N, out] = x[N, in] Wᵀ is column-major yᵀ[out, N] = W_cm[in, out]ᵀ · x_cm[in, N],
  // W_cm being W's row-major bytes read column-major (leading dimension in).
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(N),
                            static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
                            static_cast<int>(in), &beta, y, CUDA_R_16BF, static_cast<int>(out), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void matmul_f32_cublas(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t N, int64_t in,
                       int64_t out, int64_t ldy) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || out == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(N),
                            static_cast<int>(in), &alpha, w, CUDA_R_32F, static_cast<int>(in), x, CUDA_R_32F,
                            static_cast<int>(in), &beta, y, CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

namespace {
constexpr int kTile = 32;  // output tile kTile x kTile, kTile x 8 threads, 4 outputs per thread
constexpr int kRowsPerThread = 4;
}  // namespace

// y[n, o] = Σ_i x[n, i] w[o, i]: tiles of kTile rows of x and kTile rows of W over kTile columns of
// `in`, staged through shared memory (padded by one to avoid bank conflicts).
template <typename X, typename W, typename Y>
static __global__ void __launch_bounds__(kTile * kTile / kRowsPerThread)
    matmul_simple_kernel(const X* x, const W* w, Y* y, int64_t N, int64_t in, int64_t out) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;  // tx over output columns, ty over groups of rows
  const int64_t n0 = int64_t(blockIdx.y) * kTile, o0 = int64_t(blockIdx.x) * kTile;
  float acc[kRowsPerThread] = {};
  for (int64_t i0 = 0; i0 < in; i0 += kTile) {
    for (int r = ty; r < kTile; r += blockDim.y) {
      const int64_t n = n0 + r, o = o0 + r, i = i0 + tx;
      xs[r][tx] = (n < N && i < in) ? to_f32(x[n * in + i]) : 0.0f;
      ws[r][tx] = (o < out && i < in) ? to_f32(w[o * in + i]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int i = 0; i < kTile; ++i) {
      const float wv = ws[tx][i];
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) acc[k] += xs[ty + k * (kTile / kRowsPerThread)][i] * wv;
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < kRowsPerThread; ++k) {
    const int64_t n = n0 + ty + k * (kTile / kRowsPerThread), o = o0 + tx;
    if (n < N && o < out) y[n * out + o] = from_f32<Y>(acc[k]);
  }
}

template <typename X, typename W, typename Y>
void matmul_simple_cuda(const X* x, const W* w, Y* y, int64_t N, int64_t in, int64_t out, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || out == 0) return;
  const dim3 block(kTile, kTile / kRowsPerThread);
  const dim3 grid(static_cast<unsigned>((out + kTile - 1) / kTile), static_cast<unsigned>((N + kTile - 1) / kTile));
  matmul_simple_kernel<X, W, Y><<<grid, block, 0, stream>>>(x, w, y, N, in, out);
  CUDA_CHECK_LAUNCH("matmul_simple_kernel");
}

template void matmul_simple_cuda<bf16, bf16, bf16>(const bf16*, const bf16*, bf16*, int64_t, int64_t, int64_t, cudaStream_t);
template void matmul_simple_cuda<float, bf16, float>(const float*, const bf16*, float*, int64_t, int64_t, int64_t,
                                                     cudaStream_t);
template void matmul_simple_cuda<float, float, float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                                      cudaStream_t);

}  // namespace degen::cuda
