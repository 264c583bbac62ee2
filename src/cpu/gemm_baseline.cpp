// The matrix-product kernels for the baseline x86-64 (SSE2) ISA (gemm.h, gemm_kernels.inc).
#define DEGEN_ISA 0
#define DEGEN_ISA_NS isa_baseline
#include "cpu/gemm_kernels.inc"
