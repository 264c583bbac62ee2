// The gated delta rule on the device (spec model.md §4.7.5-4.7.6; src/cpu/gdn.cpp is the reference):
// the recurrent form (one token per step: decode, and prefill under gdn=recurrent) and the chunked
// form (C = 64, WY/UT transform) for prefill, both continuing from and updating each sequence's
// state S [n_v, d_k, d_v] (key index first), stored in its own dtype (ssm_dtype: fp32, bf16, fp16).
//
// Numerics (what the CPU's precision=bf16 emulation does, with fp32 in place of its double sums):
//   - arithmetic in fp32 throughout; S is held in fp32 inside a kernel and rounded to its storage
//     dtype after every token (recurrent) or every chunk (chunked), where the CPU rounds it; the
//     output of a token/chunk is computed from the state before that rounding;
//   - o is stored in the activation dtype (bf16; fp32 under precision=ref), rounded once from fp32, so it cannot overflow as an
//     fp16 readout would (spec §8 item 2); fault gdn-out-fp16 rounds it to fp16 first (inf beyond
//     ±65504), as the reference does;
//   - value head j reads key head j / r (fault gdn-head-mod: j mod n_k);
//   - fault gdn-read-before-decay: δ from the undecayed state; in the chunked form, row i of M and
//     of W carry a factor e^{-g_i} (the same algebra as the reference).
//
// Recurrent kernel: one block per (value head, 32-column tile of S, sequence), 8 warps. The tile
// comes in and goes out through shared memory with coalesced rows; in between, warp w holds columns
// 4w .. 4w + 3 of the tile and lane l their rows l, l + 32, ... in registers, so Sᵀk and Sᵀq are
// warp shuffles and a token costs no block barrier (it cost six with the 8 row groups of the
// former layout summed in shared memory).
// Chunked: a per-chunk kernel (parallel over all chunks and heads) computes everything that does not
// depend on the incoming state; a per-sequence kernel then walks the chunks with S (a 32-column
// tile, fp32 in shared memory). note: the per-chunk intermediates are fp32 (FLA stores w, u and the
// chunk states in bf16, spec §4.7.6; the reference keeps them in double, so fp32 is the closer match).
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/check.h"
#include "kernels/dispatch.cuh"
#include "kernels/gdn.h"
#include "kernels/gdn_chunk.cuh"

