// Partial rotary embedding, rotate-half (NeoX) pairing (spec §4.5; src/cpu/rope.cpp is the
// reference): for i < R/2, u'_i = u_i c_i - u_{i+R/2} s_i and u'_{i+R/2} = u_{i+R/2} c_i + u_i s_i.
// note: the angle p·ω_i is an fp32 product (HF), cos/sin are taken in double of that angle and
// rounded to bf16 (HF and vLLM keep cos/sin caches in the model dtype), the rotation is fp32 and
// the result is rounded to bf16 once. One thread per (row, head, pair).
#include "cuda/check.h"
#include "common.cuh"
#include "rope.h"

namespace degen::cuda {

static __global__ void rope_partial_bf16_kernel(bf16* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads,
                                         int64_t D, int m, bool interleaved) {
  const int64_t total = N * heads * m;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % m);
    const int64_t nh = k / m, n = nh / heads;
    const float phi = static_cast<float>(pos[n]) * inv_freq[i];
    const float c = round_bf16(static_cast<float>(cos(static_cast<double>(phi))));
    const float s = round_bf16(static_cast<float>(sin(static_cast<double>(phi))));
    bf16* u = x + nh * D;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + m;
    const float a = __bfloat162float(u[i0]), b = __bfloat162float(u[i1]);
    u[i0] = __float2bfloat16_rn(a * c - b * s);
    u[i1] = __float2bfloat16_rn(b * c + a * s);
  }
}

void rope_partial_cuda(bf16* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads, int64_t D,
                       int rotary_dim, bool interleaved, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  const int m = rotary_dim / 2;
  const int64_t total = N * heads * m;
  if (total == 0) return;
  rope_partial_bf16_kernel<<<std::min<unsigned>(blocks_for(total, 256), 65535u * 8), 256, 0, stream>>>(x, pos, inv_freq, N, heads,
                                                                                                  D, m, interleaved);
  CUDA_CHECK_LAUNCH("rope_partial_bf16_kernel");
}

}  // namespace degen::cuda
