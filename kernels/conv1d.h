// Launcher of kernels/conv1d.cu: the GDN depthwise causal conv + SiLU (spec model.md §4.7.2, §5.1-5.2),
// mirroring CpuBackend::conv1d_causal (src/cpu/conv1d.cpp). Device pointers, caller's stream.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// One sequence of the batch: its rows of x / out and its conv window.
struct Conv1dSeq {
  int64_t row0 = 0;       // first row in x
  int64_t rows = 0;       // rows of this sequence (0: nothing to do)
  void* window = nullptr; // [K-1, C] of the window dtype: the K-1 previous pre-conv rows, oldest first
};

// out[t, c] = silu(Σ_{i<K} w[c, i] · [window; x][t + i, c]) for every sequence (fp32 sum, rounded once to T);
// then each window takes the last K-1 rows of [window; x], rounded to `window_dtype` (unless `stuck`
// and the sequence has exactly one row: fault conv-window-stuck).
// x, out [N, C] of T (bf16, or float for precision=ref); w [C, K] of Wt (bf16, or float where the
// reference keeps a wider stored weight); seqs: a device array of n_seq Conv1dSeq.
template <typename T, typename Wt>
void conv1d_causal_cuda(const T* x, const Wt* w, T* out, int64_t C, int64_t K,
                        const Conv1dSeq* seqs, int n_seq, int64_t max_rows, DType window_dtype, bool stuck,
                        cudaStream_t stream);

// Calls of at most kConvFusedRows rows per sequence (decode, MTP verify) run the outputs and the
// window update in one launch.
constexpr int64_t kConvFusedRows = 8;

// The GDN layer's inputs from its projections for such calls, in one launch: the conv of every
// channel (as conv1d_causal_cuda, window update included), the split with the q/k L2 norms (as
// gdn_split_norm_cuda) and the gates (as gdn_gates_cuda), bit for bit; the conv output itself is not
// stored. x [N, 2 nk dk + nv dv]; q, k [N, nk, dk]; v [N, nv, dv]; a, b, beta [N, nv]; g [N, nv] fp32.
template <typename T>
struct GdnConvInputs {
  const T* a = nullptr;
  const T* b = nullptr;
  const void* A_log = nullptr;    // [nv], fp32 or bf16 as stored
  bool a_log_f32 = false;
  const void* dt_bias = nullptr;  // [nv], fp32 or bf16 as stored
  bool dt_f32 = false;
  bool no_exp = false;            // fault alog-no-exp
  T* q = nullptr;
  T* k = nullptr;
  T* v = nullptr;
  float* g = nullptr;
  T* beta = nullptr;
  int64_t nk = 0, dk = 0, nv = 0, dv = 0;
  float eps = 0.0f, q_scale = 1.0f;
  bool skip_l2norm = false;       // fault gdn-skip-l2norm
  T* conv = nullptr;              // [N, C] or null: the conv output as well (a tap, Backend::TapSink)
};
template <typename T, typename Wt>
void gdn_conv_inputs_cuda(const T* x, const Wt* w, int64_t K, const Conv1dSeq* seqs, int n_seq, DType window_dtype,
                          bool stuck, const GdnConvInputs<T>& io, cudaStream_t stream);

}  // namespace degen::cuda