namespace degen::cuda {

namespace {

constexpr int kTile = 32;       // S columns per block (one per lane)
constexpr int kRowGroups = 8;   // warps per block (the chunked kernel: thread (tx, ty) holds rows ty + 8m)
constexpr int kLdM = kGdnChunk + 1;  // padded row stride of the 64 x 64 shared matrices

// Element i of an input of activation type A (GdnIo holds untyped pointers), as fp32.
template <typename A>
__device__ __forceinline__ float ld(const void* p, int64_t i) {
  return to_f32(static_cast<const A*>(p)[i]);
}

// The recurrent kernel's column tile, staged through shared memory: [d_k][kTile + 1] floats (the
// padding keeps a warp's reads of one column, 32 rows apart, on 32 different banks).
constexpr int kStageLd = kTile + 1;
constexpr int kColsPerWarp = kTile / kRowGroups;  // 4: the S columns one warp carries

template <typename SW, int RPL, typename A>
__global__ void __launch_bounds__(kTile * kRowGroups)
    gdn_recurrent_kernel(GdnIo io, GdnShape sh, const GdnSeq* seqs) {
  extern __shared__ float stage[];  // [dk][kStageLd]: the tile on its way in and out
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v;
  const GdnSeq s = seqs[blockIdx.z];
  if (s.rows == 0) return;
  const int j = blockIdx.x, tid = threadIdx.y * kTile + threadIdx.x;
  const int lane = threadIdx.x, warp = threadIdx.y;
  const int c0 = blockIdx.y * kTile;  // the tile's first column
  const int kh = key_head(sh, j);
  SW* S = static_cast<SW*>(s.S) + int64_t(j) * dk * dv;
  // in: coalesced rows of the tile (consecutive threads, consecutive columns)
  for (int i = tid; i < dk * kTile; i += kTile * kRowGroups) {
    const int a = i / kTile, cc = i % kTile, c = c0 + cc;
    stage[a * kStageLd + cc] = c < dv ? to_f32(S[int64_t(a) * dv + c]) : 0.0f;
  }
  __syncthreads();
  // Warp w carries columns c0 + 4w .. + 3; lane l their rows l, l + 32, ... (RPL rows per lane).
  float st[kColsPerWarp][RPL];
#pragma unroll
  for (int x = 0; x < kColsPerWarp; ++x)
#pragma unroll
    for (int m = 0; m < RPL; ++m) {
      const int a = lane + 32 * m;
      st[x][m] = a < dk ? stage[a * kStageLd + warp * kColsPerWarp + x] : 0.0f;
    }
  // The token loop needs no barrier: each lane reads the key and query rows it holds, and the sums
  // over d_k are warp shuffles.
  for (int64_t t = s.row0; t < s.row0 + s.rows; ++t) {
    float kr[RPL], qr[RPL];
#pragma unroll
    for (int m = 0; m < RPL; ++m) {
      const int a = lane + 32 * m;
      kr[m] = a < dk ? ld<A>(io.k, (t * nk + kh) * dk + a) : 0.0f;
      qr[m] = a < dk ? ld<A>(io.q, (t * nk + kh) * dk + a) : 0.0f;
    }
    const float alpha = expf(io.g[t * nv + j]);
    const float b = ld<A>(io.beta, t * nv + j);
#pragma unroll
    for (int x = 0; x < kColsPerWarp; ++x) {
      const int c = c0 + warp * kColsPerWarp + x;
      const float vc = c < dv ? ld<A>(io.v, (t * nv + j) * dv + c) : 0.0f;
      auto dot = [&](const float* r) {
        float p = 0.0f;
#pragma unroll
        for (int m = 0; m < RPL; ++m) p = fmaf(st[x][m], r[m], p);
        return warp_sum(p);
      };
      float sk = 0.0f;
      if (sh.read_before_decay) sk = dot(kr);  // fault: Sᵀk from the undecayed state
#pragma unroll
      for (int m = 0; m < RPL; ++m) st[x][m] *= alpha;  // decay first
      if (!sh.read_before_decay) sk = dot(kr);
      const float delta = b * (vc - sk);
#pragma unroll
      for (int m = 0; m < RPL; ++m) st[x][m] = fmaf(kr[m], delta, st[x][m]);  // write
      const float ov = dot(qr);  // read after the write
      if (lane == 0 && c < dv) static_cast<A*>(io.o)[(t * nv + j) * dv + c] = out_value<A>(sh, ov);
      if constexpr (!std::is_same_v<SW, float>) {
#pragma unroll
        for (int m = 0; m < RPL; ++m) st[x][m] = stored<SW>(st[x][m]);  // stored between steps
      }
    }
  }
  // out: through the stage again, coalesced
#pragma unroll
  for (int x = 0; x < kColsPerWarp; ++x)
#pragma unroll
    for (int m = 0; m < RPL; ++m) {
      const int a = lane + 32 * m;
      if (a < dk) stage[a * kStageLd + warp * kColsPerWarp + x] = st[x][m];
    }
  __syncthreads();
  for (int i = tid; i < dk * kTile; i += kTile * kRowGroups) {
    const int a = i / kTile, cc = i % kTile, c = c0 + cc;
    if (c < dv) S[int64_t(a) * dv + c] = from_f32<SW>(stage[a * kStageLd + cc]);
  }
}

// Per chunk and value head: G, M, T = (I + M)^-1, W = T·diag(β e^G)·K, U = T·diag(β)·V, A = (QKᵀ) ⊙ Γ.
// Scratch rows are the batch rows (chunks partition them): W [N, nv, dk], U [N, nv, dv], A [N, nv, 64],
// G [N, nv].
template <typename A>
__global__ void __launch_bounds__(256)
    gdn_chunk_prep_kernel(GdnIo io, GdnShape sh, const GdnChunk* chunks, float* Wd, float* Ud, float* Ad, float* Gd) {
  extern __shared__ float smem[];
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v, ldk = dk + 1;
  const GdnChunk ch = chunks[blockIdx.x];
  const int j = blockIdx.y, L = static_cast<int>(ch.len), tid = threadIdx.x, nt = blockDim.x;
  const int64_t r0 = ch.row0;
  const int kh = key_head(sh, j);
  float* Ks = smem;                        // [64][dk + 1]
  float* M = Ks + kGdnChunk * ldk;         // [64][65] strictly lower
  float* T = M + kGdnChunk * kLdM;         // [64][65] unit lower
  float* G = T + kGdnChunk * kLdM;         // [64] cumulative log decay
  float* bt = G + kGdnChunk;               // [64] beta
  float* gr = bt + kGdnChunk;              // [64] g
  float* cw = gr + kGdnChunk;              // [64] coefficient of K rows in W
  for (int e = tid; e < L * dk; e += nt) {
    const int i = e / dk, a = e % dk;
    Ks[i * ldk + a] = ld<A>(io.k, ((r0 + i) * nk + kh) * dk + a);
  }
  if (tid < L) {
    bt[tid] = ld<A>(io.beta, (r0 + tid) * nv + j);
    gr[tid] = io.g[(r0 + tid) * nv + j];
  }
  __syncthreads();
  chunk_log_decay(gr, G, L, tid);
  __syncthreads();
  if (tid < L) {
    cw[tid] = bt[tid] * expf(G[tid]);
    if (sh.read_before_decay) cw[tid] *= expf(-gr[tid]);
    Gd[(r0 + tid) * nv + j] = G[tid];
  }
  // M_il = β_i e^{G_i - G_l} k_i·k_l (l < i);  A_il = (q_i·k_l) e^{G_i - G_l} (l <= i)
  for (int p = tid; p < L * L; p += nt) {
    const int i = p / L, l = p % L;
    if (l > i) continue;
    const float* ki = Ks + i * ldk;
    const float* kl = Ks + l * ldk;
    const A* qi = static_cast<const A*>(io.q) + ((r0 + i) * nk + kh) * dk;
    float kk = 0.0f, qk = 0.0f;
    for (int a = 0; a < dk; ++a) {
      kk = fmaf(ki[a], kl[a], kk);
      qk = fmaf(to_f32(qi[a]), kl[a], qk);
    }
    const float dec = expf(G[i] - G[l]);
    Ad[((r0 + i) * nv + j) * kGdnChunk + l] = qk * dec;
    float m = bt[i] * dec * kk;
    if (sh.read_before_decay) m *= expf(-gr[i]);
    if (l < i) M[i * kLdM + l] = m;
  }
  __syncthreads();
  unit_lower_inverse(M, T, L, kLdM, tid, nt);  // T = (I + M)^-1
  // W_ia = Σ_{l<=i} T_il cw_l K_la;  U_ic = Σ_{l<=i} T_il β_l V_lc
  for (int e = tid; e < L * dk; e += nt) {
    const int i = e / dk, a = e % dk;
    float s = 0.0f;
    for (int l = 0; l <= i; ++l) s = fmaf(T[i * kLdM + l] * cw[l], Ks[l * ldk + a], s);
    Wd[((r0 + i) * nv + j) * dk + a] = s;
  }
  for (int e = tid; e < L * dv; e += nt) {
    const int i = e / dv, c = e % dv;
    float s = 0.0f;
    for (int l = 0; l <= i; ++l)
      s = fmaf(T[i * kLdM + l] * bt[l], ld<A>(io.v, ((r0 + l) * nv + j) * dv + c), s);
    Ud[((r0 + i) * nv + j) * dv + c] = s;
  }
}

size_t prep_smem_bytes(int dk) {
  return sizeof(float) * (size_t(kGdnChunk) * (dk + 1) + 2 * size_t(kGdnChunk) * kLdM + 4 * kGdnChunk);
}

// Per sequence, value head and 32-column tile of S: the chunks in order.
template <typename SW, typename A>
__global__ void __launch_bounds__(kTile * kRowGroups)
    gdn_chunk_state_kernel(GdnIo io, GdnShape sh, const GdnSeq* seqs, const float* Wd, const float* Ud,
                           const float* Ad, const float* Gd) {
  extern __shared__ float smem[];
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v;
  const GdnSeq s = seqs[blockIdx.z];
  if (s.rows == 0) return;
  const int j = blockIdx.x, tx = threadIdx.x, ty = threadIdx.y, tid = ty * kTile + tx;
  const int c = blockIdx.y * kTile + tx;
  const bool col = c < dv;
  const int kh = key_head(sh, j);
  float* Ss = smem;                       // [dk][32] the state tile, fp32
  float* Vn = Ss + dk * kTile;            // [64][33] V_new
  float* Gs = Vn + kGdnChunk * (kTile + 1);  // [64] G of the chunk
  float* Fs = Gs + kGdnChunk;             // [64] e^{G_L - G_i}
  SW* S = static_cast<SW*>(s.S) + int64_t(j) * dk * dv;
  for (int e = tid; e < dk * kTile; e += kTile * kRowGroups) {
    const int a = e / kTile, cc = blockIdx.y * kTile + e % kTile;
    Ss[e] = cc < dv ? to_f32(S[int64_t(a) * dv + cc]) : 0.0f;
  }
  for (int64_t c0 = s.row0; c0 < s.row0 + s.rows; c0 += kGdnChunk) {
    const int L = static_cast<int>(min(int64_t(kGdnChunk), s.row0 + s.rows - c0));
    __syncthreads();  // the previous chunk's readers of Gs / Fs / Vn are done, Ss written
    if (tid < L) Gs[tid] = Gd[(c0 + tid) * nv + j];
    __syncthreads();
    if (tid < L) Fs[tid] = expf(Gs[L - 1] - Gs[tid]);
    // V_new_ic = U_ic - Σ_a W_ia S_ac
    for (int i = ty; i < L; i += kRowGroups) {
      const float* Wi = Wd + ((c0 + i) * nv + j) * dk;
      float acc = 0.0f;
      for (int a = 0; a < dk; ++a) acc = fmaf(Wi[a], Ss[a * kTile + tx], acc);
      Vn[i * (kTile + 1) + tx] = col ? Ud[((c0 + i) * nv + j) * dv + c] - acc : 0.0f;
    }
    __syncthreads();
    // O_ic = e^{G_i} Σ_a Q_ia S_ac + Σ_{l<=i} A_il V_new_lc
    for (int i = ty; i < L; i += kRowGroups) {
      const A* qi = static_cast<const A*>(io.q) + ((c0 + i) * nk + kh) * dk;
      float acc = 0.0f;
      for (int a = 0; a < dk; ++a) acc = fmaf(to_f32(qi[a]), Ss[a * kTile + tx], acc);
      acc *= expf(Gs[i]);
      const float* Ai = Ad + ((c0 + i) * nv + j) * kGdnChunk;
      for (int l = 0; l <= i; ++l) acc = fmaf(Ai[l], Vn[l * (kTile + 1) + tx], acc);
      if (col) static_cast<A*>(io.o)[((c0 + i) * nv + j) * dv + c] = out_value<A>(sh, acc);
    }
    __syncthreads();
    // S_ac ← e^{G_L} S_ac + Σ_i e^{G_L - G_i} K_ia V_new_ic, stored in SW between chunks
    const float eL = expf(Gs[L - 1]);
    for (int a = ty; a < dk; a += kRowGroups) {
      float acc = eL * Ss[a * kTile + tx];
      for (int i = 0; i < L; ++i)
        acc = fmaf(Fs[i] * ld<A>(io.k, ((c0 + i) * nk + kh) * dk + a), Vn[i * (kTile + 1) + tx], acc);
      Ss[a * kTile + tx] = stored<SW>(acc);
    }
  }
  __syncthreads();
  for (int e = tid; e < dk * kTile; e += kTile * kRowGroups) {
    const int a = e / kTile, cc = blockIdx.y * kTile + e % kTile;
    if (cc < dv) S[int64_t(a) * dv + cc] = from_f32<SW>(Ss[e]);
  }
}

size_t state_smem_bytes(int dk) { return sizeof(float) * (size_t(dk) * kTile + kGdnChunk * (kTile + 1) + 2 * kGdnChunk); }

// f(A{}) for the activation dtype of q, k, v, beta and o: bf16 or f32 (precision=ref).
template <typename F>
void with_gdn_act(DType t, F&& f) {
  if (t == DType::bf16) f(bf16{});
  else if (t == DType::f32) f(float{});
  else throw std::logic_error(cat("gdn: activations in ", dtype_name(t), ", not bf16 or f32"));
}

DType state_kind(DType t) {
  DEGEN_ASSERT(t == DType::f32 || t == DType::bf16 || t == DType::f16, "gdn: state dtype ", dtype_name(t),
               " (f32, bf16 or f16)");
  return t;
}

}  // namespace

void gdn_recurrent_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, DType state_dtype,
                        cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0) return;
  gdn_check_shape(sh, n_seq);
  const dim3 grid(sh.n_v, (sh.d_v + kTile - 1) / kTile, n_seq), block(kTile, kRowGroups);
  const size_t smem = sizeof(float) * size_t(sh.d_k) * kStageLd;  // at d_k = 256: 33 KiB
  const int rpl = (sh.d_k + 31) / 32;  // rows per lane
  dispatch_float(state_kind(state_dtype), "gdn state", [&](auto zero) {
    using SW = decltype(zero);
    if constexpr (std::is_same_v<SW, e4m3>) {
      throw std::logic_error("gdn: e4m3 state");
    } else {
      with_gdn_act(io.act, [&](auto act) {
        using A = decltype(act);
        if (rpl <= 1) gdn_recurrent_kernel<SW, 1, A><<<grid, block, smem, stream>>>(io, sh, seqs);
        else if (rpl <= 2) gdn_recurrent_kernel<SW, 2, A><<<grid, block, smem, stream>>>(io, sh, seqs);
        else if (rpl <= 4) gdn_recurrent_kernel<SW, 4, A><<<grid, block, smem, stream>>>(io, sh, seqs);
        else gdn_recurrent_kernel<SW, 8, A><<<grid, block, smem, stream>>>(io, sh, seqs);
        CUDA_CHECK_LAUNCH("gdn_recurrent_kernel");
      });
    }
  });
}

