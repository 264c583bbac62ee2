// The token sampler: penalties, temperature, top-k, top-p, min-p, and the coupled Philox draw.
// The order of operations and every comparison are specified in sampler.h; this file follows it
// step by step. note: no fast-math; all arithmetic is fp64 on a copy of the fp32 logits.
#include "engine/sampler.h"

#include "engine/backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>

#include "util/error.h"
#include "util/philox.h"

namespace degen {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A score that can be chosen: not NaN, not -inf.
bool live(double s) { return !std::isnan(s) && s != kNegInf; }

void check_shapes(std::span<const float> logits, std::span<const uint8_t> banned) {
  DEGEN_ASSERT(!logits.empty(), "sampler: empty logits");
  DEGEN_ASSERT(banned.empty() || banned.size() == logits.size(), "sampler: banned mask has ", banned.size(),
               " entries, logits ", logits.size());
}

// The lowest id that is not banned (the degenerate-logits answer, see sampler.h).
int32_t lowest_allowed(std::span<const uint8_t> banned, size_t vocab) {
  for (size_t i = 0; i < vocab; ++i)
    if (banned.empty() || !banned[i]) return static_cast<int32_t>(i);
  input_error("sampler: every one of the ", vocab, " token ids is banned");
}

std::vector<double> one_hot(size_t vocab, int32_t id) {
  std::vector<double> p(vocab, 0.0);
  p[static_cast<size_t>(id)] = 1.0;
  return p;
}

// Steps 5-10 on penalised logits x (which has at least one live entry): the final distribution.
std::vector<double> warp(const SamplingParams& params, std::vector<double> z, double xmax) {
  // 5. z = (x - x_max) / T; removed ids stay -inf.
  const double t = params.temperature;
  for (double& v : z) {
    if (!live(v)) continue;
    v = std::isinf(xmax) ? (v == xmax ? 0.0 : kNegInf) : (v - xmax) / t;
  }
  top_k_filter(z, params.top_k);
  std::vector<double> p = softmax_fp64(z);
  top_p_filter(p, params.top_p);
  min_p_filter(p, params.min_p);
  double s = 0;
  for (double v : p) s += v;  // ascending id order
  for (double& v : p) v /= s;
  return p;
}

}  // namespace

void validate(const SamplingParams& params) {
  if (!(std::isfinite(params.temperature) && params.temperature >= 0))
    input_error("sampling: temperature must be a finite number >= 0 (0 = greedy), found ", params.temperature);
  if (params.top_k < 0) input_error("sampling: top_k must be >= 0 (0 = off), found ", params.top_k);
  if (!(params.top_p >= 0 && params.top_p <= 1))
    input_error("sampling: top_p must be in [0, 1] (1 = off), found ", params.top_p);
  if (!(params.min_p >= 0 && params.min_p <= 1))
    input_error("sampling: min_p must be in [0, 1] (0 = off), found ", params.min_p);
  if (!(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0))
    input_error("sampling: repetition_penalty must be a finite number > 0 (1 = off), found ",
                params.repetition_penalty);
  if (!std::isfinite(params.presence_penalty))
    input_error("sampling: presence_penalty must be finite (0 = off), found ", params.presence_penalty);
}

std::vector<double> penalized_logits(const SamplingParams& params, std::span<const float> logits,
                                     std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                                     std::span<const int32_t> generated_ids) {
  check_shapes(logits, banned);
  const size_t vocab = logits.size();
  // 1. copy; banned and NaN are removed (-inf).
  std::vector<double> x(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    const bool removed = (!banned.empty() && banned[i]) || std::isnan(logits[i]);
    x[i] = removed ? kNegInf : static_cast<double>(logits[i]);
  }
  auto in_vocab = [&](int32_t t) { return t >= 0 && static_cast<size_t>(t) < vocab; };
  // 2. repetition penalty over the distinct ids of prompt + generated, once each.
  if (params.repetition_penalty != 1.0) {
    std::vector<uint8_t> seen(vocab, 0);
    auto mark = [&](std::span<const int32_t> ids) {
      for (int32_t t : ids)
        if (in_vocab(t)) seen[static_cast<size_t>(t)] = 1;
    };
    mark(prompt_ids);
    mark(generated_ids);
    const double r = params.repetition_penalty;
    for (size_t i = 0; i < vocab; ++i)
      if (seen[i] && x[i] != kNegInf) x[i] = x[i] < 0 ? x[i] * r : x[i] / r;
  }
  // 3. presence penalty over the distinct generated ids, once each.
  if (params.presence_penalty != 0.0) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t t : generated_ids)
      if (in_vocab(t)) seen[static_cast<size_t>(t)] = 1;
    for (size_t i = 0; i < vocab; ++i)
      if (seen[i] && x[i] != kNegInf) x[i] -= params.presence_penalty;
  }
  return x;
}

