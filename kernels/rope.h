// Launcher of kernels/rope.cu: partial rotate-half RoPE in place (spec model.md §4.5), mirroring
// src/cpu/rope.cpp (device pointers, caller's stream).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/attention.h"
#include "util/dtype.h"

namespace degen::cuda {

// x [N, heads, D] of T (bf16: cos/sin rounded to bf16 as the GPU engines cache them; float for
// precision=ref: cos/sin in fp32, as the reference), rotated in place on dims [0, rotary_dim); pos device int64 [N]; inv_freq
// device fp32 [rotary_dim / 2] (ω_i computed on the host exactly as the CPU does). `interleaved`:
// fault rope-interleaved, pairs (2i, 2i+1) instead of (i, i + R/2).
template <typename T>
void rope_partial_cuda(T* x, const int64_t* pos, const float* inv_freq, int64_t N, int64_t heads, int64_t D,
                       int rotary_dim, bool interleaved, cudaStream_t stream);

// The attention inputs in one launch (Backend::attn_inputs): qg [N, nq, 2D] (per head [query | gate]),
// kin [N, nkv, D] -> q [N, nq, D] = rope(rmsnorm(query; qw)), gate [N, nq, D] copied, k [N, nkv, D] =
// rope(rmsnorm(kin; kw)); each head row normed as rmsnorm_cuda does (w_shift + w) and rounded
// to T, then rotated as rope_partial_cuda does: bit for bit the ops it replaces.
// With a KvStore (v non-null), each k head row, once rotated, and the v head row are also stored in
// the caches as kv_append_cuda stores them (kv_dtype; rows and caches from the device tables): the
// attention's K/V append in the same launch.
struct KvStore {
  const void* v = nullptr;           // [N, nkv, D] of T
  const AttnSeq* seqs = nullptr;     // device [S]
  const int32_t* row_seq = nullptr;  // device [N]
  const int64_t* dst_row = nullptr;  // device [N]
  DType kv_dtype = DType::bf16;
};
template <typename T, typename W>
void attn_inputs_cuda(const T* qg, const T* kin, const W* qw, const W* kw, T* q, T* gate, T* k, const int64_t* pos,
                      const float* inv_freq, int64_t N, int64_t nq, int64_t nkv, int64_t D, int rotary_dim, float eps,
                      float w_shift, bool interleaved, const KvStore& store, cudaStream_t stream);

}  // namespace degen::cuda
