// attn=flash (DESIGN.md §5): FlashAttention-2 style online softmax over tiles of kFlashTile keys, the
// running max and sum in fp32, each tile's probabilities summed unrounded and rounded to bf16
// before P·V (the 16-bit operand of the tensor-core product), one division by the sum at the end.
// src/cpu/attention.cpp (run == flash) is the reference.
// One block per (query row, head), scalar: decode rows, fp32 activations (precision=ref), an fp32
// cache, or a head_dim the tensor-core kernel below does not take. Multi-row sequences otherwise
// run attention_flash_tc_cuda (src/cuda/attention.cpp chooses).
#include "kernels/check.h"
#include "kernels/attention.cuh"

#include <mma.h>
#include <type_traits>

namespace degen::cuda {

template <typename KV, typename A>
static __global__ void __launch_bounds__(kAttnThreads) attention_flash_kernel(AttnArgs a) {
  __shared__ float q[kAttnMaxHeadDim];
  __shared__ float s_tile[kFlashTile];
  const AttnRow<KV> r = attn_row<KV>(a, blockIdx.x);
  load_query<A>(a, r.row, r.h, q);
  float m, l, acc[kAttnPerThread];
  flash_range<KV>(a, r, q, 0, r.ctx, s_tile, m, l, acc);
  A* o = static_cast<A*>(a.out) + (r.row * a.n_q + r.h) * a.D;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int e = threadIdx.x + i * kAttnThreads;
    if (e < a.D) o[e] = from_f32<A>(acc[i] / l);
  }
}

void attention_flash_cuda(const AttnArgs& a, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const unsigned blocks = static_cast<unsigned>(a.M * a.n_q);
  dispatch_kv_act(a.kv_dtype, a.act_dtype, [&](auto kv, auto act) {
    using KV = decltype(kv);
    using A = decltype(act);
    attention_flash_kernel<KV, A><<<blocks, kAttnThreads, 0, stream>>>(a);
  });
  CUDA_CHECK_LAUNCH("attention_flash_kernel");
}

