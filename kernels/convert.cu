// Storage-dtype rounding on the device, with the CUDA intrinsics the CUDA backend stores with:
// __float2bfloat16_rn, __float2half_rn, __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3).
// The GPU test compares these bit for bit with the CPU emulation in src/util/dtype.h, which is what
// lets `backend=cpu,precision=bf16` stand in for the GPU path (DESIGN.md §8).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/check.h"
#include "kernels/convert.h"

namespace degen::cuda {

static __global__ void round_dtypes_f32_kernel(const float* x, uint16_t* bf16, uint16_t* f16, uint8_t* e4m3, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  __nv_bfloat16 b = __float2bfloat16_rn(v);
  __half h = __float2half_rn(v);
  bf16[i] = *reinterpret_cast<uint16_t*>(&b);
  f16[i] = *reinterpret_cast<uint16_t*>(&h);
  e4m3[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

void round_dtypes_f32_cuda(const float* x, uint16_t* bf16, uint16_t* f16, uint8_t* e4m3, size_t n,
                           cudaStream_t stream) {
  if (n == 0) return;
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  round_dtypes_f32_kernel<<<blocks, 256, 0, stream>>>(x, bf16, f16, e4m3, n);
  CUDA_CHECK_LAUNCH("round_dtypes_f32_kernel");
}

}  // namespace degen::cuda
