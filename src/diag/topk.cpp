// Top-K of logits rows under the golden rules, and the comparison of logits with a record's top-K (topk.h).
#include "diag/topk.h"

#include <algorithm>
#include <cmath>
#include <span>

namespace degen {

TopK topk_of_row(const float* row, int64_t V, const std::vector<uint8_t>* mask, int k) {
  std::span<const float> x(row, static_cast<size_t>(V));
  std::span<const uint8_t> ex;
  if (mask) ex = *mask;
  std::vector<double> lp = metrics::log_softmax(x, ex);
  TopK t;
  std::vector<int32_t> idx;
  double m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    if (!ex.empty() && ex[static_cast<size_t>(i)]) continue;
    if (std::isnan(lp[static_cast<size_t>(i)])) return t;  // undefined distribution: caller reports it
    idx.push_back(static_cast<int32_t>(i));
    m = std::max(m, static_cast<double>(x[static_cast<size_t>(i)]));
  }
  const size_t K = std::min(idx.size(), static_cast<size_t>(std::max(k, 0)));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(K), idx.end(), [&](int32_t a, int32_t b) {
    return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
  });
  for (size_t i = 0; i < K; ++i) {
    t.ids.push_back(idx[i]);
    t.logprobs.push_back(static_cast<float>(lp[static_cast<size_t>(idx[i])]));
  }
  double s = 0;
  for (int32_t i : idx) s += std::exp(static_cast<double>(x[static_cast<size_t>(i)]) - m);
  t.lse = m + std::log(s);
  // lse_pad: the log-sum-exp over every row, padding included (what other engines normalise by),
  // minus lse, as log1p(padding mass / real mass) in fp64 around the largest logit of all rows.
  double mv = m;
  bool finite = true;
  for (int64_t i = 0; i < V; ++i) {
    if (ex.empty() || !ex[static_cast<size_t>(i)]) continue;
    const double v = x[static_cast<size_t>(i)];
    if (!std::isfinite(v)) finite = false;
    else mv = std::max(mv, v);
  }
  if (!finite) {
    t.lse_pad = NAN;
  } else {
    double real = 0, pad = 0;
    for (int64_t i = 0; i < V; ++i)
      (ex.empty() || !ex[static_cast<size_t>(i)] ? real : pad) += std::exp(static_cast<double>(x[static_cast<size_t>(i)]) - mv);
    t.lse_pad = std::log1p(pad / real);
  }
  return t;
}

std::optional<double> vocab_shift(const TopKBlock& b, int64_t row) {
  if (row < 0 || static_cast<size_t>(row) >= b.lse_pad.size()) return std::nullopt;
  const double p = b.lse_pad[static_cast<size_t>(row)];
  if (!std::isfinite(p)) return std::nullopt;
  return -p;
}

std::vector<metrics::LogitPosition> logit_positions(const std::vector<float>& logits, int64_t rows, int64_t V,
                                                    const TopKBlock& golden, const std::vector<int32_t>& next,
                                                    const std::vector<uint8_t>* mask) {
  const int K = golden.K;
  const std::vector<int32_t>& ids = golden.ids;
  const std::vector<float>& logprobs = golden.logprobs;
  const std::vector<float>& lse = golden.lse;
  std::vector<metrics::LogitPosition> out;
  std::span<const uint8_t> ex;
  if (mask) ex = *mask;
  for (int64_t i = 0; i < rows; ++i) {
    metrics::GoldenTopK g;
    g.ids = std::span<const int32_t>(ids.data() + i * K, static_cast<size_t>(K));
    g.logprobs = std::span<const float>(logprobs.data() + i * K, static_cast<size_t>(K));
    g.lse = lse[static_cast<size_t>(i)];
    out.push_back(metrics::compare_logits_topk(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)), g,
                                               next[static_cast<size_t>(i)], ex, std::min(K, 10)));
  }
  return out;
}

TopKBlock topk_block(const std::vector<float>& logits, int64_t rows, int64_t V, const std::vector<uint8_t>* mask, int K) {
  TopKBlock b;
  b.K = K;
  for (int64_t i = 0; i < rows; ++i) {
    TopK t = topk_of_row(logits.data() + i * V, V, mask, K);
    if (static_cast<int>(t.ids.size()) != K) {
      b.undefined_row = i;
      return b;
    }
    b.ids.insert(b.ids.end(), t.ids.begin(), t.ids.end());
    b.logprobs.insert(b.logprobs.end(), t.logprobs.begin(), t.logprobs.end());
    b.lse.push_back(static_cast<float>(t.lse));
    b.lse_pad.push_back(static_cast<float>(t.lse_pad));
  }
  return b;
}

double mean_kld(const std::vector<metrics::LogitPosition>& pos) {
  if (pos.empty()) return 0;
  double s = 0;
  for (const auto& p : pos) s += p.kld;
  return s / static_cast<double>(pos.size());
}

}  // namespace degen
