// attn=grouped (DESIGN.md §5, src/util/attn_grouped.h): FlashInfer-style decode attention. One
// block of kGrpThreads threads serves one decode row, one KV head j and up to kGroupedHeads of the
// query heads that read it, over one part of the row's keys (grouped_chunk(), from the context, the
// head layout and the SM count), so a key or value row is read once per block, 16 bytes per load,
// not once per query head as flash and splitkv read it. Per tile of kGroupedTile keys:
//   scores: a warp per key, its lanes over the head dimension in 8-element chunks, the block's
//           query heads reduced in one pass over the key row (fp32, times D^-1/2);
//   softmax: a warp per query head, a lane per key: the running max and sum in fp32;
//   P·V: thread t owns 8 output dims (chunk t % (D/8)) of every head for the keys t / (D/8)
//        modulo the lane groups, with the probabilities in fp32 (no bf16 operand: FlashInfer's
//        decode kernel multiplies V on CUDA cores).
// A row of one part writes its output; a row of several writes each part's output and log-sum-exp,
// and the last of its blocks to finish merges them as attn=splitkv's merge does (merge_parts):
// one launch in all.
// src/cpu/attention.cpp (run == grouped) is the reference. The host code sends one-row sequences
// only (decode); the others run flash. It also requires D % 8 == 0 (every shipped head layout).
// note: the score pass keeps D / 8 lanes of a warp busy: all 32 at head_dim 256 (Qwen3.5, Qwen3.6,
// Qwen3-Next), a quarter at 64 (test layouts only).
#include "kernels/check.h"
#include "kernels/attention.cuh"
#include "kernels/gemv_row.cuh"
#include "util/attn_grouped.h"

namespace degen::cuda {

constexpr int kGrpThreads = 128;
constexpr int kGrpWarps = kGrpThreads / 32;
// The shared buffer: the block's queries [nh][D], then every thread's partial outputs
// [lane groups][nh][D] (lane groups x D / 8 <= kGrpThreads, so at most kGrpThreads x 8 x kGroupedHeads).
constexpr int kGrpBuf = kGrpThreads * 8 * kGroupedHeads;
static_assert(kGroupedHeads * kAttnMaxHeadDim <= kGrpBuf, "the queries fit the shared buffer");
static_assert(kGroupedTile == 32, "the softmax step gives a warp lane to each key of a tile");
static_assert(kGroupedHeads % kGrpWarps == 0, "each warp owns kGroupedHeads / kGrpWarps heads in the softmax");
constexpr int kGrpHeadsPerWarp = kGroupedHeads / kGrpWarps;

// 8 consecutive cache elements as fp32 in memory order: one 16-byte load (bf16), one 8-byte load
// (fp8 e4m3) or two 16-byte loads (f32). p is aligned: D % 8 == 0 and the cache's base is.
__device__ __forceinline__ void load8(const bf16* p, float* f) { unpack_bf16x8(*reinterpret_cast<const uint4*>(p), f); }
__device__ __forceinline__ void load8(const e4m3* p, float* f) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&w);  // note: bytes, not e4m3: no aliasing of w
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(e4m3{bytes[i]});
}
__device__ __forceinline__ void load8(const float* p, float* f) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// Where a block works: batch row, its context, the first query head and how many it serves.
struct GrpBlock {
  int64_t m = 0, row = 0, ctx = 0;
  int j = 0, h0 = 0, nh = 0;
  const AttnSeq* seq = nullptr;
};

__device__ __forceinline__ GrpBlock grp_block(const AttnArgs& a, int64_t item) {
  GrpBlock b;
  const int group = a.n_q / a.n_kv, hchunks = (group + kGroupedHeads - 1) / kGroupedHeads;
  b.m = item / (int64_t(a.n_kv) * hchunks);
  const int rest = static_cast<int>(item % (int64_t(a.n_kv) * hchunks));
  b.j = rest / hchunks;
  const int hc = rest % hchunks;
  b.h0 = b.j * group + hc * kGroupedHeads;
  b.nh = group - hc * kGroupedHeads < kGroupedHeads ? group - hc * kGroupedHeads : kGroupedHeads;
  b.row = a.rows[b.m];
  b.seq = a.seqs + a.row_seq[b.m];
  b.ctx = b.seq->pos0 + (b.row - b.seq->row0) + 1;  // causal: keys 0..pos
  return b;
}

