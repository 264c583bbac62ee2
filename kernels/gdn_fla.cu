// gdn=fla on the device: the chunked gated delta rule (spec model.md §4.7.6, C = 64) with
// flash-linear-attention's storage points, its products on tensor cores (wmma 16x16x16, bf16 in,
// fp32 accumulate). The CPU twin is gdn_fla_head in src/cpu/gdn.cpp; what is rounded where is said
// there. Three kernels, the structure of FLA's chunk_gated_delta_rule:
//   prep   (chunk, value head), parallel: G; KKᵀ and QKᵀ on tensor cores; M; A = R(QKᵀ ⊙ Γ);
//          T = (I + M)⁻¹ by forward substitution (fp32, as the chunked kernel); W = R(R(T)·R(R(βK) e^G)),
//          U = R(R(T)·R(β V)) on tensor cores. W, U, A stored bf16, G fp32.
//   state  (value head, 32-column tile of S, sequence), serial over the sequence's chunks: S in fp32
//          in shared memory; per chunk h = R(S) stored for the output pass, V_new = U − W h (tensor
//          cores), R(V_new) stored, S ← e^{G_L} S + Kᵀ R(e^{G_L − G} V_new) (tensor cores, the
//          accumulator loaded from S), S rounded to its storage dtype.
//   output (chunk, value head, 64-column tile), parallel over all chunks: O = e^G (Q h) + A R(V_new).
// Operands are staged in shared memory as bf16 with rows and columns past the chunk or the head
// dimension zero (d_k, d_v need not be multiples of 16). Row strides are padded by 8 bf16 / 4 fp32
// elements against bank conflicts, keeping wmma's alignment (strides a multiple of 16 bytes, tiles
// 256-bit aligned, regions 128-byte aligned). Faults as the chunked kernels: read-before-decay in M
// and W's operand, head-mod in the key head, out-fp16 in the output.
#include <mma.h>

#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/check.h"
#include "kernels/dispatch.cuh"
#include "kernels/gdn.h"
#include "kernels/gdn_chunk.cuh"

