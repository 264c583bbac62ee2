// Gated DeltaNet gates (spec §4.7.4; CpuBackend::gdn_gates is the reference): the log decay g in
// fp32 (A_log and dt_bias upcast as stored; torch's softplus returns x above 20) and beta in the activation dtype.
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/gdn_gates.cuh"
#include "kernels/gdn_gates.h"

namespace degen::cuda {

template <typename T>
static __global__ void gdn_gates_kernel(const T* a, const T* b, GateParams p, float* g, T* beta, int64_t R, int64_t nv) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * nv; i += int64_t(gridDim.x) * blockDim.x)
    gdn_gate(a, b, p, g, beta, i, i % nv);
}

template <typename T>
void gdn_gates_cuda(const T* a, const T* b, const void* A_log, DType a_log_dtype, const void* dt_bias,
                    DType dt_dtype, float* g, T* beta, int64_t R, int64_t nv, bool no_exp, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R * nv == 0) return;
  DEGEN_ASSERT((a_log_dtype == DType::f32 || a_log_dtype == DType::bf16) &&
                   (dt_dtype == DType::f32 || dt_dtype == DType::bf16),
               "gdn_gates: A_log / dt_bias dtypes");
  gdn_gates_kernel<T><<<std::min<unsigned>(blocks_for(R * nv, 256), 4096), 256, 0, stream>>>(
      a, b, GateParams{A_log, a_log_dtype == DType::f32, dt_bias, dt_dtype == DType::f32, no_exp}, g, beta, R, nv);
  CUDA_CHECK_LAUNCH("gdn_gates_kernel");
}

template void gdn_gates_cuda<bf16>(const bf16*, const bf16*, const void*, DType, const void*, DType, float*, bf16*,
                                   int64_t, int64_t, bool, cudaStream_t);
template void gdn_gates_cuda<float>(const float*, const float*, const void*, DType, const void*, DType, float*, float*,
                                    int64_t, int64_t, bool, cudaStream_t);

}  // namespace degen::cuda
