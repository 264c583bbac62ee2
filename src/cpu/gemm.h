// The CPU reference's matrix-product kernels, y = x Wᵀ with fp32 activations and a weight stored in
// bf16 (widened exactly to fp32) or fp32, compiled once per ISA (util/cpu_isa.h) from gemm_kernels.inc.
//
// Two kernels, chosen by the number of input rows N:
//   - gemm_tile (N > kGemvMaxRows): every output element is one sequential chain of fused
//     multiply-adds over k = 0..K-1 (AVX2/AVX-512: fma; baseline: a multiply then an add), starting
//     from 0. The weight tile is widened to fp32 one cache block of k at a time, the input is packed
//     transposed (pack_xt), and the register tile holds output elements of several tokens along the
//     vector lanes. Because each
//     element's chain is fixed, the result does not depend on the tiling, the cache blocking, the
//     thread count or which rows are multiplied together; AVX2 and AVX-512 give the same bits.
//   - gemv_rows (N <= kGemvMaxRows, decode): reads each weight once, widening bf16 in registers. Each
//     output element is the sum of W per-lane chains (lane l: k = l, l + W, ... in order, W = the
//     ISA's vector width), added by a fixed tree, then the K % W tail in order. Deterministic for a
//     given ISA; it differs from gemm_tile's chain in the last bits.
// The files compiled per ISA hold only code of their own namespace (no shared inline functions, no
// standard-library templates), so that no instruction of a wider ISA can reach the others through
// the linker's choice among duplicate definitions.
#pragma once
#include <cstdint>

#include "util/cpu_isa.h"

namespace degen::cpu {

constexpr int64_t kGemvMaxRows = 4;

struct GemmKernels {
  Isa isa;
  int panel;     // tokens per packed panel of xt (the gemm tile's register width along tokens)
  int row_step;  // weight rows per register tile (tiles of rows are multiples of it)
  // y[n * ldy + r] = Σ_k x[n][k] w[r][k] for n < N, r < rows, where xt is x packed by pack_xt,
  // w the first of `rows` consecutive weight rows (bf16 when w_bf16, else fp32), and scratch holds
  // gemm_scratch_floats(N, rows, panel) floats.
  void (*gemm_tile)(const float* xt, int64_t N, int64_t K, const void* w, bool w_bf16, int64_t rows, float* y,
                    int64_t ldy, float* scratch);
  // The same for N <= kGemvMaxRows from x itself (rows of K, stride ldx).
  void (*gemv_rows)(const float* x, int64_t ldx, int64_t N, int64_t K, const void* w, bool w_bf16, int64_t rows,
                    float* y, int64_t ldy);
  // The sum of n floats read with this ISA's widest loads and four independent accumulators: bench's
  // streaming-read probe, the rate a product that reads its weights once cannot beat.
  float (*stream_sum)(const float* p, int64_t n);
  // n rounds of 12 independent multiply-adds of one vector each (12 n W multiply-adds, W the vector
  // width): bench's peak probe, what this ISA's arithmetic allows one thread. Returns a value that
  // depends on all of them.
  float (*madd_loop)(int64_t n);
  int lanes;  // W: fp32 lanes of this ISA's vectors
};

// The kernels of the active ISA (active_isa()).
const GemmKernels& gemm_kernels();
// The kernels of a given ISA (tests compare them); baseline on a build without the others.
const GemmKernels& gemm_kernels(Isa isa);

// Floats of xt for N rows of K under a panel width: N rounded up to whole panels, times K.
inline int64_t packed_xt_floats(int64_t N, int64_t K, int panel) { return (N + panel - 1) / panel * panel * K; }
// xt[p][k][j] = x[p * panel + j][k] (0 past N): panels of `panel` tokens, each k-major.
void pack_xt(const float* x, int64_t N, int64_t K, int panel, float* xt);
// The most k of one cache block of gemm_tile (every ISA's KC is at most this).
constexpr int64_t kMaxKC = 512;
// Scratch floats of one gemm_tile call: one cache block of the rows' weights widened, and the tile's
// output transposed.
inline int64_t gemm_scratch_floats(int64_t N, int64_t rows, int panel) {
  return rows * kMaxKC + rows * ((N + panel - 1) / panel * panel);
}

namespace isa_baseline {
extern const GemmKernels kernels;
}
#if DEGEN_GEMM_X86
namespace isa_avx2 {
extern const GemmKernels kernels;
}
namespace isa_avx512 {
extern const GemmKernels kernels;
}
#endif

}  // namespace degen::cpu