size_t gdn_chunked_scratch_bytes(int64_t N, const GdnShape& sh) {
  return sizeof(float) * size_t(N) * size_t(sh.n_v) * (size_t(sh.d_k) + size_t(sh.d_v) + kGdnChunk + 1);
}

void gdn_chunked_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, const GdnChunk* chunks,
                      int n_chunks, DType state_dtype, void* scratch, int64_t N, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0 || n_chunks == 0) return;
  gdn_check_shape(sh, n_seq);
  float* Wd = static_cast<float*>(scratch);
  float* Ud = Wd + N * sh.n_v * sh.d_k;
  float* Ad = Ud + N * sh.n_v * sh.d_v;
  float* Gd = Ad + N * sh.n_v * kGdnChunk;
  const size_t prep = prep_smem_bytes(sh.d_k);
  with_gdn_act(io.act, [&](auto act) {
    using A = decltype(act);
    CUDA_CHECK(cudaFuncSetAttribute(gdn_chunk_prep_kernel<A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(prep)));
    gdn_chunk_prep_kernel<A><<<dim3(n_chunks, sh.n_v), 256, prep, stream>>>(io, sh, chunks, Wd, Ud, Ad, Gd);
    CUDA_CHECK_LAUNCH("gdn_chunk_prep_kernel");
  });
  const dim3 grid(sh.n_v, (sh.d_v + kTile - 1) / kTile, n_seq), block(kTile, kRowGroups);
  const size_t smem = state_smem_bytes(sh.d_k);
  dispatch_float(state_kind(state_dtype), "gdn state", [&](auto zero) {
    using SW = decltype(zero);
    if constexpr (std::is_same_v<SW, e4m3>) {
      throw std::logic_error("gdn: e4m3 state");
    } else {
      with_gdn_act(io.act, [&](auto act) {
        using A = decltype(act);
        gdn_chunk_state_kernel<SW, A><<<grid, block, smem, stream>>>(io, sh, seqs, Wd, Ud, Ad, Gd);
        CUDA_CHECK_LAUNCH("gdn_chunk_state_kernel");
      });
    }
  });
}

}  // namespace degen::cuda
