// Device helpers shared by the kernels: element loads/stores for the storage dtypes (fp32 math,
// one rounding on store, with the intrinsics kernels/convert.cu checks bit for bit against the CPU
// emulation), warp and block reductions, launch-size helpers. Included by kernels/*.cu only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/launch_gate.h"

namespace degen::cuda {

using bf16 = __nv_bfloat16;

// Storage dtype codes the kernels template on (mirrors util/dtype.h DType for float dtypes).
struct e4m3 { uint8_t bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(e4m3 x) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x.bits), __NV_E4M3);
  return __half2float(__half(h));
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ e4m3 from_f32<e4m3>(float x) {
  return e4m3{static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3))};
}

// x rounded to bf16 and back (the "probabilities in bf16" of flash attention, materialised scores).
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The sum (max) over the warp's 32 lanes by a butterfly of full-mask shuffles; every lane gets it.
// note: the CUDA emulator (tests/emu, not a GPU) computes the same butterfly, in the same order, at
// one meeting point of the warp instead of five (::emu::warp_reduce): bit for bit the same values,
// a fifth of its context switches.
__device__ __forceinline__ float warp_sum(float v) {
#ifdef DEGEN_CUDA_EMU_WARP_REDUCE
  return ::emu::warp_reduce(v, ::emu::WarpReduce::sum, "warp_sum (__shfl_xor_sync butterfly)");
#else
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
#endif
}
__device__ __forceinline__ float warp_max(float v) {
#ifdef DEGEN_CUDA_EMU_WARP_REDUCE
  return ::emu::warp_reduce(v, ::emu::WarpReduce::max, "warp_max (__shfl_xor_sync butterfly)");
#else
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the function synchronises the block.
// note: the CUDA emulator computes both butterflies at one meeting point of the block
// (::emu::block_reduce): bit for bit the same values, one switch per thread instead of four.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
#ifdef DEGEN_CUDA_EMU_WARP_REDUCE
  (void)scratch;
  return ::emu::block_reduce(v, ::emu::WarpReduce::sum, "block_sum (warp butterflies, __syncthreads)");
#else
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nw ? scratch[lane] : 0.0f;
  return warp_sum(t);
#endif
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
#ifdef DEGEN_CUDA_EMU_WARP_REDUCE
  (void)scratch;
  return ::emu::block_reduce(v, ::emu::WarpReduce::max, "block_max (warp butterflies, __syncthreads)");
#else
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nw ? scratch[lane] : -INFINITY;
  return warp_max(t);
#endif
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace degen::cuda