namespace degen::cuda {

namespace {

namespace wmma = nvcuda::wmma;
constexpr int kC = kGdnChunk;      // 64 rows per chunk
constexpr int kThreads = 128;      // 4 warps: warp w takes row tile w of a 64-row product
constexpr int kStateCols = 32;     // S columns per state block
constexpr int kOutCols = 64;       // output columns per output block
constexpr int kLdF32 = 68;         // 64-column fp32 tiles
constexpr int kLdS32 = kStateCols + 4;  // 32-column fp32 tiles
constexpr int kLdB64 = 64 + 8;     // 64-column bf16 tiles
constexpr int kLdB32 = kStateCols + 8;  // 32-column bf16 tiles
constexpr int kLdM = kC + 1;       // the fp32 M and T of the forward substitution (no wmma)

__host__ __device__ inline int pad16(int x) { return (x + 15) / 16 * 16; }
__host__ __device__ inline int ld_b(int d) { return pad16(d) + 8; }  // bf16 rows of d elements
__host__ __device__ inline size_t align128(size_t x) { return (x + 127) / 128 * 128; }

__device__ __forceinline__ bf16 rb(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float fb(bf16 x) { return __bfloat162float(x); }

using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// c += A·B over k in [0, K) (K a multiple of 16). A is 16 x K: row_major at a[i * lda + k], or
// col_major at a[i + k * lda]; B is K x 16: row_major at b[k * ldb + j], or col_major at b[k + j * ldb].
template <typename LA, typename LB>
__device__ __forceinline__ void mma_k(FragAcc& c, const bf16* a, int lda, const bf16* b, int ldb, int K) {
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fbm;
    wmma::load_matrix_sync(fa, std::is_same_v<LA, wmma::row_major> ? a + k : a + size_t(k) * lda, lda);
    wmma::load_matrix_sync(fbm, std::is_same_v<LB, wmma::row_major> ? b + size_t(k) * ldb : b + k, ldb);
    wmma::mma_sync(c, fa, fbm, c);
  }
}

// A tile of a bf16 matrix staged in shared memory by the whole block: dst[i * ldd + c] for i < n_rows
// and c < cols_pad holds src[i * stride + c] where i < rows and c < cols, zero elsewhere. 16-byte
// loads and stores where every row start is 16-byte aligned and cols is a multiple of 8 (the
// models' head dims); element by element otherwise.
__device__ void stage_bf16(bf16* dst, int ldd, const bf16* src, int64_t stride, int rows, int n_rows, int cols,
                           int cols_pad) {
  const int tid = threadIdx.x;
  const bool vec = cols % 8 == 0 && stride % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && ldd % 8 == 0 &&
                   cols_pad % 8 == 0;
  if (vec) {
    const int w = cols_pad / 8;
    for (int e = tid; e < n_rows * w; e += blockDim.x) {
      const int i = e / w, c = (e % w) * 8;
      const uint4 x = i < rows && c < cols ? *reinterpret_cast<const uint4*>(src + i * stride + c) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst + i * ldd + c) = x;
    }
  } else {
    const bf16 zero = __float2bfloat16_rn(0.0f);
    for (int e = tid; e < n_rows * cols_pad; e += blockDim.x) {
      const int i = e / cols_pad, c = e % cols_pad;
      dst[i * ldd + c] = i < rows && c < cols ? src[i * stride + c] : zero;
    }
  }
}

// ---- prep ----

struct PrepSmem {
  size_t k, x, p, m, t, vec, total;
};
__host__ __device__ inline PrepSmem prep_smem(int dk, int dv) {
  PrepSmem s;
  const int ldx = ld_b(dk > dv ? dk : dv);
  s.k = 0;                                                   // K rows, bf16 [64][ld_b(dk)]
  s.x = align128(s.k + size_t(kC) * ld_b(dk) * 2);           // Q, then R(cw K), then R(β V)
  s.p = align128(s.x + size_t(kC) * ldx * 2);                // KKᵀ, QKᵀ fp32 [64][68]; then R(T) and the staging
  s.m = align128(s.p + size_t(kC) * kLdF32 * 4);             // M fp32 [64][65]
  s.t = align128(s.m + size_t(kC) * kLdM * 4);               // T fp32 [64][65]
  s.vec = align128(s.t + size_t(kC) * kLdM * 4);             // G, β, g, cw [64] each
  s.total = s.vec + size_t(4) * kC * 4;
  return s;
}

// Stores a 64 x n product R(T)·X, warp w's row tile, into dst rows (bf16), through a 16 x 16 fp32
// staging tile per warp. X: bf16 [64][ldx] in shared memory; only rows < L and columns < n stored.
__device__ void t_times(const bf16* Tb, const bf16* X, int ldx, int n, int L, float* stage, bf16* dst,
                        int64_t dst_row_stride) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int ct = 0; ct < pad16(n); ct += 16) {
    FragAcc c;
    wmma::fill_fragment(c, 0.0f);
    mma_k<wmma::row_major, wmma::row_major>(c, Tb + warp * 16 * kLdB64, kLdB64, X + ct, ldx, kC);
    wmma::store_matrix_sync(stage, c, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int i = warp * 16 + e / 16, col = ct + e % 16;
      if (i < L && col < n) dst[i * dst_row_stride + col] = rb(stage[e]);
    }
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kThreads)
    gdn_fla_prep_kernel(GdnIo io, GdnShape sh, const GdnChunk* chunks, GdnFlaScratch sc) {
  extern __shared__ float4 prep_raw[];
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v, dkp = pad16(dk), dvp = pad16(dv);
  const int ldk = ld_b(dk), ldx = ld_b(dk > dv ? dk : dv);
  const GdnChunk ch = chunks[blockIdx.x];
  const int j = blockIdx.y, L = static_cast<int>(ch.len), tid = threadIdx.x, warp = tid >> 5;
  const int64_t r0 = ch.row0;
  const int kh = key_head(sh, j);
  const PrepSmem lay = prep_smem(dk, dv);
  unsigned char* base = reinterpret_cast<unsigned char*>(prep_raw);
  bf16* Ks = reinterpret_cast<bf16*>(base + lay.k);
  bf16* Xs = reinterpret_cast<bf16*>(base + lay.x);
  float* P = reinterpret_cast<float*>(base + lay.p);
  float* M = reinterpret_cast<float*>(base + lay.m);
  float* T = reinterpret_cast<float*>(base + lay.t);
  float* G = reinterpret_cast<float*>(base + lay.vec);
  float* bt = G + kC;
  float* gr = bt + kC;
  float* cw = gr + kC;  // e^{G_i} (fault read-before-decay: × e^{-g_i})
  const bf16* q = static_cast<const bf16*>(io.q);
  const bf16* k = static_cast<const bf16*>(io.k);
  const bf16* v = static_cast<const bf16*>(io.v);
  const bf16 zero = rb(0.0f);
  stage_bf16(Ks, ldk, k + (r0 * nk + kh) * dk, int64_t(nk) * dk, L, kC, dk, dkp);
  stage_bf16(Xs, ldx, q + (r0 * nk + kh) * dk, int64_t(nk) * dk, L, kC, dk, dkp);
  if (tid < kC) {
    bt[tid] = tid < L ? fb(static_cast<const bf16*>(io.beta)[(r0 + tid) * nv + j]) : 0.0f;
    gr[tid] = tid < L ? io.g[(r0 + tid) * nv + j] : 0.0f;
  }
  __syncthreads();
  chunk_log_decay(gr, G, kC, tid);  // g is zero past L
  // P = K Kᵀ (row tile `warp`, four column tiles)
  for (int ct = 0; ct < kC; ct += 16) {
    FragAcc c;
    wmma::fill_fragment(c, 0.0f);
    mma_k<wmma::row_major, wmma::col_major>(c, Ks + warp * 16 * ldk, ldk, Ks + ct * ldk, ldk, dkp);
    wmma::store_matrix_sync(P + warp * 16 * kLdF32 + ct, c, kLdF32, wmma::mem_row_major);
  }
  __syncthreads();
  if (tid < L) {
    cw[tid] = expf(G[tid]);
    if (sh.read_before_decay) cw[tid] *= expf(-gr[tid]);
    sc.G[(r0 + tid) * nv + j] = G[tid];
  }
  // M_il = β_i e^{G_i − G_l} k_i·k_l (l < i)
  for (int p = tid; p < L * L; p += kThreads) {
    const int i = p / L, l = p % L;
    if (l >= i) continue;
    float m = bt[i] * expf(G[i] - G[l]) * P[i * kLdF32 + l];
    if (sh.read_before_decay) m *= expf(-gr[i]);
    M[i * kLdM + l] = m;
  }
  __syncthreads();
  // P = Q Kᵀ; A_il = R((q_i·k_l) e^{G_i − G_l}) for l <= i, stored with zeros above the diagonal
  for (int ct = 0; ct < kC; ct += 16) {
    FragAcc c;
    wmma::fill_fragment(c, 0.0f);
    mma_k<wmma::row_major, wmma::col_major>(c, Xs + warp * 16 * ldx, ldx, Ks + ct * ldk, ldk, dkp);
    wmma::store_matrix_sync(P + warp * 16 * kLdF32 + ct, c, kLdF32, wmma::mem_row_major);
  }
  __syncthreads();
  for (int p = tid; p < L * kC; p += kThreads) {
    const int i = p / kC, l = p % kC;
    const float a = l <= i ? P[i * kLdF32 + l] * expf(G[i] - G[l]) : 0.0f;
    sc.A[((r0 + i) * nv + j) * kC + l] = rb(a);
  }
  unit_lower_inverse(M, T, L, kLdM, tid, kThreads);  // T = (I + M)⁻¹
  // R(T) (unit lower, zero past L) over P; W's operand over Q
  bf16* Tb = reinterpret_cast<bf16*>(P);
  float* stage = P + (kC * kLdB64 * 2) / 4 + warp * 256;  // after R(T): 16 x 16 fp32 per warp
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, l = e % kC;
    Tb[i * kLdB64 + l] = rb(i >= L || l > i ? 0.0f : l == i ? 1.0f : T[i * kLdM + l]);
  }
  for (int e = tid; e < kC * dkp; e += kThreads) {
    const int i = e / dkp, a = e % dkp;
    Xs[i * ldx + a] = i < L ? rb(fb(rb(bt[i] * fb(Ks[i * ldk + a]))) * cw[i]) : zero;  // R(R(β k) e^G)
  }
  __syncthreads();
  t_times(Tb, Xs, ldx, dk, L, stage, sc.W + ((r0)*nv + j) * dk, int64_t(nv) * dk);
  __syncthreads();
  for (int e = tid; e < kC * dvp; e += kThreads) {
    const int i = e / dvp, c = e % dvp;
    Xs[i * ldx + c] = i < L && c < dv ? rb(bt[i] * fb(v[((r0 + i) * nv + j) * dv + c])) : zero;
  }
  __syncthreads();
  t_times(Tb, Xs, ldx, dv, L, stage, sc.U + ((r0)*nv + j) * dv, int64_t(nv) * dv);
}

