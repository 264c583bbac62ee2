// Matrix products of the CUDA backend (src/cpu/matmul.cpp is the reference): cuBLAS bf16 GEMM with
// fp32 accumulation (fp32 GEMM for precision=ref), and a plain tiled kernel (gemm=simple) with the
// same contract.
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/matmul.h"
#include "kernels/gemv_row.cuh"
#include "kernels/norm_row.cuh"

#include <type_traits>

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

// ---- gemm=auto at N <= kGemvMaxRows: the decode products (their row core: gemv_row.cuh) ----

// The products' input: x, or (a prologue) x's N rows computed into the block's shared memory xs,
// each element as the prologue op's own kernel computes it (the norms: the same row functions, so
// the same tree of sums), then a barrier. Every block computes it for itself: x (and z) are
// re-read from L2 by each block, W is still read once.
template <int N>
__device__ __forceinline__ const bf16* gemv_input(const bf16* x, const GemvPrologue& p, int64_t in, bf16* xs,
                                                  float* scratch) {
  switch (p.kind) {
    case GemvPrologue::none: return x;
    case GemvPrologue::rmsnorm:
      for (int n = 0; n < N; ++n) rmsnorm_row(x + int64_t(n) * in, p.w, xs + int64_t(n) * in, in, p.eps, p.w_shift, scratch);
      break;
    case GemvPrologue::gated_rmsnorm:
      for (int64_t r = 0; r < N * in / p.group; ++r)
        gated_rmsnorm_row(x + r * p.group, p.z + r * p.group, p.w, xs + r * p.group, p.group, p.eps, p.w_shift, scratch);
      break;
    case GemvPrologue::sigmoid_gate:
      for (int64_t i = threadIdx.x; i < N * in; i += blockDim.x) xs[i] = from_f32<bf16>(to_f32(x[i]) * sigmoidf_(to_f32(p.z[i])));
      break;
  }
  __syncthreads();
  return xs;
}

template <int N, bool kVec>
static __global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_bf16_kernel(const bf16* x, const bf16* w, bf16* y, int64_t in, int64_t out, GemvPrologue pro, const bf16* res,
                     const bf16* row_gate) {
  extern __shared__ uint4 gemv_xs[];
  __shared__ float scratch[32];
  x = gemv_input<N>(x, pro, in, reinterpret_cast<bf16*>(gemv_xs), scratch);
  const int64_t o = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (o >= out) return;  // the whole warp: its lanes share o
  float acc[N];
  gemv_row_sums<N, kVec>(x, w + o * in, in, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int64_t i = int64_t(n) * out + o;
      // row_gate: the stored (rounded) product times sigmoid(gate), rounded, as sigmoid_mul_kernel;
      // res: the residual add in the epilogue, as add_kernel adds the stored (rounded) product
      float p = round_bf16(acc[n]);
      if (row_gate) p = round_bf16(p * sigmoidf_(to_f32(row_gate[n])));
      y[i] = res ? from_f32<bf16>(to_f32(res[i]) + p) : from_f32<bf16>(p);
    }
  }
}

// Several products of the same x in one launch: the warps walk the rows of W_0, then W_1, ...
template <int N, bool kVec>
static __global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_many_bf16_kernel(const bf16* x, GemvMany m, int64_t in, GemvPrologue pro) {
  extern __shared__ uint4 gemv_xs[];
  __shared__ float scratch[32];
  x = gemv_input<N>(x, pro, in, reinterpret_cast<bf16*>(gemv_xs), scratch);
  const int64_t o = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  int j = 0;
  while (j < m.n && o >= m.rows_end[j]) ++j;
  if (j == m.n) return;  // past the last matrix: the whole warp
  const int64_t r = o - (j ? m.rows_end[j - 1] : 0), out = m.out[j];
  float acc[N];
  gemv_row_sums<N, kVec>(x, m.w[j] + r * in, in, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) m.y[j][int64_t(n) * out + r] = from_f32<bf16>(acc[n]);
  }
}

// The MLP's gate and up rows o in the same warp, and SwiGLU on the way out: each product rounded
// to bf16 first, then silu(gate) * up rounded once (what matmul, matmul, swiglu store).
template <int N, bool kVec>
static __global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_swiglu_bf16_kernel(const bf16* x, const bf16* wg, const bf16* wu, bf16* y, int64_t in, int64_t out,
                            GemvPrologue pro) {
  extern __shared__ uint4 gemv_xs[];
  __shared__ float scratch[32];
  x = gemv_input<N>(x, pro, in, reinterpret_cast<bf16*>(gemv_xs), scratch);
  const int64_t o = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  float g[N], u[N];
  gemv_row_sums<N, kVec>(x, wg + o * in, in, g);
  gemv_row_sums<N, kVec>(x, wu + o * in, in, u);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) y[int64_t(n) * out + o] = from_f32<bf16>(siluf_(round_bf16(g[n])) * round_bf16(u[n]));
  }
}

