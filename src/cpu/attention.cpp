// CPU gated-attention core (spec §4.4 steps 5-6): append post-RoPE K and V to each sequence's
// cache, then causal GQA softmax attention, query head h reading KV head h / (n_q / n_kv),
// scale D^-1/2. Three algorithms (numerics().attn, DESIGN.md §5), each with its own rounding:
//   naive  : materialised scores, softmax, P·V. Dot products, the softmax and the P·V sums in
//            double. Under precision=bf16 the scores and the probabilities are materialised in
//            bf16 around an fp32 softmax, as HF eager does (matmul, softmax(dtype=fp32).to(bf16)).
//   flash  : FlashAttention-2 style: keys in tiles of kFlashTile, a running max and sum in the
//            compute dtype (fp32), the tile's probabilities exp(s - m) summed unrounded and rounded
//            to bf16 before P·V (the 16-bit operand of the tensor-core product), one division by
//            the sum at the end. P is rounded to bf16 under every precision: that rounding is part
//            of the algorithm, not of the storage.
//   splitkv: split-KV decode (flash-decoding): a one-row call splits the keys into kSplits
//            contiguous parts, each reduced as flash to a partial output (fp32) and its
//            log-sum-exp; the partials are merged with weights exp(lse_s - lse). Multi-row calls
//            (prefill) run flash, as FlashAttention's split-KV path is for decode only.
//   grouped: FlashInfer-style decode (src/util/attn_grouped.h): a one-row call cuts the keys into
//            parts of grouped_chunk() keys (from the context, the head layout and the SM count,
//            kGroupedNominalSms here), each reduced with the online softmax over tiles of
//            kGroupedTile keys, the probabilities entering P·V in fp32 (FlashInfer's decode kernel
//            multiplies V on CUDA cores, not tensor cores: no 16-bit operand); the parts merged as
//            splitkv's. Multi-row calls run flash.
// The cache stores K and V in numerics().kv_dtype (bf16; f8_e4m3 = OCP e4m3fn with scale 1 and
// saturation at ±448, vLLM's uncalibrated default; fp32/fp64 in the reference).
// Fault kv-off-by-one (numerics()): a one-row call (decode) writes its K/V row at pos + 1; the
// attention still reads rows 0..pos, so it sees the previous step's row (or zeros) at pos.
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"
#include "util/attn_grouped.h"

