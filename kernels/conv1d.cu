// GDN depthwise causal conv + SiLU on the device (src/cpu/conv1d.cpp is the reference):
//   out[t, c] = silu( Σ_{i<K} w[c, i] · [window; x][t + i, c] ),  w[c, K-1] on the current row.
// Two kernels per call, in stream order: the outputs (every row of every sequence reads the old
// window), then the window update (the last K-1 rows of [window; x], rounded to the window's dtype).
// note: the K-tap sum is fp32 (the reference accumulates in double; both round once to bf16). The
// window is read in its own dtype (conv_dtype: f32, bf16, ...) and converted exactly to fp32.
// The update runs one thread per (sequence, channel) over the K-1 rows in ascending order: new row r
// reads old row r + rows (> r) of the same channel, which that thread has not yet overwritten, so
// the update is safe in place.
#include "common.cuh"
#include "conv1d.h"
#include "cuda/check.h"
#include "dispatch.cuh"

namespace degen::cuda {

template <typename W>
static __global__ void conv1d_silu_kernel(const bf16* x, const bf16* w, bf16* out, int64_t C, int64_t K,
                                          const Conv1dSeq* seqs) {
  const Conv1dSeq s = seqs[blockIdx.y];
  const W* win = static_cast<const W*>(s.window);
  const int64_t n = s.rows * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / C, c = e % C;
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t r = t + i;  // row of [window; x]
      const float xv = r < K - 1 ? to_f32(win[r * C + c]) : __bfloat162float(x[(s.row0 + r - (K - 1)) * C + c]);
      acc = fmaf(__bfloat162float(w[c * K + i]), xv, acc);
    }
    out[(s.row0 + t) * C + c] = __float2bfloat16_rn(siluf_(acc));
  }
}

template <typename W>
static __global__ void conv1d_window_kernel(const bf16* x, int64_t C, int64_t K, const Conv1dSeq* seqs, bool stuck) {
  const Conv1dSeq s = seqs[blockIdx.y];
  if (s.rows == 0 || (stuck && s.rows == 1)) return;  // fault conv-window-stuck: decode leaves it
  W* win = static_cast<W*>(s.window);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    for (int64_t r = 0; r < K - 1; ++r) {  // ascending: row r + rows is read before it is written
      const int64_t src = r + s.rows;      // row of [window; x]
      win[r * C + c] = src < K - 1 ? win[src * C + c]
                                   : from_f32<W>(__bfloat162float(x[(s.row0 + src - (K - 1)) * C + c]));
    }
}

void conv1d_causal_cuda(const bf16* x, const bf16* w, bf16* out, int64_t C, int64_t K, const Conv1dSeq* seqs,
                        int n_seq, int64_t max_rows, DType window_dtype, bool stuck, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0 || C == 0) return;
  DEGEN_ASSERT(n_seq <= 65535, "conv1d: ", n_seq, " sequences in one call");
  dispatch_float(window_dtype, "conv1d window", [&](auto zero) {
    using W = decltype(zero);
    if (max_rows > 0) {
      const unsigned bx = std::min<unsigned>(blocks_for(max_rows * C, 256), 2048);
      conv1d_silu_kernel<W><<<dim3(bx, n_seq), 256, 0, stream>>>(x, w, out, C, K, seqs);
      CUDA_CHECK_LAUNCH("conv1d_silu_kernel");
    }
    if (K > 1) {
      conv1d_window_kernel<W><<<dim3(blocks_for(C, 256), n_seq), 256, 0, stream>>>(x, C, K, seqs, stuck);
      CUDA_CHECK_LAUNCH("conv1d_window_kernel");
    }
  });
}

}  // namespace degen::cuda
