// Top-K of logits rows under the golden rules, and the comparison of logits with a record's top-K (topk.h).
#include "record/topk.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "util/logits.h"

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

}  // namespace degen