// ---- state ----

struct StateSmem {
  size_t sf, sb, x, vn, fv, vec, total;
};
__host__ __device__ inline StateSmem state_smem(int dk) {
  StateSmem s;
  const int dkp = pad16(dk);
  s.sf = 0;                                                  // S tile fp32 [dkp][36]
  s.sb = align128(s.sf + size_t(dkp) * kLdS32 * 4);          // h = R(S) bf16 [dkp][40]
  s.x = align128(s.sb + size_t(dkp) * kLdB32 * 2);           // W rows, then K rows, bf16 [64][ld_b(dk)]
  s.vn = align128(s.x + size_t(kC) * ld_b(dk) * 2);          // V_new fp32 [64][36]
  s.fv = align128(s.vn + size_t(kC) * kLdS32 * 4);           // R(e^{G_L − G} V_new) bf16 [64][40]
  s.vec = align128(s.fv + size_t(kC) * kLdB32 * 2);          // G, e^{G_L − G} [64] each
  s.total = s.vec + size_t(2) * kC * 4;
  return s;
}

template <typename SW>
__global__ void __launch_bounds__(kThreads)
    gdn_fla_state_kernel(GdnIo io, GdnShape sh, const GdnSeq* seqs, GdnFlaScratch sc) {
  extern __shared__ float4 state_raw[];
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v, dkp = pad16(dk), ldk = ld_b(dk);
  const GdnSeq s = seqs[blockIdx.z];
  if (s.rows == 0) return;
  int64_t chunk = 0;  // the sequence's first chunk in the chunk table (sequences in order)
  for (unsigned z = 0; z < blockIdx.z; ++z) chunk += (seqs[z].rows + kC - 1) / kC;
  const int j = blockIdx.x, c0 = blockIdx.y * kStateCols, tid = threadIdx.x, warp = tid >> 5;
  const int kh = key_head(sh, j);
  const StateSmem lay = state_smem(dk);
  unsigned char* base = reinterpret_cast<unsigned char*>(state_raw);
  float* Sf = reinterpret_cast<float*>(base + lay.sf);
  bf16* Sb = reinterpret_cast<bf16*>(base + lay.sb);
  bf16* Xs = reinterpret_cast<bf16*>(base + lay.x);
  float* Vn = reinterpret_cast<float*>(base + lay.vn);
  bf16* Fv = reinterpret_cast<bf16*>(base + lay.fv);
  float* Gs = reinterpret_cast<float*>(base + lay.vec);
  float* Fs = Gs + kC;
  SW* S = static_cast<SW*>(s.S) + int64_t(j) * dk * dv;
  for (int e = tid; e < dkp * kStateCols; e += kThreads) {
    const int a = e / kStateCols, cc = e % kStateCols, c = c0 + cc;
    Sf[a * kLdS32 + cc] = a < dk && c < dv ? to_f32(S[int64_t(a) * dv + c]) : 0.0f;
  }
  const bf16* k = static_cast<const bf16*>(io.k);
  for (int64_t r0 = s.row0; r0 < s.row0 + s.rows; r0 += kC, ++chunk) {
    const int L = static_cast<int>(min(int64_t(kC), s.row0 + s.rows - r0));
    __syncthreads();  // the previous chunk's update of Sf is done, its readers of Xs / Fv too
    if (tid < kC) Gs[tid] = tid < L ? sc.G[(r0 + tid) * nv + j] : 0.0f;
    stage_bf16(Xs, ldk, sc.W + (r0 * nv + j) * dk, int64_t(nv) * dk, L, kC, dk, dkp);
    bf16* H = sc.H + (chunk * nv + j) * int64_t(dk) * dv;
    for (int e = tid; e < dkp * kStateCols; e += kThreads) {
      const int a = e / kStateCols, cc = e % kStateCols, c = c0 + cc;
      const bf16 h = rb(Sf[a * kLdS32 + cc]);
      Sb[a * kLdB32 + cc] = h;
      if (a < dk && c < dv) H[int64_t(a) * dv + c] = h;  // the chunk's state for the output pass
    }
    __syncthreads();
    if (tid < kC) Fs[tid] = tid < L ? expf(Gs[L - 1] - Gs[tid]) : 0.0f;
    // W h: row tile `warp`, two column tiles
    for (int ct = 0; ct < kStateCols; ct += 16) {
      FragAcc c;
      wmma::fill_fragment(c, 0.0f);
      mma_k<wmma::row_major, wmma::row_major>(c, Xs + warp * 16 * ldk, ldk, Sb + ct, kLdB32, dkp);
      wmma::store_matrix_sync(Vn + warp * 16 * kLdS32 + ct, c, kLdS32, wmma::mem_row_major);
    }
    __syncthreads();
    // V_new = U − W h; R(V_new) stored; R(e^{G_L − G_i} V_new_i) for the update
    for (int e = tid; e < kC * kStateCols; e += kThreads) {
      const int i = e / kStateCols, cc = e % kStateCols, c = c0 + cc;
      const bool in = i < L && c < dv;
      const float vn = in ? fb(sc.U[((r0 + i) * nv + j) * dv + c]) - Vn[i * kLdS32 + cc] : 0.0f;
      if (in) sc.V[((r0 + i) * nv + j) * dv + c] = rb(vn);
      Fv[i * kLdB32 + cc] = rb(Fs[i] * vn);
    }
    // K rows over the W rows (every W h product is done: the barrier above)
    stage_bf16(Xs, ldk, k + (r0 * nk + kh) * dk, int64_t(nk) * dk, L, kC, dk, dkp);
    const float eL = expf(Gs[L - 1]);
    for (int e = tid; e < dkp * kStateCols; e += kThreads) Sf[(e / kStateCols) * kLdS32 + e % kStateCols] *= eL;
    __syncthreads();
    // S += Kᵀ Fv: (dkp / 16) x 2 tiles over the warps; Kᵀ is K read col_major
    const int n_tiles = dkp / 16 * (kStateCols / 16);
    for (int t = warp; t < n_tiles; t += kThreads / 32) {
      const int rt = (t >> 1) * 16, ct = (t & 1) * 16;
      FragAcc c;
      wmma::load_matrix_sync(c, Sf + rt * kLdS32 + ct, kLdS32, wmma::mem_row_major);
      mma_k<wmma::col_major, wmma::row_major>(c, Xs + rt, ldk, Fv + ct, kLdB32, kC);
      wmma::store_matrix_sync(Sf + rt * kLdS32 + ct, c, kLdS32, wmma::mem_row_major);
    }
    if constexpr (!std::is_same_v<SW, float>) {
      __syncthreads();
      for (int e = tid; e < dkp * kStateCols; e += kThreads) {  // stored between chunks
        float& x = Sf[(e / kStateCols) * kLdS32 + e % kStateCols];
        x = stored<SW>(x);
      }
    }
  }
  __syncthreads();
  for (int e = tid; e < dk * kStateCols; e += kThreads) {
    const int a = e / kStateCols, cc = e % kStateCols, c = c0 + cc;
    if (c < dv) S[int64_t(a) * dv + c] = from_f32<SW>(Sf[a * kLdS32 + cc]);
  }
}

