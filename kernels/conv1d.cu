// GDN depthwise causal conv + SiLU on the device (src/cpu/conv1d.cpp is the reference):
//   out[t, c] = silu( Σ_{i<K} w[c, i] · [window; x][t + i, c] ),  w[c, K-1] on the current row.
// Two kernels per call (one for decode-sized calls, conv1d_fused_kernel), in stream order: the outputs (every row of every sequence reads the old
// window), then the window update (the last K-1 rows of [window; x], rounded to the window's dtype).
// note: the K-tap sum is fp32 (the reference accumulates in double; both round once to the
// activation dtype). The
// window is read in its own dtype (conv_dtype: f32, bf16, ...) and converted exactly to fp32.
// The update runs one thread per (sequence, channel) over the K-1 rows in ascending order: new row r
// reads old row r + rows (> r) of the same channel, which that thread has not yet overwritten, so
// the update is safe in place.
#include "common.cuh"
#include "conv1d.h"
#include "cuda/check.h"
#include "dispatch.cuh"

namespace degen::cuda {

template <typename T, typename Wt, typename W>
static __global__ void conv1d_silu_kernel(const T* x, const Wt* w, T* out, int64_t C, int64_t K,
                                          const Conv1dSeq* seqs) {
  const Conv1dSeq s = seqs[blockIdx.y];
  const W* win = static_cast<const W*>(s.window);
  const int64_t n = s.rows * C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / C, c = e % C;
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t r = t + i;  // row of [window; x]
      const float xv = r < K - 1 ? to_f32(win[r * C + c]) : to_f32(x[(s.row0 + r - (K - 1)) * C + c]);
      acc = fmaf(to_f32(w[c * K + i]), xv, acc);
    }
    out[(s.row0 + t) * C + c] = from_f32<T>(siluf_(acc));
  }
}

template <typename T, typename W>
static __global__ void conv1d_window_kernel(const T* x, int64_t C, int64_t K, const Conv1dSeq* seqs, bool stuck) {
  const Conv1dSeq s = seqs[blockIdx.y];
  if (s.rows == 0 || (stuck && s.rows == 1)) return;  // fault conv-window-stuck: decode leaves it
  W* win = static_cast<W*>(s.window);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    for (int64_t r = 0; r < K - 1; ++r) {  // ascending: row r + rows is read before it is written
      const int64_t src = r + s.rows;      // row of [window; x]
      win[r * C + c] = src < K - 1 ? win[src * C + c]
                                   : from_f32<W>(to_f32(x[(s.row0 + src - (K - 1)) * C + c]));
    }
}

// Decode (at most kConvFusedRows rows per sequence): both in one launch, one thread per (sequence,
// channel): its outputs from the old window first, then its window update, the same sums and the
// same stores as the two kernels above (bit for bit), and no other thread touches the channel.
constexpr int64_t kConvFusedRows = 8;
template <typename T, typename Wt, typename W>
static __global__ void conv1d_fused_kernel(const T* x, const Wt* w, T* out, int64_t C, int64_t K, const Conv1dSeq* seqs,
                                           bool stuck) {
  const Conv1dSeq s = seqs[blockIdx.y];
  W* win = static_cast<W*>(s.window);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    for (int64_t t = 0; t < s.rows; ++t) {
      float acc = 0.0f;
      for (int64_t i = 0; i < K; ++i) {
        const int64_t r = t + i;
        const float xv = r < K - 1 ? to_f32(win[r * C + c]) : to_f32(x[(s.row0 + r - (K - 1)) * C + c]);
        acc = fmaf(to_f32(w[c * K + i]), xv, acc);
      }
      out[(s.row0 + t) * C + c] = from_f32<T>(siluf_(acc));
    }
    if (s.rows == 0 || (stuck && s.rows == 1)) continue;  // fault conv-window-stuck: decode leaves it
    for (int64_t r = 0; r < K - 1; ++r) {
      const int64_t src = r + s.rows;
      win[r * C + c] = src < K - 1 ? win[src * C + c] : from_f32<W>(to_f32(x[(s.row0 + src - (K - 1)) * C + c]));
    }
  }
}

template <typename T, typename Wt>
void conv1d_causal_cuda(const T* x, const Wt* w, T* out, int64_t C, int64_t K, const Conv1dSeq* seqs,
                        int n_seq, int64_t max_rows, DType window_dtype, bool stuck, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0 || C == 0) return;
  DEGEN_ASSERT(n_seq <= 65535, "conv1d: ", n_seq, " sequences in one call");
  dispatch_float(window_dtype, "conv1d window", [&](auto zero) {
    using W = decltype(zero);
    if (max_rows > 0 && max_rows <= kConvFusedRows && K > 1) {
      conv1d_fused_kernel<T, Wt, W><<<dim3(blocks_for(C, 256), n_seq), 256, 0, stream>>>(x, w, out, C, K, seqs, stuck);
      CUDA_CHECK_LAUNCH("conv1d_fused_kernel");
      return;
    }
    if (max_rows > 0) {
      const unsigned bx = std::min<unsigned>(blocks_for(max_rows * C, 256), 2048);
      conv1d_silu_kernel<T, Wt, W><<<dim3(bx, n_seq), 256, 0, stream>>>(x, w, out, C, K, seqs);
      CUDA_CHECK_LAUNCH("conv1d_silu_kernel");
    }
    if (K > 1) {
      conv1d_window_kernel<T, W><<<dim3(blocks_for(C, 256), n_seq), 256, 0, stream>>>(x, C, K, seqs, stuck);
      CUDA_CHECK_LAUNCH("conv1d_window_kernel");
    }
  });
}

#define DEGEN_CONV1D_INSTANTIATE(T, Wt)                                                                      \
  template void conv1d_causal_cuda<T, Wt>(const T*, const Wt*, T*, int64_t, int64_t, const Conv1dSeq*, int, int64_t, \
                                          DType, bool, cudaStream_t);
DEGEN_CONV1D_INSTANTIATE(bf16, bf16)
DEGEN_CONV1D_INSTANTIATE(float, bf16)
DEGEN_CONV1D_INSTANTIATE(float, float)
#undef DEGEN_CONV1D_INSTANTIATE

}  // namespace degen::cuda