// ---- flash on tensor cores: FlashAttention-2's structure with wmma 16x16x16 bf16 tiles ----
// A block of 4, 2 or 1 warps (as the device's shared memory allows: attention_flash_tc_rows) takes
// up to 64, 32 or 16 consecutive query rows of one sequence and one query head (AttnTile,
// blockIdx.y the head), warp w rows 16w .. 16w+15. Per tile of kFlashTile keys: the block
// stages the K and V rows (bf16; an fp8 cache widens exactly; rows past the last context zero) in
// shared memory; each warp computes its S = Q K^T (fp32), applies the scale and the causal mask, runs
// the online softmax of src/cpu/attention.cpp flash_range on its rows (running max m, sum l of the
// fp32 probabilities, P rounded to bf16), scales its output rows by exp(m_old - m) and adds P V.
// The output accumulates in shared memory (fp32; wmma's fragments have no row mapping to rescale),
// divided by l at the end. Rows past the tile's end compute zeros and are not stored.
namespace {
namespace wmma = nvcuda::wmma;
constexpr int kTcMaxThreads = kFlashTcMaxRows / 16 * 32;  // a warp per 16 rows
// Row strides in shared memory, padded so that the 16 rows of a warp tile do not all start in the
// same bank; each keeps wmma's requirements (a multiple of 16 bytes; a tile's first element 256-bit
// aligned: 16 rows of any of these strides are a multiple of 32 bytes, and so are the regions).
constexpr int kLdS = kFlashTile + 4;  // scores, fp32
constexpr int kLdP = kFlashTile + 8;  // probabilities, bf16
__host__ __device__ inline int ld_in(int D) { return D + 8; }   // Q, K, V tiles, bf16
__host__ __device__ inline int ld_out(int D) { return D + 4; }  // the output, fp32

struct TcSmem {  // byte offsets of the regions
  size_t q, k, v, s, p, o, stats, total;
};
__host__ __device__ inline TcSmem tc_smem(int D, int rows) {
  TcSmem m;
  m.q = 0;
  m.k = m.q + size_t(rows) * ld_in(D) * 2;
  m.v = m.k + size_t(kFlashTile) * ld_in(D) * 2;
  m.s = m.v + size_t(kFlashTile) * ld_in(D) * 2;
  m.p = m.s + size_t(rows) * kLdS * 4;
  m.o = m.p + size_t(rows) * kLdP * 2;
  m.stats = m.o + size_t(rows) * ld_out(D) * 4;
  m.total = m.stats + size_t(3) * rows * 4;  // m, l, the tile's correction
  return m;
}

// 8 consecutive elements as bf16 in one 16-byte word: one 16-byte load (bf16), or one 8-byte load
// widened exactly (fp8 e4m3). p is 16-byte (bf16) or 8-byte (fp8) aligned: D % 16 == 0.
__device__ __forceinline__ uint4 load8_bf16(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 load8_bf16(const e4m3* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&w);  // note: bytes, not e4m3: no aliasing of w
  union {
    bf16 h[8];
    uint4 v;
  } t;
#pragma unroll
  for (int i = 0; i < 8; ++i) t.h[i] = __float2bfloat16_rn(to_f32(e4m3{bytes[i]}));
  return t.v;
}

// The block's shared-memory tiles (tc_smem's regions) and their row strides.
struct TcTiles {
  bf16* Qs;   // the block's query rows, [rows x ldi]
  bf16* Ks;   // the key tile, [kFlashTile x ldi]
  bf16* Vs;   // the value tile, [kFlashTile x ldi]
  float* Ss;  // the scores, [rows x kLdS]
  bf16* Ps;   // the probabilities, [rows x kLdP]
  float* Os;  // the output, [rows x ldo]
  float* Ms;  // per row: the running max,
  float* Ls;  // the running sum,
  float* Cs;  // the tile's correction exp(m_old - m)
  int ldi, ldo;
};

__device__ __forceinline__ TcTiles tc_tiles(unsigned char* base, int D, int rows) {
  const TcSmem L = tc_smem(D, rows);
  TcTiles t;
  t.Qs = reinterpret_cast<bf16*>(base + L.q);
  t.Ks = reinterpret_cast<bf16*>(base + L.k);
  t.Vs = reinterpret_cast<bf16*>(base + L.v);
  t.Ss = reinterpret_cast<float*>(base + L.s);
  t.Ps = reinterpret_cast<bf16*>(base + L.p);
  t.Os = reinterpret_cast<float*>(base + L.o);
  t.Ms = reinterpret_cast<float*>(base + L.stats);
  t.Ls = t.Ms + rows;
  t.Cs = t.Ls + rows;
  t.ldi = ld_in(D);
  t.ldo = ld_out(D);
  return t;
}

// The block's start: its query rows in Q (rows past the tile's end zero), the output zero, and per
// row m = -inf, l = 0. Row r is batch row row0 + r of head h.
__device__ __forceinline__ void tc_start(const TcTiles& t, const AttnArgs& a, int64_t row0, int h, int tile_rows, int rows,
                                         int tid, int nt_threads) {
  const int D = a.D, D8 = D / 8;
  const bf16* q = static_cast<const bf16*>(a.q);
  const uint4 zero8 = make_uint4(0u, 0u, 0u, 0u);  // 8 bf16 zeros
  for (int i = tid; i < rows * D8; i += nt_threads) {
    const int r = i / D8, c = i % D8;
    *reinterpret_cast<uint4*>(t.Qs + r * t.ldi + c * 8) =
        r < tile_rows ? load8_bf16(q + ((row0 + r) * a.n_q + h) * D + c * 8) : zero8;
  }
  for (int i = tid; i < rows * D; i += nt_threads) t.Os[(i / D) * t.ldo + i % D] = 0.0f;
  for (int r = tid; r < rows; r += nt_threads) {
    t.Ms[r] = -INFINITY;
    t.Ls[r] = 0.0f;
  }
}

// Stages keys and values [t0, t0 + n) of the head (rows `stride` elements apart) in the K and V
// tiles as bf16; the tile's rows past n zero (the cache there may hold anything).
template <typename KV>
__device__ __forceinline__ void tc_stage_kv(const TcTiles& t, const KV* K, const KV* V, int64_t stride, int64_t t0, int n,
                                            int D, int tid, int nt_threads) {
  const int D8 = D / 8;
  const uint4 zero8 = make_uint4(0u, 0u, 0u, 0u);  // 8 bf16 zeros
  for (int i = tid; i < kFlashTile * D8; i += nt_threads) {
    const int u = i / D8, c = i % D8;
    const bool in = u < n;
    *reinterpret_cast<uint4*>(t.Ks + u * t.ldi + c * 8) = in ? load8_bf16(K + (t0 + u) * stride + c * 8) : zero8;
    *reinterpret_cast<uint4*>(t.Vs + u * t.ldi + c * 8) = in ? load8_bf16(V + (t0 + u) * stride + c * 8) : zero8;
  }
}

// The warp's scores S (16 x kFlashTile) = Q_w K^T, its rows from wr: K^T read column-major from the
// row-major K tile.
__device__ __forceinline__ void tc_scores(const TcTiles& t, int wr, int D) {
  for (int nt = 0; nt < kFlashTile / 16; ++nt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
    wmma::fill_fragment(s, 0.0f);
    for (int k = 0; k < D; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fq;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fk;
      wmma::load_matrix_sync(fq, t.Qs + wr * t.ldi + k, t.ldi);
      wmma::load_matrix_sync(fk, t.Ks + nt * 16 * t.ldi + k, t.ldi);
      wmma::mma_sync(s, fq, fk, s);
    }
    wmma::store_matrix_sync(t.Ss + wr * kLdS + nt * 16, s, kLdS, wmma::mem_row_major);
  }
}

// The online softmax of the warp's rows over this tile, two lanes per row, each half the keys:
// the scores scaled, the new running max, P = exp(s - m) in bf16, the running sum, and the
// warp's output rows scaled by the correction. `valid`: row r's keys in this tile.
__device__ __forceinline__ void tc_softmax(const TcTiles& t, float scale, int r, int valid, int wr, int lane, int D) {
  const int half = lane & 1;
  float* srow = t.Ss + r * kLdS;
  float mt = t.Ms[r];
  for (int u = half * (kFlashTile / 2); u < (half + 1) * (kFlashTile / 2); ++u)
    if (u < valid) mt = fmaxf(mt, srow[u] = srow[u] * scale);  // s = dot * scale, rounded, as the twin
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
  __syncwarp();  // both halves scaled, and read Ms[r], before it is rewritten
  if (half == 0) {
    // the row sum in key order, as the CPU twin; a row with no key here keeps m, l and its output
    const float m_old = t.Ms[r];
    const float corr = valid > 0 ? expf(m_old - mt) : 1.0f;  // 0 on the first tile (m = -inf)
    float l = t.Ls[r] * corr;
    for (int u = 0; u < kFlashTile; ++u) {
      const float p = u < valid ? expf(srow[u] - mt) : 0.0f;
      l += p;
      t.Ps[r * kLdP + u] = __float2bfloat16_rn(p);  // P·V takes them in bf16
    }
    t.Ms[r] = valid > 0 ? mt : m_old;
    t.Ls[r] = l;
    t.Cs[r] = corr;
  }
  __syncwarp();
  for (int i = lane; i < 16 * D; i += 32) t.Os[(wr + i / D) * t.ldo + i % D] *= t.Cs[wr + i / D];
  __syncwarp();
}

// O_w (16 x D) += P_w (16 x kFlashTile) V (kFlashTile x D), the warp's rows from wr.
__device__ __forceinline__ void tc_add_pv(const TcTiles& t, int wr, int D) {
  for (int dt = 0; dt < D; dt += 16) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
    wmma::load_matrix_sync(o, t.Os + wr * t.ldo + dt, t.ldo, wmma::mem_row_major);
    for (int k = 0; k < kFlashTile; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fp;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fv;
      wmma::load_matrix_sync(fp, t.Ps + wr * kLdP + k, kLdP);
      wmma::load_matrix_sync(fv, t.Vs + k * t.ldi + dt, t.ldi);
      wmma::mma_sync(o, fp, fv, o);
    }
    wmma::store_matrix_sync(t.Os + wr * t.ldo + dt, o, t.ldo, wmma::mem_row_major);
  }
}