// Scores of a tile's n keys (rows of `krow0`, `stride` apart) for the block's nh heads, whose
// queries are in q_buf [nh][D]: a warp per key, its lanes over the head dimension in 8-element
// chunks, each head's dot product summed over the warp and scaled into p_tile[h][key].
template <typename KV>
__device__ __forceinline__ void grp_tile_scores(const KV* K, int64_t stride, int64_t t0, int n, const float* buf, int nh,
                                                int D, int warp, int lane, int chunks, float scale,
                                                float (*p_tile)[kGroupedTile]) {
  for (int u = warp; u < n; u += kGrpWarps) {
    const KV* krow = K + (t0 + u) * stride;
    float d[kGroupedHeads];
#pragma unroll
    for (int h = 0; h < kGroupedHeads; ++h) d[h] = 0.0f;
    for (int ch = lane; ch < chunks; ch += 32) {
      float kf[8];
      load8(krow + ch * 8, kf);
#pragma unroll
      for (int h = 0; h < kGroupedHeads; ++h) {
        if (h >= nh) break;
        const float* q = buf + h * D + ch * 8;
#pragma unroll
        for (int i = 0; i < 8; ++i) d[h] += q[i] * kf[i];
      }
    }
#pragma unroll
    for (int h = 0; h < kGroupedHeads; ++h) {
      if (h >= nh) break;
      const float s = warp_sum(d[h]);
      if (lane == 0) p_tile[h][u] = s * scale;
    }
  }
}

// Online softmax of a tile: warp w owns heads w, w + kGrpWarps, ...; lane u holds key u. The
// scores in p_tile become probabilities; each head's running max and sum (m_run, l_run: the
// warp's heads) move on, and its correction of the earlier tiles goes to corr_sh[h].
__device__ __forceinline__ void grp_tile_softmax(float (*p_tile)[kGroupedTile], int n, int nh, int warp, int lane,
                                                 float (&m_run)[kGrpHeadsPerWarp], float (&l_run)[kGrpHeadsPerWarp],
                                                 float* corr_sh) {
#pragma unroll
  for (int i = 0; i < kGrpHeadsPerWarp; ++i) {
    const int h = warp + i * kGrpWarps;
    if (h >= nh) break;
    const float s = lane < n ? p_tile[h][lane] : -INFINITY;
    const float mt = fmaxf(m_run[i], warp_max(s));
    const float p = lane < n ? expf(s - mt) : 0.0f;
    const float corr = expf(m_run[i] - mt);  // 0 on the first tile (m = -inf)
    l_run[i] = l_run[i] * corr + warp_sum(p);
    m_run[i] = mt;
    p_tile[h][lane] = p;
    if (lane == 0) corr_sh[h] = corr;
  }
}

// P·V of a tile with fp32 probabilities: the thread's 8 output dims of every head (acc), first
// corrected by corr_sh, then given the keys kl, kl + lanes, ... (value rows from `vcol`, the
// thread's 8 columns of the tile's first row, `stride` apart).
template <typename KV>
__device__ __forceinline__ void grp_tile_pv(const KV* V, int64_t stride, int64_t t0, int n, int c, int kl, int lanes, int nh,
                                            const float (*p_tile)[kGroupedTile], const float* corr_sh,
                                            float (&acc)[kGroupedHeads][8]) {
#pragma unroll
  for (int h = 0; h < kGroupedHeads; ++h) {
    if (h >= nh) break;
    const float corr = corr_sh[h];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] *= corr;
  }
  for (int u = kl; u < n; u += lanes) {
    float vf[8];
    load8(V + (t0 + u) * stride + c * 8, vf);
#pragma unroll
    for (int h = 0; h < kGroupedHeads; ++h) {
      if (h >= nh) break;
      const float p = p_tile[h][u];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] += p * vf[i];
    }
  }
}

