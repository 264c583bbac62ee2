// The matrix-vector core shared by the products of kernels/matmul.cu and the MoE experts of
// kernels/moe.cu: one warp reduces one row of W against N rows of x, so that a row's sum is the
// same bits whichever kernel, and however many other rows, compute it.
#pragma once
#include <cstdint>

#include "kernels/common.cuh"

namespace degen::cuda {

// ---- gemm=auto at N <= kGemvMaxRows: the decode product, bound by reading W once ----
// One warp per output row o, kGemvWarps rows per block. A lane reads W's row 16 bytes (8 bf16) at a
// time, chunk c = lane, lane + 32, ..., two chunks per iteration so that two loads are in flight,
// and multiplies each chunk into the N rows of x (x is N x in x 2 bytes: it stays in L1/L2, W is
// the traffic); fp32 sums, reduced across the warp by shuffles, rounded once to bf16. kVec false:
// `in` not a multiple of 8 or a pointer not 16-byte aligned: the same sums one element at a time.
// note: the order of the sums differs from cuBLAS's and from the CPU's k order (fp32 reordering;
// the op test bounds it by the bf16 tolerance, as for cuBLAS on a GPU).
// 8 warps: 256 threads, row_threads' cap (norm_row.cuh), so that a block's prologue norm sums a row
// as rmsnorm_kernel does at any row length (threads past the row add zeros to the same tree).
constexpr int kGemvWarps = 8;
static_assert(kGemvWarps * 32 == 256, "the prologue norm must reduce as rmsnorm_kernel (row_threads)");

// The 8 bf16 of a 16-byte load as fp32, in memory order: a bf16 is the high half of its fp32, so
// each 32-bit word holds element 2i in its low 16 bits and 2i + 1 in its high 16 bits.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float* f) {
  const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

template <int N>
__device__ __forceinline__ void gemv_chunk(const uint4& wv, const bf16* x, int64_t in, int64_t c, float* acc) {
  float wf[8], xf[8];
  unpack_bf16x8(wv, wf);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    unpack_bf16x8(reinterpret_cast<const uint4*>(x + int64_t(n) * in)[c], xf);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[n] += wf[j] * xf[j];
  }
}

// Row wr of W times the N rows of x, summed across the warp: every lane returns the N sums.
template <int N, bool kVec>
__device__ __forceinline__ void gemv_row_sums(const bf16* x, const bf16* wr, int64_t in, float* acc) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0.0f;
  if constexpr (kVec) {
    const uint4* w4 = reinterpret_cast<const uint4*>(wr);
    const int64_t chunks = in / 8;
    int64_t c = lane;
    for (; c + 32 < chunks; c += 64) {
      const uint4 a = w4[c], b = w4[c + 32];
      gemv_chunk<N>(a, x, in, c, acc);
      gemv_chunk<N>(b, x, in, c + 32, acc);
    }
    if (c < chunks) gemv_chunk<N>(w4[c], x, in, c, acc);
  } else {
    for (int64_t i = lane; i < in; i += 32) {
      const float wf = to_f32(wr[i]);
#pragma unroll
      for (int n = 0; n < N; ++n) acc[n] += wf * to_f32(x[int64_t(n) * in + i]);
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = warp_sum(acc[n]);
}

}  // namespace degen::cuda
