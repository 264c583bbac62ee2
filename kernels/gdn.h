// Launchers of kernels/gdn.cu: the gated delta rule of the Gated DeltaNet layer (spec model.md §4.7.5,
// §4.7.6), mirroring CpuBackend::gdn (src/cpu/gdn.cpp). Device pointers, caller's stream.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

using bf16 = __nv_bfloat16;

inline constexpr int kGdnChunk = 64;   // chunk length of the chunked form (spec §4.7.6)
inline constexpr int kGdnMaxDk = 256;  // largest d_k the kernels take (the models have 128)

// One sequence of the batch: its rows and its state S [n_v, d_k, d_v] in the state dtype.
struct GdnSeq {
  int64_t row0 = 0;
  int64_t rows = 0;
  void* S = nullptr;
};

// One chunk of the chunked form: up to kGdnChunk rows of one sequence (chunks never cross sequences).
struct GdnChunk {
  int64_t row0 = 0;
  int64_t len = 0;
};

struct GdnShape {
  int n_k = 0, d_k = 0, n_v = 0, d_v = 0;
  bool head_mod = false;           // fault gdn-head-mod: value head j reads key head j mod n_k (else j / r)
  bool read_before_decay = false;  // fault gdn-read-before-decay
  bool out_fp16 = false;           // fault gdn-out-fp16: o rounded to fp16 before its bf16 store
};

// Inputs of both forms: q, k [N, n_k, d_k] (normalised, q scaled), v [N, n_v, d_v], g [N, n_v] fp32
// (log decay), beta [N, n_v]; output o [N, n_v, d_v]; q, k, v, beta and o in the activation dtype.
struct GdnIo {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *beta = nullptr;  // of `act`
  const float* g = nullptr;
  void* o = nullptr;                                                   // of `act`
  DType act = DType::bf16;                                             // bf16, or f32 (precision=ref)
};

// Recurrent form (§4.7.5), token by token: S ← αS; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq, fp32
// arithmetic, S rounded to `state_dtype` after every token. seqs: device array of n_seq GdnSeq.
void gdn_recurrent_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, DType state_dtype,
                        cudaStream_t stream);

// Scratch of the chunked form for N rows: W [N, n_v, d_k], U [N, n_v, d_v], A [N, n_v, 64] and the
// in-chunk cumulative log decay G [N, n_v], all fp32 (bytes).
size_t gdn_chunked_scratch_bytes(int64_t N, const GdnShape& sh);

// Chunked form (§4.7.6, C = 64), two kernels: a per-chunk pass, parallel over every chunk and value
// head (G, the WY/UT transform T = (I + M)⁻¹ by forward substitution, W = T·B·e^G·K, U = T·B·V,
// A = (QKᵀ) ⊙ Γ), then a pass per sequence, value head and 32-column tile of S that walks the
// chunks in order (V_new = U − WS; O = e^G·QS + A·V_new; S ← e^{G_L}S + (e^{G_L−G}K)ᵀV_new, rounded
// to `state_dtype` after every chunk). A last partial chunk runs at its real length.
// chunks: device array of n_chunks GdnChunk covering every sequence's rows.
void gdn_chunked_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, const GdnChunk* chunks,
                      int n_chunks, DType state_dtype, void* scratch, int64_t N, cudaStream_t stream);

// gdn=fla (kernels/gdn_fla.cu): the chunked form with flash-linear-attention's storage points, its
// products on tensor cores; bf16 activations only (the CPU twin: gdn_fla_head, src/cpu/gdn.cpp).
// Scratch: G [N, n_v] fp32, then bf16 W [N, n_v, d_k], U and R(V_new) [N, n_v, d_v], the decayed
// scores A [N, n_v, 64] and the per-chunk states h [n_chunks, n_v, d_k, d_v].
struct GdnFlaScratch {
  float* G = nullptr;
  bf16 *W = nullptr, *U = nullptr, *V = nullptr, *A = nullptr, *H = nullptr;
};
size_t gdn_fla_scratch_bytes(int64_t N, int n_chunks, const GdnShape& sh);
// Three launches: per chunk (parallel), per sequence over its chunks (the state), per chunk again
// (the output). smem_optin: the device's opt-in shared memory per block (a kernel needing more
// throws, naming gdn=chunked). chunks must list each sequence's chunks in sequence order.
void gdn_fla_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, const GdnChunk* chunks,
                  int n_chunks, DType state_dtype, void* scratch, int64_t N, int smem_optin, cudaStream_t stream);

}  // namespace degen::cuda