// ---- output ----

struct OutSmem {
  size_t q, h, a, v, o, vec, total;
};
__host__ __device__ inline OutSmem out_smem(int dk) {
  OutSmem s;
  const int dkp = pad16(dk);
  s.q = 0;                                                  // Q rows bf16 [64][ld_b(dk)]
  s.h = align128(s.q + size_t(kC) * ld_b(dk) * 2);          // h tile bf16 [dkp][72]
  s.a = align128(s.h + size_t(dkp) * kLdB64 * 2);           // A bf16 [64][72]
  s.v = align128(s.a + size_t(kC) * kLdB64 * 2);            // R(V_new) bf16 [64][72]
  s.o = align128(s.v + size_t(kC) * kLdB64 * 2);            // O fp32 [64][68]
  s.vec = align128(s.o + size_t(kC) * kLdF32 * 4);          // e^G [64]
  s.total = s.vec + size_t(kC) * 4;
  return s;
}

__global__ void __launch_bounds__(kThreads)
    gdn_fla_out_kernel(GdnIo io, GdnShape sh, const GdnChunk* chunks, GdnFlaScratch sc) {
  extern __shared__ float4 out_raw[];
  const int dk = sh.d_k, dv = sh.d_v, nk = sh.n_k, nv = sh.n_v, dkp = pad16(dk), ldk = ld_b(dk);
  const GdnChunk ch = chunks[blockIdx.x];
  const int j = blockIdx.y, c0 = blockIdx.z * kOutCols, L = static_cast<int>(ch.len), tid = threadIdx.x;
  const int warp = tid >> 5;
  const int64_t r0 = ch.row0;
  const int kh = key_head(sh, j);
  const OutSmem lay = out_smem(dk);
  unsigned char* base = reinterpret_cast<unsigned char*>(out_raw);
  bf16* Qs = reinterpret_cast<bf16*>(base + lay.q);
  bf16* Hs = reinterpret_cast<bf16*>(base + lay.h);
  bf16* As = reinterpret_cast<bf16*>(base + lay.a);
  bf16* Vs = reinterpret_cast<bf16*>(base + lay.v);
  float* Os = reinterpret_cast<float*>(base + lay.o);
  float* Eg = reinterpret_cast<float*>(base + lay.vec);
  const bf16* q = static_cast<const bf16*>(io.q);
  const bf16* H = sc.H + (int64_t(blockIdx.x) * nv + j) * int64_t(dk) * dv;
  const int cols = min(kOutCols, dv - c0);
  stage_bf16(Qs, ldk, q + (r0 * nk + kh) * dk, int64_t(nk) * dk, L, kC, dk, dkp);
  stage_bf16(Hs, kLdB64, H + c0, dv, dk, dkp, cols, kOutCols);
  stage_bf16(As, kLdB64, sc.A + (r0 * nv + j) * kC, int64_t(nv) * kC, L, kC, kC, kC);  // zeros past the diagonal
  stage_bf16(Vs, kLdB64, sc.V + (r0 * nv + j) * dv + c0, int64_t(nv) * dv, L, kC, cols, kOutCols);
  if (tid < kC) Eg[tid] = tid < L ? expf(sc.G[(r0 + tid) * nv + j]) : 0.0f;
  __syncthreads();
  // Q h: row tile `warp`, four column tiles
  for (int ct = 0; ct < kOutCols; ct += 16) {
    FragAcc c;
    wmma::fill_fragment(c, 0.0f);
    mma_k<wmma::row_major, wmma::row_major>(c, Qs + warp * 16 * ldk, ldk, Hs + ct, kLdB64, dkp);
    wmma::store_matrix_sync(Os + warp * 16 * kLdF32 + ct, c, kLdF32, wmma::mem_row_major);
  }
  __syncwarp();
  // e^{G_i} on the warp's own rows, then + A R(V_new)
  for (int e = (tid & 31); e < 16 * kOutCols; e += 32) {
    const int i = warp * 16 + e / kOutCols;
    Os[i * kLdF32 + e % kOutCols] *= Eg[i];
  }
  __syncwarp();
  for (int ct = 0; ct < kOutCols; ct += 16) {
    FragAcc c;
    wmma::load_matrix_sync(c, Os + warp * 16 * kLdF32 + ct, kLdF32, wmma::mem_row_major);
    mma_k<wmma::row_major, wmma::row_major>(c, As + warp * 16 * kLdB64, kLdB64, Vs + ct, kLdB64, kC);
    wmma::store_matrix_sync(Os + warp * 16 * kLdF32 + ct, c, kLdF32, wmma::mem_row_major);
  }
  __syncwarp();
  bf16* o = static_cast<bf16*>(io.o);
  for (int e = (tid & 31); e < 16 * kOutCols; e += 32) {
    const int i = warp * 16 + e / kOutCols, c = c0 + e % kOutCols;
    if (i >= L || c >= dv) continue;
    o[((r0 + i) * nv + j) * dv + c] = out_value<bf16>(sh, Os[i * kLdF32 + e % kOutCols]);
  }
}