// The warp's rows of O / l in bf16, 8 elements (one 16-byte store) per step; rows past the tile's
// end are not stored. Row r is batch row row0 + r of head h.
__device__ __forceinline__ void tc_store(const TcTiles& t, const AttnArgs& a, int64_t row0, int h, int tile_rows, int wr,
                                         int lane) {
  const int D = a.D, D8 = D / 8;
  bf16* out = static_cast<bf16*>(a.out);
  for (int i = lane; i < 16 * D8; i += 32) {
    const int r = wr + i / D8, c = i % D8;
    if (r >= tile_rows) continue;
    union {
      bf16 h[8];
      uint4 v;
    } o;
#pragma unroll
    for (int e = 0; e < 8; ++e) o.h[e] = __float2bfloat16_rn(t.Os[r * t.ldo + c * 8 + e] / t.Ls[r]);
    *reinterpret_cast<uint4*>(out + ((row0 + r) * a.n_q + h) * D + c * 8) = o.v;
  }
}
}  // namespace

template <typename KV>
static __global__ void __launch_bounds__(kTcMaxThreads) attention_flash_tc_kernel(AttnArgs a, const AttnTile* tiles) {
  extern __shared__ float4 tc_smem_raw[];
  const AttnTile tile = tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y), D = a.D, j = h / (a.n_q / a.n_kv);
  const AttnSeq seq = a.seqs[tile.seq];
  const int64_t row0 = seq.row0 + tile.t0;              // batch row of the block's row 0
  const int64_t ctx0 = seq.pos0 + tile.t0 + 1;          // its context; row r has ctx0 + r keys
  const int64_t ctx_end = ctx0 + tile.rows - 1;         // the last row's context
  const int nt_threads = static_cast<int>(blockDim.x), rows = nt_threads / 32 * 16;  // a warp per 16 rows
  const TcTiles t = tc_tiles(reinterpret_cast<unsigned char*>(tc_smem_raw), D, rows);
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  tc_start(t, a, row0, h, tile.rows, rows, tid, nt_threads);
  const int64_t stride = int64_t(a.n_kv) * D;
  const KV* K = static_cast<const KV*>(seq.k) + int64_t(j) * D;
  const KV* V = static_cast<const KV*>(seq.v) + int64_t(j) * D;
  const int wr = warp * 16;  // the warp's first row
  for (int64_t t0 = 0; t0 < ctx_end; t0 += kFlashTile) {
    const int n = static_cast<int>(ctx_end - t0 < kFlashTile ? ctx_end - t0 : int64_t(kFlashTile));
    tc_stage_kv<KV>(t, K, V, stride, t0, n, D, tid, nt_threads);
    __syncthreads();  // K, V staged (and, on the first tile, Q, O and the stats)
    tc_scores(t, wr, D);
    __syncwarp();
    const int r = wr + (lane >> 1);
    const int valid = r < tile.rows ? static_cast<int>(min(int64_t(n), ctx0 + r - t0)) : 0;  // keys of row r here
    tc_softmax(t, a.scale, r, valid, wr, lane, D);
    tc_add_pv(t, wr, D);
    __syncthreads();  // the K and V tiles are rewritten by the next tile
  }
  tc_store(t, a, row0, h, tile.rows, wr, lane);
}

