// Device-side random weights for `bench --synthetic` (see synth_weights.h).
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/synth_weights.h"

namespace degen::cuda {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
static __global__ void fill_random_kernel(T* p, int64_t n, uint64_t seed, uint64_t key, float offset, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed ^ mix64(key ^ mix64(static_cast<uint64_t>(i))));
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s += float((h >> (16 * k)) & 0xffffu) * (1.0f / 65536.0f);
    const float z = (s - 2.0f) * 1.7320508f;  // 4 uniforms: mean 2, variance 1/3
    p[i] = from_f32<T>(offset + scale * z);
  }
}

void fill_random_cuda(void* p, DType dtype, int64_t n, uint64_t seed, uint64_t key, float offset, float scale,
                      cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(n, 256), 132u * 64);
  if (dtype == DType::bf16)
    fill_random_kernel<bf16><<<blocks, 256, 0, stream>>>(static_cast<bf16*>(p), n, seed, key, offset, scale);
  else if (dtype == DType::f32)
    fill_random_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<float*>(p), n, seed, key, offset, scale);
  else
    throw std::logic_error(cat("fill_random: dtype ", dtype_name(dtype)));
  CUDA_CHECK_LAUNCH("fill_random_kernel");
}

}  // namespace degen::cuda
