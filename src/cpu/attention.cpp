// CPU gated-attention core (spec §4.4 steps 5-6): append post-RoPE K and V to each sequence's
// cache, then causal GQA softmax attention, query head h reading KV head h / (n_q / n_kv),
// scale D^-1/2. Materialised softmax (the "naive" algorithm of DESIGN.md §5).
// note: q·k dot products, the softmax sum and the P·V sums are accumulated in double.
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

namespace {

// Makes room for `extra` more rows, growing geometrically; keeps the rows in use.
void kv_reserve(CpuBackend& be, KvCache& c, int64_t extra, int64_t n_kv, int64_t D, DType dtype) {
  const int64_t need = c.len + extra;
  if (need <= c.capacity()) return;
  int64_t cap = std::max<int64_t>({need, 2 * c.capacity(), 16});
  Tensor k = be.zeros({cap, n_kv, D}, dtype), v = be.zeros({cap, n_kv, D}, dtype);
  if (c.len) {
    size_t bytes = static_cast<size_t>(c.len * n_kv * D) * dtype_size(dtype);
    std::memcpy(k.raw(), c.k.raw(), bytes);
    std::memcpy(v.raw(), c.v.raw(), bytes);
  }
  c.k = std::move(k);
  c.v = std::move(v);
}

}  // namespace

Tensor CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                             const std::vector<KvCache*>& caches) {
  DEGEN_ASSERT(q.shape.size() == 3 && k.shape.size() == 3 && k.shape == v.shape, "attention shapes ",
               shape_str(q.shape), shape_str(k.shape), shape_str(v.shape));
  const int64_t N = q.shape[0], n_q = q.shape[1], D = q.shape[2], n_kv = k.shape[1];
  DEGEN_ASSERT(k.shape[0] == N && k.shape[2] == D && n_q % n_kv == 0, "attention head layout");
  DEGEN_ASSERT(spans.size() == caches.size(), "attention: one cache per sequence");
  const int64_t group = n_q / n_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor out = zeros({N, n_q * D}, q.dtype);
  cpu::dispatch(q.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t s = 0; s < spans.size(); ++s) {
      const SeqSpan& sp = spans[s];
      KvCache& c = *caches[s];
      DEGEN_ASSERT(c.len == sp.pos0, "KV cache holds ", c.len, " rows but the sequence is at position ", sp.pos0);
      kv_reserve(*this, c, sp.rows, n_kv, D, q.dtype);
      const size_t row_bytes = static_cast<size_t>(n_kv * D) * sizeof(T);
      std::memcpy(c.k.data<T>() + c.len * n_kv * D, k.data<T>() + sp.row0 * n_kv * D, sp.rows * row_bytes);
      std::memcpy(c.v.data<T>() + c.len * n_kv * D, v.data<T>() + sp.row0 * n_kv * D, sp.rows * row_bytes);
      c.len += sp.rows;
      const T* K = c.k.data<T>();
      const T* V = c.v.data<T>();
      const int64_t work = sp.rows * n_q;
#pragma omp parallel if (double(work) * double(c.len) * double(D) >= cpu::kParallelMinWork)
      {
        std::vector<double> score(static_cast<size_t>(c.len)), acc(static_cast<size_t>(D));
#pragma omp for schedule(static)
        for (int64_t w = 0; w < work; ++w) {
          const int64_t t = w / n_q, h = w % n_q, j = h / group;
          const int64_t ctx = sp.pos0 + t + 1;  // causal: keys 0..pos
          const T* qv = q.data<T>() + ((sp.row0 + t) * n_q + h) * D;
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t u = 0; u < ctx; ++u) {
            const T* kv = K + (u * n_kv + j) * D;
            double d = 0;
            for (int64_t e = 0; e < D; ++e) d += double(qv[e]) * double(kv[e]);
            score[u] = d * scale;
            mx = std::max(mx, score[u]);
          }
          double sum = 0;
          for (int64_t u = 0; u < ctx; ++u) sum += (score[u] = std::exp(score[u] - mx));
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t u = 0; u < ctx; ++u) {
            const double p = score[u] / sum;
            const T* vv = V + (u * n_kv + j) * D;
            for (int64_t e = 0; e < D; ++e) acc[e] += p * double(vv[e]);
          }
          T* o = out.data<T>() + (sp.row0 + t) * n_q * D + h * D;
          for (int64_t e = 0; e < D; ++e) o[e] = static_cast<T>(acc[e]);
        }
      }
    }
  });
  return out;
}

}  // namespace degen