namespace degen {

namespace {

constexpr int64_t kFlashTile = 64;  // keys per tile (FlashAttention-2's kBlockN for head_dim <= 128)
constexpr int64_t kSplits = 4;      // split-KV parts of a decode step (capped at the context length)

// Makes room for rows [0, need), growing geometrically; keeps every row it had (also a row written
// past len by the kv-off-by-one fault).
void kv_reserve(CpuBackend& be, KvCache& c, int64_t need, int64_t n_kv, int64_t D, DType dtype) {
  check_kv_dtype(c, dtype);
  if (need <= c.capacity()) return;
  int64_t cap = std::max<int64_t>({need, 2 * c.capacity(), 16});
  Tensor k = be.zeros({cap, n_kv, D}, dtype), v = be.zeros({cap, n_kv, D}, dtype);
  if (c.capacity()) {
    std::memcpy(k.raw(), c.k.raw(), c.k.nbytes());
    std::memcpy(v.raw(), c.v.raw(), c.v.nbytes());
  }
  c.k = std::move(k);
  c.v = std::move(v);
}

// Rows [r0, r0 + n) of x ([*, n_kv, D], any float dtype) into rows [c0, c0 + n) of the cache tensor.
void kv_write(Tensor& cache, int64_t c0, const Tensor& x, int64_t r0, int64_t n) {
  const int64_t row = x.numel() / x.shape[0];
  if (cache.dtype == x.dtype) {
    const size_t es = dtype_size(x.dtype);
    std::memcpy(static_cast<uint8_t*>(cache.raw()) + c0 * row * es, static_cast<const uint8_t*>(x.raw()) + r0 * row * es,
                static_cast<size_t>(n * row) * es);
    return;
  }
  for (int64_t i = 0; i < n * row; ++i)
    cpu::store_elem(cache.raw(), cache.dtype, static_cast<size_t>(c0 * row + i),
                    cpu::load_f64(x.raw(), x.dtype, static_cast<size_t>(r0 * row + i)));
}

// One query row against keys/values [u0, u1) with the flash recurrence over tiles of `tile` keys:
// running max m, running sum l of the unrounded probabilities, acc = Σ bf16(p) v (round_p: flash,
// splitkv) or Σ p v (grouped), all in A. Leaves m, l, acc.
template <typename T, typename A>
void flash_range(const T* qv, const T* K, const T* V, int64_t n_kv, int64_t j, int64_t D, int64_t u0, int64_t u1,
                 A scale, A& m, A& l, std::vector<A>& acc, std::vector<A>& s, int64_t tile = kFlashTile,
                 bool round_p = true) {
  m = -std::numeric_limits<A>::infinity();
  l = 0;
  std::fill(acc.begin(), acc.end(), A(0));
  for (int64_t t0 = u0; t0 < u1; t0 += tile) {
    const int64_t t1 = std::min(u1, t0 + tile);
    A mt = m;
    for (int64_t u = t0; u < t1; ++u) {
      const T* kv = K + (u * n_kv + j) * D;
      A dot = 0;
      for (int64_t e = 0; e < D; ++e) dot += A(qv[e]) * A(kv[e]);
      s[u - t0] = dot * scale;
      mt = std::max(mt, s[u - t0]);
    }
    const A corr = std::exp(m - mt);  // 0 on the first tile (m = -inf)
    l *= corr;
    for (int64_t e = 0; e < D; ++e) acc[e] *= corr;
    for (int64_t u = t0; u < t1; ++u) {
      const A p = std::exp(s[u - t0] - mt);
      l += p;                                          // the row sum takes the fp32 probabilities
      const A pb = round_p ? A(round_bf16(static_cast<float>(p))) : p;  // P·V takes them in bf16 (flash)
      const T* vv = V + (u * n_kv + j) * D;
      for (int64_t e = 0; e < D; ++e) acc[e] += pb * A(vv[e]);
    }
    m = mt;
  }
}

// Appends rows [sp.row0, sp.row0 + sp.rows) of k and v to the cache, at its length (plus `off`, the
// kv-off-by-one fault's shift), growing it as needed.
void kv_append(CpuBackend& be, KvCache& c, const Tensor& k, const Tensor& v, const SeqSpan& sp, int64_t off, int64_t n_kv,
               int64_t D, DType dtype) {
  kv_reserve(be, c, c.len + sp.rows + off, n_kv, D, dtype);
  kv_write(c.k, c.len + off, k, sp.row0, sp.rows);
  kv_write(c.v, c.len + off, v, sp.row0, sp.rows);
  c.len += sp.rows;
}

// naive: one query row against keys/values [0, ctx) with materialised scores, in double; under
// `narrow` (precision=bf16) the scores and probabilities are rounded to `act`. Writes o[0, D).
template <typename T>
void naive_row(const T* qv, const T* K, const T* V, int64_t n_kv, int64_t j, int64_t D, int64_t ctx, double scale,
               bool narrow, DType act, std::vector<double>& score, std::vector<double>& acc, T* o) {
  auto mat = [&](double x) { return narrow ? cpu::round_to(x, act) : x; };
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t u = 0; u < ctx; ++u) {
    const T* kv = K + (u * n_kv + j) * D;
    double d = 0;
    for (int64_t e = 0; e < D; ++e) d += double(qv[e]) * double(kv[e]);
    score[u] = mat(d * scale);
    mx = std::max(mx, score[u]);
  }
  double sum = 0;
  for (int64_t u = 0; u < ctx; ++u) sum += (score[u] = std::exp(score[u] - mx));
  std::fill(acc.begin(), acc.end(), 0.0);
  for (int64_t u = 0; u < ctx; ++u) {
    const double p = mat(score[u] / sum);
    const T* vv = V + (u * n_kv + j) * D;
    for (int64_t e = 0; e < D; ++e) acc[e] += p * double(vv[e]);
  }
  for (int64_t e = 0; e < D; ++e) o[e] = static_cast<T>(acc[e]);
}

// Split-KV decode of one query row against keys/values [0, ctx): splitkv in kSplits parts (flash
// tiles, P in bf16), grouped in parts of grouped_len keys (kGroupedTile tiles, P in fp32); each
// part's output and log-sum-exp in `part` and `lse`, merged with weights exp(lse_s - lse). Writes o[0, D).
template <typename T, typename A>
void split_row(const T* qv, const T* K, const T* V, int64_t n_kv, int64_t j, int64_t D, int64_t ctx, double scale,
               bool grouped, int64_t grouped_len, std::vector<A>& acc_a, std::vector<A>& s_tile, std::vector<A>& part,
               std::vector<A>& lse, T* o) {
  const int64_t splits = std::min(kSplits, ctx);
  const int64_t len = grouped ? grouped_len : (ctx + splits - 1) / splits;
  const int64_t parts = (ctx + len - 1) / len;
  part.resize(static_cast<size_t>(parts * D));
  lse.resize(static_cast<size_t>(parts));
  int64_t ns = 0;
  for (int64_t u0 = 0; u0 < ctx; u0 += len, ++ns) {
    A m, l;
    flash_range<T, A>(qv, K, V, n_kv, j, D, u0, std::min(ctx, u0 + len), A(scale), m, l, acc_a, s_tile,
                      grouped ? kGroupedTile : kFlashTile, !grouped);
    for (int64_t e = 0; e < D; ++e) part[ns * D + e] = acc_a[e] / l;  // partial output (fp32)
    lse[ns] = m + std::log(l);
  }
  A lmax = -std::numeric_limits<A>::infinity();
  for (int64_t i = 0; i < ns; ++i) lmax = std::max(lmax, lse[i]);
  A sum = 0;
  for (int64_t i = 0; i < ns; ++i) sum += std::exp(lse[i] - lmax);
  const A lse_all = lmax + std::log(sum);
  std::fill(acc_a.begin(), acc_a.end(), A(0));
  for (int64_t i = 0; i < ns; ++i) {
    const A wgt = std::exp(lse[i] - lse_all);
    for (int64_t e = 0; e < D; ++e) acc_a[e] += wgt * part[i * D + e];
  }
  for (int64_t e = 0; e < D; ++e) o[e] = static_cast<T>(acc_a[e]);
}

}  // namespace

