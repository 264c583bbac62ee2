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
#include "kernels/common.cuh"
#include "kernels/conv1d.h"
#include "kernels/check.h"
#include "kernels/dispatch.cuh"
#include "kernels/gdn_gates.cuh"
#include "kernels/norm_row.cuh"

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
// conv_channel is that thread's work; output row t of the sequence goes to dst[(s.row0 + t) * ld].
template <typename T, typename Wt, typename W>
__device__ __forceinline__ void conv_channel(const T* x, const Wt* w, T* dst, int64_t ld, int64_t C, int64_t K,
                                             const Conv1dSeq& s, int64_t c, bool stuck) {
  W* win = static_cast<W*>(s.window);
  for (int64_t t = 0; t < s.rows; ++t) {
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t r = t + i;
      const float xv = r < K - 1 ? to_f32(win[r * C + c]) : to_f32(x[(s.row0 + r - (K - 1)) * C + c]);
      acc = fmaf(to_f32(w[c * K + i]), xv, acc);
    }
    dst[(s.row0 + t) * ld] = from_f32<T>(siluf_(acc));
  }
  if (s.rows == 0 || (stuck && s.rows == 1)) return;  // fault conv-window-stuck: decode leaves it
  for (int64_t r = 0; r < K - 1; ++r) {
    const int64_t src = r + s.rows;
    win[r * C + c] = src < K - 1 ? win[src * C + c] : from_f32<W>(to_f32(x[(s.row0 + src - (K - 1)) * C + c]));
  }
}

template <typename T, typename Wt, typename W>
static __global__ void conv1d_fused_kernel(const T* x, const Wt* w, T* out, int64_t C, int64_t K, const Conv1dSeq* seqs,
                                           bool stuck) {
  const Conv1dSeq s = seqs[blockIdx.y];
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    conv_channel<T, Wt, W>(x, w, out + c, C, C, K, s, c, stuck);
}

// The GDN layer's decode inputs: one block per (head, sequence), row_threads(dk) threads. A q or k
// head's block convolves the head's dk channels straight into q or k (thread t: channels t, t +
// blockDim, ..., the partition of l2norm_row) and L2-norms each row there in place (each thread reads
// back only what it wrote), as gdn_split_norm_kernel norms the stored conv output; a value head's
// block convolves into v, and its thread 0 computes the head's gates for the sequence's rows.
template <typename T, typename Wt, typename W>
static __global__ void gdn_conv_inputs_kernel(const T* x, const Wt* w, int64_t K, const Conv1dSeq* seqs, bool stuck,
                                              GdnConvInputs<T> io) {
  __shared__ float scratch[32];
  const Conv1dSeq s = seqs[blockIdx.y];
  const int64_t nk = io.nk, dk = io.dk, nv = io.nv, dv = io.dv, C = 2 * nk * dk + nv * dv, h = blockIdx.x;
  const bool qk = h < 2 * nk;  // block-uniform
  const int64_t c0 = qk ? h * dk : 2 * nk * dk + (h - 2 * nk) * dv, n = qk ? dk : dv, ld = qk ? nk * dk : nv * dv;
  T* dst = h < nk ? io.q + h * dk : qk ? io.k + (h - nk) * dk : io.v + (h - 2 * nk) * dv;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) conv_channel<T, Wt, W>(x, w, dst + i, ld, C, K, s, c0 + i, stuck);
  if (io.conv)  // asked for the conv output too (an observed layer): each thread copies what it wrote
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      for (int64_t t = 0; t < s.rows; ++t) io.conv[(s.row0 + t) * C + c0 + i] = dst[(s.row0 + t) * ld + i];
  if (qk) {
    for (int64_t t = 0; t < s.rows; ++t) {
      T* row = dst + (s.row0 + t) * ld;
      l2norm_row(row, row, dk, io.eps, h < nk ? io.q_scale : 1.0f, io.skip_l2norm, scratch);
    }
  } else if (threadIdx.x == 0) {
    const GateParams p{io.A_log, io.a_log_f32, io.dt_bias, io.dt_f32, io.no_exp};
    const int64_t j = h - 2 * nk;
    for (int64_t t = 0; t < s.rows; ++t) gdn_gate(io.a, io.b, p, io.g, io.beta, (s.row0 + t) * nv + j, j);
  }
}

template <typename T, typename Wt>
void gdn_conv_inputs_cuda(const T* x, const Wt* w, int64_t K, const Conv1dSeq* seqs, int n_seq, DType window_dtype,
                          bool stuck, const GdnConvInputs<T>& io, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0 || 2 * io.nk + io.nv == 0) return;
  DEGEN_ASSERT(n_seq <= 65535 && K > 1, "gdn_conv_inputs: ", n_seq, " sequences, K ", K);
  dispatch_float(window_dtype, "conv1d window", [&](auto zero) {
    using W = decltype(zero);
    gdn_conv_inputs_kernel<T, Wt, W><<<dim3(static_cast<unsigned>(2 * io.nk + io.nv), n_seq), row_threads(io.dk), 0,
                                       stream>>>(x, w, K, seqs, stuck, io);
    CUDA_CHECK_LAUNCH("gdn_conv_inputs_kernel");
  });
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
                                          DType, bool, cudaStream_t);                                             \
  template void gdn_conv_inputs_cuda<T, Wt>(const T*, const Wt*, int64_t, const Conv1dSeq*, int, DType, bool,        \
                                            const GdnConvInputs<T>&, cudaStream_t);
DEGEN_CONV1D_INSTANTIATE(bf16, bf16)
DEGEN_CONV1D_INSTANTIATE(float, bf16)
DEGEN_CONV1D_INSTANTIATE(float, float)
#undef DEGEN_CONV1D_INSTANTIATE

}  // namespace degen::cuda
