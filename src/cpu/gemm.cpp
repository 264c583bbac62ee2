// The choice among the per-ISA product kernels (gemm.h), and the input packing they share.
#include "cpu/gemm.h"

namespace degen::cpu {

const GemmKernels& gemm_kernels(Isa isa) {
#if DEGEN_GEMM_X86
  if (isa == Isa::avx512) return isa_avx512::kernels;
  if (isa == Isa::avx2) return isa_avx2::kernels;
#else
  (void)isa;
#endif
  return isa_baseline::kernels;
}

const GemmKernels& gemm_kernels() {
  static const GemmKernels& k = gemm_kernels(active_isa());
  return k;
}

void pack_xt(const float* x, int64_t N, int64_t K, int panel, float* xt) {
  for (int64_t p0 = 0; p0 < N; p0 += panel) {
    float* dst = xt + p0 * K;
    const int64_t n = N - p0 < panel ? N - p0 : panel;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < n; ++j) dst[k * panel + j] = x[(p0 + j) * K + k];
      for (int64_t j = n; j < panel; ++j) dst[k * panel + j] = 0.0f;
    }
  }
}

}  // namespace degen::cpu