int32_t argmax_lowest(std::span<const double> scores) {
  int32_t best = -1;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!live(scores[i])) continue;
    if (best < 0 || scores[i] > scores[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

void top_k_filter(std::span<double> scores, int k) {
  if (k <= 0) return;
  std::vector<double> cand;
  cand.reserve(scores.size());
  for (double s : scores)
    if (live(s)) cand.push_back(s);
  if (static_cast<size_t>(k) >= cand.size()) return;
  // The k-th largest value; everything strictly below it goes (ties with it stay, as HF).
  std::nth_element(cand.begin(), cand.begin() + (k - 1), cand.end(), std::greater<double>());
  const double kth = cand[static_cast<size_t>(k - 1)];
  for (double& s : scores)
    if (live(s) && s < kth) s = kNegInf;
}

std::vector<double> softmax_fp64(std::span<const double> scores) {
  std::vector<double> p(scores.size(), 0.0);
  double zmax = kNegInf;
  for (double s : scores)
    if (live(s) && s > zmax) zmax = s;
  if (zmax == kNegInf) return p;
  const bool inf_max = std::isinf(zmax);  // +inf: the +inf ids share the mass equally
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!live(scores[i])) continue;
    p[i] = inf_max ? (scores[i] == zmax ? 1.0 : 0.0) : std::exp(scores[i] - zmax);
    sum += p[i];  // ascending id order
  }
  for (double& v : p) v /= sum;
  return p;
}

void top_p_filter(std::span<double> probs, double top_p) {
  if (top_p >= 1.0) return;
  std::vector<int32_t> order;
  order.reserve(probs.size());
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] > 0) order.push_back(static_cast<int32_t>(i));
  if (order.empty()) return;
  // Probability descending, ties by ascending id: a total order, so the result does not depend on
  // the sort algorithm. Only a prefix is sorted: the m most probable ids (nth_element), growing m
  // until the cut falls inside it; this gives the same prefix, in the same order, as a full sort.
  auto before = [&](int32_t a, int32_t b) {
    const double pa = probs[static_cast<size_t>(a)], pb = probs[static_cast<size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  };
  size_t m = std::min<size_t>(order.size(), 256);
  size_t keep = 0;
  for (;;) {
    if (m < order.size()) std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(m), order.end(), before);
    std::sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(m), before);
    double above = 0;  // mass of the ids ranked before the current one
    for (keep = 0; keep < m; ++keep) {
      if (keep > 0 && !(above < top_p)) break;  // the first id is always kept
      above += probs[static_cast<size_t>(order[keep])];
    }
    if (keep < m || m == order.size()) break;
    m = std::min(order.size(), 8 * m);
  }
  for (size_t j = keep; j < order.size(); ++j) probs[static_cast<size_t>(order[j])] = 0;
}

void min_p_filter(std::span<double> probs, double min_p) {
  if (min_p <= 0) return;
  double pmax = 0;
  for (double v : probs) pmax = std::max(pmax, v);
  const double threshold = min_p * pmax;
  for (double& v : probs)
    if (v < threshold) v = 0;
}

int32_t inverse_cdf(std::span<const double> weights, double u) {
  double total = 0;
  for (double w : weights) total += w;
  if (!(total > 0)) return -1;
  const double target = u * total;
  double c = 0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    c += weights[i];  // same additions, same order as `total`
    last = static_cast<int32_t>(i);
    if (target < c) return last;
  }
  // Unreachable for u < 1: u * total rounds below total. Kept so a caller passing u = 1 still gets a
  // valid id (the last with positive weight).
  return last;
}

double sampling_uniform(uint64_t seed, uint32_t case_index, uint32_t position) {
  return philox_uniform(seed, case_index, position, kPhiloxStreamToken);
}

std::vector<double> sampling_distribution(const SamplingParams& params, std::span<const float> logits,
                                          std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                                          std::span<const int32_t> generated_ids) {
  validate(params);
  std::vector<double> x = penalized_logits(params, logits, banned, prompt_ids, generated_ids);
  const int32_t best = argmax_lowest(x);
  if (best < 0) return one_hot(x.size(), lowest_allowed(banned, x.size()));  // degenerate logits
  if (params.temperature == 0) return one_hot(x.size(), best);              // 4. greedy
  const double xmax = x[static_cast<size_t>(best)];
  return warp(params, std::move(x), xmax);
}

int32_t sample(const SamplingParams& params, std::span<const float> logits, std::span<const uint8_t> banned,
               std::span<const int32_t> prompt_ids, std::span<const int32_t> generated_ids,
               uint32_t case_index, uint32_t position) {
  validate(params);
  std::vector<double> x = penalized_logits(params, logits, banned, prompt_ids, generated_ids);
  const int32_t best = argmax_lowest(x);
  if (best < 0) return lowest_allowed(banned, x.size());  // degenerate logits
  if (params.temperature == 0) return best;              // 4. greedy
  const double xmax = x[static_cast<size_t>(best)];
  const std::vector<double> p = warp(params, std::move(x), xmax);
  const int32_t id = inverse_cdf(p, sampling_uniform(params.seed, case_index, position));
  DEGEN_ASSERT(id >= 0, "sampler: empty distribution after filtering");
  return id;
}

int32_t Backend::sample_row(const SamplingParams& params, const Tensor& logits, int64_t row,
                            std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                            std::span<const int32_t> generated_ids, uint32_t case_index, uint32_t position) {
  const std::vector<float> r = to_host_f32(gather_rows(logits, {row}));
  return sample(params, r, banned, prompt_ids, generated_ids, case_index, position);
}

}  // namespace degen