Tensor CpuBackend::do_attention(const Tensor& q0, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                             const std::vector<KvCache*>& caches) {
  const int64_t N = q0.shape[0], n_q = q0.shape[1], D = q0.shape[2], n_kv = k.shape[1];
  const Tensor q = wide(q0);
  const int64_t group = n_q / n_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const AttnAlgo algo = numerics_.attn;
  const DType kv_dtype = numerics_.kv_dtype;
  // naive under precision=bf16: scores and probabilities materialised in the activation dtype
  const bool materialise_narrow = act_dtype() != compute_dtype();
  const DType act = act_dtype();
  Tensor out = zeros({N, n_q * D}, q.dtype);
  cpu::dispatch(q.dtype, [&](auto zero) {
    using T = decltype(zero);
    using A = T;  // flash / split-KV accumulators: fp32 (fp64 under precision=fp64)
    for (size_t s = 0; s < spans.size(); ++s) {
      const SeqSpan& sp = spans[s];
      KvCache& c = *caches[s];
      DEGEN_ASSERT(c.len == sp.pos0, "KV cache holds ", c.len, " rows but the sequence is at position ", sp.pos0);
      const bool decode = sp.rows == 1;
      const int64_t off = decode && numerics_.has(Fault::kv_off_by_one) ? 1 : 0;  // fault: row written at pos + 1
      kv_append(*this, c, k, v, sp, off, n_kv, D, kv_dtype);
      // K and V rows [0, len) in T (the cache itself when it stores T)
      Tensor Kt = c.k.slice0(0, c.len), Vt = c.v.slice0(0, c.len);
      if (Kt.dtype != q.dtype) {
        Kt = convert(Kt, q.dtype);
        Vt = convert(Vt, q.dtype);
      }
      const T* K = Kt.data<T>();
      const T* V = Vt.data<T>();
      const int64_t work = sp.rows * n_q;
      const AttnAlgo run = ((algo == AttnAlgo::splitkv || algo == AttnAlgo::grouped) && !decode) ? AttnAlgo::flash : algo;
      const int64_t grouped_len =
          grouped_chunk(sp.pos0 + 1, grouped_blocks_per_row(n_q, n_kv), kGroupedNominalSms);  // decode: ctx = pos0 + 1
#pragma omp parallel if (double(work) * double(c.len) * double(D) >= cpu::kParallelMinWork)
      {
        std::vector<double> score(static_cast<size_t>(c.len)), acc(static_cast<size_t>(D));
        std::vector<A> s_tile(static_cast<size_t>(kFlashTile)), acc_a(static_cast<size_t>(D)),
            part, lse;
#pragma omp for schedule(static)
        for (int64_t w = 0; w < work; ++w) {
          const int64_t t = w / n_q, h = w % n_q, j = h / group;
          const int64_t ctx = sp.pos0 + t + 1;  // causal: keys 0..pos
          const T* qv = q.data<T>() + ((sp.row0 + t) * n_q + h) * D;
          T* o = out.data<T>() + (sp.row0 + t) * n_q * D + h * D;
          if (run == AttnAlgo::naive) {
            naive_row<T>(qv, K, V, n_kv, j, D, ctx, scale, materialise_narrow, act, score, acc, o);
          } else if (run == AttnAlgo::flash) {
            A m, l;
            flash_range<T, A>(qv, K, V, n_kv, j, D, 0, ctx, A(scale), m, l, acc_a, s_tile);
            for (int64_t e = 0; e < D; ++e) o[e] = static_cast<T>(acc_a[e] / l);
          } else {  // split-KV decode (splitkv: kSplits parts, grouped: parts of grouped_len keys)
            split_row<T, A>(qv, K, V, n_kv, j, D, ctx, scale, run == AttnAlgo::grouped, grouped_len, acc_a, s_tile, part,
                            lse, o);
          }
        }
      }
    }
  });
  return store(out);
}

}  // namespace degen