template <typename K>
void set_smem(K kernel, size_t bytes, int limit, const char* name) {
  if (bytes > size_t(limit))
    throw std::runtime_error(cat("gdn=fla: ", name, " needs ", bytes, " bytes of shared memory per block, the device allows ",
                                 limit, " (d_k too large for this device; use gdn=chunked)"));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// The regions in order, each starting 256-byte aligned (16-byte row loads); the offsets of both
// functions below come from this one walk.
template <typename F>
size_t fla_regions(int64_t N, int n_chunks, const GdnShape& sh, F&& at) {
  const size_t rows = size_t(N) * size_t(sh.n_v);
  const size_t sizes[6] = {4 * rows,                    // G
                           2 * rows * size_t(sh.d_k),   // W
                           2 * rows * size_t(sh.d_v),   // U
                           2 * rows * size_t(sh.d_v),   // R(V_new)
                           2 * rows * size_t(kC),       // A
                           2 * size_t(n_chunks) * size_t(sh.n_v) * size_t(sh.d_k) * size_t(sh.d_v)};  // h
  size_t off = 0;
  for (int r = 0; r < 6; ++r) {
    at(r, off);
    off = (off + sizes[r] + 255) / 256 * 256;
  }
  return off;
}

GdnFlaScratch gdn_fla_scratch(void* base, int64_t N, int n_chunks, const GdnShape& sh) {
  GdnFlaScratch s;
  unsigned char* b = static_cast<unsigned char*>(base);
  bf16** regions[6] = {nullptr, &s.W, &s.U, &s.V, &s.A, &s.H};
  fla_regions(N, n_chunks, sh, [&](int r, size_t off) {
    if (r == 0) s.G = reinterpret_cast<float*>(b + off);
    else *regions[r] = reinterpret_cast<bf16*>(b + off);
  });
  return s;
}

}  // namespace

