// One Gated DeltaNet gate pair (spec §4.7.4; CpuBackend::gdn_gates is the reference), as every gate
// kernel computes it (kernels/gdn_gates.cu, and the fused decode inputs of kernels/conv1d.cu): the
// log decay g = -exp(A_log[j]) * softplus(a + dt_bias[j]) in fp32 (A_log and dt_bias upcast as
// stored; torch's softplus returns x above 20) and beta = sigmoid(b) in the activation dtype.
#pragma once
#include "kernels/common.cuh"

namespace degen::cuda {

__device__ __forceinline__ float load_param(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const bf16*>(p)[i]);
}

// The per-head parameters A_log and dt_bias as stored (fp32 or bf16), and the fault flag.
struct GateParams {
  const void* A_log = nullptr;
  bool a_f32 = false;
  const void* dt_bias = nullptr;
  bool dt_f32 = false;
  bool no_exp = false;  // fault alog-no-exp: A_log taken as A
};

// Element i (row-major [rows, nv], head j = i % nv) of g and beta from a and b.
template <typename T>
__device__ __forceinline__ void gdn_gate(const T* a, const T* b, const GateParams& p, float* g, T* beta, int64_t i,
                                         int64_t j) {
  const float A = load_param(p.A_log, p.a_f32, j);
  const float x = to_f32(a[i]) + load_param(p.dt_bias, p.dt_f32, j);
  const float sp = x > 20.0f ? x : log1pf(expf(x));
  const float rate = p.no_exp ? A : expf(A);
  g[i] = -rate * sp;
  beta[i] = from_f32<T>(sigmoidf_(to_f32(b[i])));
}

}  // namespace degen::cuda
