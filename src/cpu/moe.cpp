// CPU MoE routing (spec §4.8): softmax over all experts (in double), top-k by probability
// (ties: lower expert id first), optional renormalisation of the k weights to sum 1.
// The experts themselves are matmul + swiglu, driven by the engine.
// Under precision=bf16 the router logits are bf16 (a matmul output) and the routing weights are
// handed out as fp32 values (HF v5 keeps them fp32; spec §4.8).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

MoeRouting CpuBackend::moe_route(const Tensor& logits, int k, bool renormalise) {
  const int64_t R = logits.rows(), E = logits.cols();
  DEGEN_ASSERT(k >= 1 && k <= E, "moe_route: top-", k, " of ", E, " experts");
  MoeRouting out;
  out.k = k;
  out.experts.resize(static_cast<size_t>(R * k));
  out.weights.resize(static_cast<size_t>(R * k));
  std::vector<double> l = to_host_f64(logits), p(static_cast<size_t>(E));
  std::vector<int32_t> idx(static_cast<size_t>(E));
  for (int64_t r = 0; r < R; ++r) {
    const double* lr = l.data() + r * E;
    const double mx = *std::max_element(lr, lr + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(lr[e] - mx));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double top = 0;
    for (int i = 0; i < k; ++i) top += p[idx[i]];
    for (int i = 0; i < k; ++i) {
      out.experts[r * k + i] = idx[i];
      out.weights[r * k + i] = renormalise ? p[idx[i]] / top : p[idx[i]];
      if (gpu_storage()) out.weights[r * k + i] = static_cast<float>(out.weights[r * k + i]);
    }
  }
  return out;
}

}  // namespace degen
