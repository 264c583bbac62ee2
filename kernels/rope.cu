// Partial rotary embedding, rotate-half (NeoX) pairing (spec §4.5; src/cpu/rope.cpp is the
// reference): for i < R/2, u'_i = u_i c_i - u_{i+R/2} s_i and u'_{i+R/2} = u_{i+R/2} c_i + u_i s_i.
// note: the angle p·ω_i is an fp32 product (HF), cos/sin are taken in double of that angle and
// rounded to bf16 (HF and vLLM keep cos/sin caches in the model dtype; not for the fp32 activations
// of precision=ref), the rotation is fp32 and the result is rounded to the activation dtype once. One thread per (row, head, pair).
#include "cuda/check.h"
#include "common.cuh"
#include "rope.h"

#include <type_traits>

namespace degen::cuda {

template <typename T>
static __global__ void rope_partial_kernel(T* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads,
                                         int64_t D, int m, bool interleaved) {
  const int64_t total = N * heads * m;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % m);
    const int64_t nh = k / m, n = nh / heads;
    const float phi = static_cast<float>(pos[n]) * inv_freq[i];
    float c = static_cast<float>(cos(static_cast<double>(phi)));
    float s = static_cast<float>(sin(static_cast<double>(phi)));
    if (std::is_same<T, bf16>::value) {  // the model-dtype cos/sin caches of the GPU engines
      c = round_bf16(c);
      s = round_bf16(s);
    }
    T* u = x + nh * D;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + m;
    const float a = to_f32(u[i0]), b = to_f32(u[i1]);
    u[i0] = from_f32<T>(a * c - b * s);
    u[i1] = from_f32<T>(b * c + a * s);
  }
}

template <typename T>
void rope_partial_cuda(T* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads, int64_t D,
                       int rotary_dim, bool interleaved, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  const int m = rotary_dim / 2;
  const int64_t total = N * heads * m;
  if (total == 0) return;
  rope_partial_kernel<T><<<std::min<unsigned>(blocks_for(total, 256), 65535u * 8), 256, 0, stream>>>(x, pos, inv_freq, N, heads,
                                                                                                  D, m, interleaved);
  CUDA_CHECK_LAUNCH("rope_partial_kernel");
}

template void rope_partial_cuda<bf16>(bf16*, const int64_t*, const float*, int64_t, int64_t, int64_t, int, bool,
                                      cudaStream_t);
template void rope_partial_cuda<float>(float*, const int64_t*, const float*, int64_t, int64_t, int64_t, int, bool,
                                       cudaStream_t);

}  // namespace degen::cuda