template <typename KV, typename A>
static __global__ void __launch_bounds__(kGrpThreads)
    attention_grouped_kernel(AttnArgs a, int sms, int64_t max_parts, float* part, float* lse, unsigned* tickets) {
  __shared__ float buf[kGrpBuf];                          // queries, then partial outputs
  __shared__ float p_tile[kGroupedHeads][kGroupedTile];   // a tile's scores, then its probabilities
  __shared__ float corr_sh[kGroupedHeads], m_sh[kGroupedHeads], l_sh[kGroupedHeads];
  const GrpBlock b = grp_block(a, blockIdx.x);
  const int64_t bpr = grouped_blocks_per_row(a.n_q, a.n_kv);
  const int64_t len = grouped_chunk(b.ctx, bpr, sms), parts = (b.ctx + len - 1) / len;
  const int sp = blockIdx.y;
  if (sp >= parts) return;  // the whole block leaves: no barrier is split
  const int64_t u0 = sp * len, u1 = b.ctx < u0 + len ? b.ctx : u0 + len;
  const int64_t stride = int64_t(a.n_kv) * a.D;
  const KV* K = static_cast<const KV*>(b.seq->k) + int64_t(b.j) * a.D;
  const KV* V = static_cast<const KV*>(b.seq->v) + int64_t(b.j) * a.D;
  const int nh = b.nh, D = a.D;

  const A* qsrc = static_cast<const A*>(a.q) + (b.row * a.n_q + b.h0) * D;  // the nh heads are adjacent
  for (int i = threadIdx.x; i < nh * D; i += kGrpThreads) buf[i] = to_f32(qsrc[i]);
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = D / 8;
  const int c = threadIdx.x % chunks, kl = threadIdx.x / chunks, lanes = kGrpThreads / chunks;
  const bool pv = kl < lanes;  // threads past the last whole lane group sit out P·V
  float acc[kGroupedHeads][8];
#pragma unroll
  for (int h = 0; h < kGroupedHeads; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
  float m_run[kGrpHeadsPerWarp], l_run[kGrpHeadsPerWarp];
#pragma unroll
  for (int i = 0; i < kGrpHeadsPerWarp; ++i) m_run[i] = -INFINITY, l_run[i] = 0.0f;

  for (int64_t t0 = u0; t0 < u1; t0 += kGroupedTile) {
    const int n = static_cast<int>(u1 - t0 < kGroupedTile ? u1 - t0 : int64_t(kGroupedTile));
    grp_tile_scores(K, stride, t0, n, buf, nh, D, warp, lane, chunks, a.scale, p_tile);
    __syncthreads();
    grp_tile_softmax(p_tile, n, nh, warp, lane, m_run, l_run, corr_sh);
    __syncthreads();
    if (pv) grp_tile_pv(V, stride, t0, n, c, kl, lanes, nh, p_tile, corr_sh, acc);
    __syncthreads();  // p_tile is rewritten by the next tile
  }

  // the lane groups' partial outputs summed in lane-group order, divided by the row sum
#pragma unroll
  for (int i = 0; i < kGrpHeadsPerWarp; ++i) {
    const int h = warp + i * kGrpWarps;
    if (h < nh && lane == 0) m_sh[h] = m_run[i], l_sh[h] = l_run[i];
  }
  if (pv) {
#pragma unroll
    for (int h = 0; h < kGroupedHeads; ++h) {
      if (h >= nh) break;
#pragma unroll
      for (int i = 0; i < 8; ++i) buf[(kl * nh + h) * D + c * 8 + i] = acc[h][i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nh * D; idx += kGrpThreads) {
    const int h = idx / D, e = idx % D;
    float o = 0.0f;
    for (int g = 0; g < lanes; ++g) o += buf[(g * nh + h) * D + e];
    o /= l_sh[h];
    const int64_t rh = b.row * a.n_q + b.h0 + h;  // (batch row, query head)
    if (parts == 1) {
      static_cast<A*>(a.out)[rh * D + e] = from_f32<A>(o);
    } else {
      const int64_t slot = (b.m * a.n_q + b.h0 + h) * max_parts + sp;
      part[slot * D + e] = o;
      if (e == 0) lse[slot] = m_sh[h] + logf(l_sh[h]);
    }
  }
  if (parts == 1) return;
  // The last of the row's parts to finish merges them (the CUDA programming guide's memory-fence
  // pattern): each block makes its partials visible device-wide, then takes a ticket; the block
  // with the last ticket reads every part and resets the counter for the next launch (or replay).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* t = tickets + blockIdx.x;  // one counter per (row, KV head, head chunk)
    last = atomicAdd(t, 1u) == static_cast<unsigned>(parts - 1);
    if (last) *t = 0u;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int h = 0; h < nh; ++h) {
    const int64_t slot0 = (b.m * a.n_q + b.h0 + h) * max_parts;
    merge_parts(part + slot0 * D, lse + slot0, static_cast<int>(parts), D,
                static_cast<A*>(a.out) + (b.row * a.n_q + b.h0 + h) * D);
  }
}

int64_t attention_grouped_tickets(const AttnArgs& a) { return a.M * grouped_blocks_per_row(a.n_q, a.n_kv); }

void attention_grouped_cuda(const AttnArgs& a, int sms, int64_t max_parts, float* part, float* lse, unsigned* tickets,
                            cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (a.M == 0) return;
  const dim3 grid(static_cast<unsigned>(attention_grouped_tickets(a)), static_cast<unsigned>(max_parts));
  dispatch_kv_act(a.kv_dtype, a.act_dtype, [&](auto kv, auto act) {
    using KV = decltype(kv);
    using A = decltype(act);
    attention_grouped_kernel<KV, A><<<grid, kGrpThreads, 0, stream>>>(a, sms, max_parts, part, lse, tickets);
    CUDA_CHECK_LAUNCH("attention_grouped_kernel");
  });
}

}  // namespace degen::cuda
