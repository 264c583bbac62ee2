// Launcher of kernels/gdn_gates.cu: the Gated DeltaNet gates (spec model.md §4.7.4), mirroring
// CpuBackend::gdn_gates (src/cpu/gdn.cpp). Device pointers, caller's stream.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// g = -exp(A_log)·softplus(a + dt_bias) in fp32 (-A_log·softplus(.) with `no_exp`: fault
// alog-no-exp), beta = sigmoid(b) rounded to T; a, b [R, n_v] of T (bf16, or float for precision=ref); A_log and dt_bias [n_v] as
// stored (f32 or bf16).
template <typename T>
void gdn_gates_cuda(const T* a, const T* b, const void* A_log, DType a_log_dtype, const void* dt_bias, DType dt_dtype,
                    float* g, T* beta, int64_t R, int64_t nv,
                    bool no_exp, cudaStream_t stream);

}  // namespace degen::cuda
