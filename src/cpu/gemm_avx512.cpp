// The matrix-product kernels for the AVX-512F ISA (gemm.h, gemm_kernels.inc).
#include "cpu/gemm.h"
#if DEGEN_GEMM_X86  // compiled with its target flags on x86-64 only
#define DEGEN_ISA 2
#define DEGEN_ISA_NS isa_avx512
#include "cpu/gemm_kernels.inc"
#endif