int attention_flash_tc_rows(DType act, DType kv, int D, size_t max_smem, int cap) {
  if (act != DType::bf16 || (kv != DType::bf16 && kv != DType::f8_e4m3) || D % 16 != 0 || D < 16 || D > kAttnMaxHeadDim)
    return 0;
  for (int rows = kFlashTcMaxRows; rows >= 16; rows /= 2)
    if ((cap == 0 || rows <= cap) && tc_smem(D, rows).total <= max_smem) return rows;
  return 0;
}

size_t attention_flash_tc_smem(int D, int rows) { return tc_smem(D, rows).total; }

void attention_flash_tc_cuda(const AttnArgs& a, const AttnTile* tiles, int64_t n_tiles, int rows, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n_tiles == 0) return;
  if (a.act_dtype != DType::bf16 || rows < 16 || rows > kFlashTcMaxRows || rows % 16 != 0 ||
      attention_flash_tc_rows(a.act_dtype, a.kv_dtype, a.D, ~size_t(0)) == 0)
    throw std::logic_error(cat("attention_flash_tc: activations ", dtype_name(a.act_dtype), ", cache ",
                               dtype_name(a.kv_dtype), ", head_dim ", a.D, ", ", rows,
                               " rows per block are not for the tensor-core kernel"));
  const size_t smem = attention_flash_tc_smem(a.D, rows);
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_q));
  dispatch_kv(a.kv_dtype, [&](auto kv) {
    using KV = decltype(kv);
    if constexpr (!std::is_same_v<KV, float>) {
      CUDA_CHECK(cudaFuncSetAttribute(attention_flash_tc_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
      attention_flash_tc_kernel<KV><<<grid, static_cast<unsigned>(rows / 16 * 32), smem, stream>>>(a, tiles);
    }
  });
  CUDA_CHECK_LAUNCH("attention_flash_tc_kernel");
}

}  // namespace degen::cuda