namespace {

// Calls f(std::integral_constant<int, N>{}) for N = rows (1..kGemvMaxRows).
template <typename F>
void with_rows(int64_t rows, F&& f) {
  switch (rows) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}
}  // namespace

// The shared memory of a launch with a prologue: the N rows it computes.
static size_t gemv_smem(const GemvPrologue& p, int64_t N, int64_t in) {
  if (p.kind == GemvPrologue::none) return 0;
  const size_t bytes = size_t(N * in) * sizeof(bf16);
  DEGEN_ASSERT(bytes <= size_t(kGemvPrologueSmemBytes), "gemv prologue: ", N, " rows of ", in, " need ", bytes,
               " bytes of shared memory, at most ", kGemvPrologueSmemBytes);
  DEGEN_ASSERT(p.kind != GemvPrologue::gated_rmsnorm || (p.group > 0 && in % p.group == 0), "gemv prologue: groups of ",
               p.group, " in rows of ", in);
  return bytes;
}

void matmul_gemv_bf16(const bf16* x, const bf16* w, bf16* y, int64_t N, int64_t in, int64_t out,
                      const GemvPrologue& pro, const bf16* res, cudaStream_t stream, const bf16* row_gate) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || out == 0) return;
  DEGEN_ASSERT(N <= kGemvMaxRows, "matmul_gemv_bf16: ", N, " rows, at most ", kGemvMaxRows);
  const bool vec = in % 8 == 0 && aligned16(x) && aligned16(w);
  const unsigned blocks = blocks_for(out, kGemvWarps);
  const size_t smem = gemv_smem(pro, N, in);
  with_rows(N, [&](auto n) {
    constexpr int R = decltype(n)::value;
    if (vec)
      gemv_bf16_kernel<R, true><<<blocks, kGemvWarps * 32, smem, stream>>>(x, w, y, in, out, pro, res, row_gate);
    else
      gemv_bf16_kernel<R, false><<<blocks, kGemvWarps * 32, smem, stream>>>(x, w, y, in, out, pro, res, row_gate);
  });
  CUDA_CHECK_LAUNCH("gemv_bf16_kernel");
}

void matmul_gemv_many_bf16(const bf16* x, const GemvMany& m, int64_t N, int64_t in, const GemvPrologue& pro,
                           cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  DEGEN_ASSERT(N <= kGemvMaxRows && m.n >= 1 && m.n <= kGemvMaxMats, "matmul_gemv_many_bf16: ", N, " rows, ", m.n,
               " matrices");
  const int64_t rows = m.rows_end[m.n - 1];
  if (N == 0 || rows == 0) return;
  bool vec = in % 8 == 0 && aligned16(x);
  for (int j = 0; j < m.n; ++j) vec = vec && aligned16(m.w[j]);
  const unsigned blocks = blocks_for(rows, kGemvWarps);
  const size_t smem = gemv_smem(pro, N, in);
  with_rows(N, [&](auto n) {
    constexpr int R = decltype(n)::value;
    if (vec)
      gemv_many_bf16_kernel<R, true><<<blocks, kGemvWarps * 32, smem, stream>>>(x, m, in, pro);
    else
      gemv_many_bf16_kernel<R, false><<<blocks, kGemvWarps * 32, smem, stream>>>(x, m, in, pro);
  });
  CUDA_CHECK_LAUNCH("gemv_many_bf16_kernel");
}

void matmul_gemv_swiglu_bf16(const bf16* x, const bf16* wg, const bf16* wu, bf16* y, int64_t N, int64_t in,
                             int64_t out, const GemvPrologue& pro, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N == 0 || out == 0) return;
  DEGEN_ASSERT(N <= kGemvMaxRows, "matmul_gemv_swiglu_bf16: ", N, " rows, at most ", kGemvMaxRows);
  const bool vec = in % 8 == 0 && aligned16(x) && aligned16(wg) && aligned16(wu);
  const unsigned blocks = blocks_for(out, kGemvWarps);
  const size_t smem = gemv_smem(pro, N, in);
  with_rows(N, [&](auto n) {
    constexpr int R = decltype(n)::value;
    if (vec)
      gemv_swiglu_bf16_kernel<R, true><<<blocks, kGemvWarps * 32, smem, stream>>>(x, wg, wu, y, in, out, pro);
    else
      gemv_swiglu_bf16_kernel<R, false><<<blocks, kGemvWarps * 32, smem, stream>>>(x, wg, wu, y, in, out, pro);
  });
  CUDA_CHECK_LAUNCH("gemv_swiglu_bf16_kernel");
}

template void matmul_simple_cuda<bf16, bf16, bf16>(const bf16*, const bf16*, bf16*, int64_t, int64_t, int64_t, cudaStream_t);
template void matmul_simple_cuda<float, bf16, float>(const float*, const bf16*, float*, int64_t, int64_t, int64_t,
                                                     cudaStream_t);
template void matmul_simple_cuda<float, float, float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                                      cudaStream_t);

}  // namespace degen::cuda
