// The matrix-product kernels for the AVX2+FMA ISA (gemm.h, gemm_kernels.inc).
#include "cpu/gemm.h"
#if DEGEN_GEMM_X86  // compiled with its target flags on x86-64 only
#define DEGEN_ISA 1
#define DEGEN_ISA_NS isa_avx2
#include "cpu/gemm_kernels.inc"
#endif