size_t gdn_fla_scratch_bytes(int64_t N, int n_chunks, const GdnShape& sh) {
  return fla_regions(N, n_chunks, sh, [](int, size_t) {});
}

void gdn_fla_cuda(const GdnIo& io, const GdnShape& sh, const GdnSeq* seqs, int n_seq, const GdnChunk* chunks,
                  int n_chunks, DType state_dtype, void* scratch, int64_t N, int smem_optin, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_seq == 0 || n_chunks == 0) return;
  DEGEN_ASSERT(io.act == DType::bf16, "gdn=fla on tensor cores takes bf16 activations, got ", dtype_name(io.act));
  gdn_check_shape(sh, n_seq);
  const GdnFlaScratch sc = gdn_fla_scratch(scratch, N, n_chunks, sh);
  const size_t prep = prep_smem(sh.d_k, sh.d_v).total, state = state_smem(sh.d_k).total, out = out_smem(sh.d_k).total;
  set_smem(gdn_fla_prep_kernel, prep, smem_optin, "the per-chunk pass");
  gdn_fla_prep_kernel<<<dim3(n_chunks, sh.n_v), kThreads, prep, stream>>>(io, sh, chunks, sc);
  CUDA_CHECK_LAUNCH("gdn_fla_prep_kernel");
  const dim3 grid(sh.n_v, (sh.d_v + kStateCols - 1) / kStateCols, n_seq);
  dispatch_float(state_dtype, "gdn state", [&](auto zero) {
    using SW = decltype(zero);
    if constexpr (std::is_same_v<SW, e4m3>) {
      throw std::logic_error("gdn: e4m3 state");
    } else {
      set_smem(gdn_fla_state_kernel<SW>, state, smem_optin, "the state pass");
      gdn_fla_state_kernel<SW><<<grid, kThreads, state, stream>>>(io, sh, seqs, sc);
      CUDA_CHECK_LAUNCH("gdn_fla_state_kernel");
    }
  });
  set_smem(gdn_fla_out_kernel, out, smem_optin, "the output pass");
  gdn_fla_out_kernel<<<dim3(n_chunks, sh.n_v, (sh.d_v + kOutCols - 1) / kOutCols), kThreads, out, stream>>>(io, sh, chunks,
                                                                                                            sc);
  CUDA_CHECK_LAUNCH("gdn_fla_out_kernel");
}

}  // namespace degen::cuda
