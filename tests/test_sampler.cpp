// Tests for the Philox generator (src/util/philox.h) and the sampler (src/engine/sampler.*):
// Random123's known-answer vectors; the exact masks of top-k / top-p / min-p on hand-made
// distributions, at their boundaries (the inclusive/exclusive rules are HF's, see sampler.h);
// penalties; the order of operations; greedy and banned ids; determinism per seed; empirical
// frequencies against the distribution; and the coupling property the design relies on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/sampler.h"
#include "util/error.h"
#include "util/philox.h"

using namespace degen;

namespace {

struct Kat {
  int rounds;
  PhiloxCounter ctr;
  PhiloxKey key;
  PhiloxCounter expected;
};

// Probabilities p -> fp32 logits log(p) (softmax gives p back up to rounding).
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

// Ids with non-zero probability.
std::vector<int> support(const std::vector<double>& p) {
  std::vector<int> ids;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) ids.push_back(static_cast<int>(i));
  return ids;
}

std::vector<int> top_p_kept(std::vector<double> p, double top_p) {
  top_p_filter(p, top_p);
  return support(p);
}

std::vector<int> min_p_kept(std::vector<double> p, double min_p) {
  min_p_filter(p, min_p);
  return support(p);
}

SamplingParams sampling(double temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

const std::vector<uint8_t> kNoBan;
const std::vector<int32_t> kNoIds;

}  // namespace

TEST_CASE("sampler: Philox4x32 matches Random123's known-answer vectors") {
  // From DEShawResearch/random123, tests/kat_vectors (the lines "philox4x32 7" and "philox4x32 10"),
  // read at commit 9545ff6: counter (ctr0..ctr3), key (key0, key1), expected output words.
  const Kat kats[] = {
      {10, {{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {10, {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {10, {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
      {7, {{0, 0, 0, 0}}, {{0, 0}}, {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
      {7, {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
       {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
      {7, {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
       {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
  };
  for (const Kat& k : kats) {
    CAPTURE(k.rounds);
    CAPTURE(k.ctr.v[0]);
    const PhiloxCounter out = k.rounds == 10 ? philox4x32_10(k.ctr, k.key) : philox4x32(k.ctr, k.key, k.rounds);
    for (int w = 0; w < 4; ++w) CHECK(out.v[w] == k.expected.v[w]);
  }
}

TEST_CASE("sampler: Philox keying and uniform conversions") {
  // seed -> key: low word first.
  const PhiloxKey key = philox_key(0x299f31d0a4093822ull);
  CHECK(key.v[0] == 0xa4093822u);
  CHECK(key.v[1] == 0x299f31d0u);
  // counter = (case, position, stream, 0)
  const PhiloxCounter a = philox_bits(0x299f31d0a4093822ull, 11, 22, 33);
  const PhiloxCounter b = philox4x32_10({{11, 22, 33, 0}}, key);
  for (int w = 0; w < 4; ++w) CHECK(a.v[w] == b.v[w]);

  // Exact end points.
  CHECK(uniform_f32(0) == 0.0f);
  CHECK(uniform_f32(0xffffffffu) == 1.0f - std::ldexp(1.0f, -24));
  CHECK(uniform_f32(0x80000000u) == 0.5f);
  CHECK(uniform_f64(0, 0) == 0.0);
  CHECK(uniform_f64(0xffffffffu, 0xffffffffu) == 1.0 - std::ldexp(1.0, -53));
  CHECK(uniform_f64(0x80000000u, 0) == 0.5);
  CHECK(sampling_uniform(5, 1, 2) == uniform_f64(philox_bits(5, 1, 2, 0).v[0], philox_bits(5, 1, 2, 0).v[1]));

  // Every key/counter component matters.
  const double u = philox_uniform(7, 1, 2, 0);
  CHECK(philox_uniform(8, 1, 2, 0) != u);
  CHECK(philox_uniform(7ull | (1ull << 40), 1, 2, 0) != u);
  CHECK(philox_uniform(7, 2, 2, 0) != u);
  CHECK(philox_uniform(7, 1, 3, 0) != u);
  CHECK(philox_uniform(7, 1, 2, 1) != u);

  // Moments over 100k positions: mean 1/2, variance 1/12 (5 sigma bounds).
  const int n = 100000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = philox_uniform(42, 0, static_cast<uint32_t>(i));
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
    s += x;
    s2 += x * x;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  CHECK(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(var - 1.0 / 12) < 0.002);
}

TEST_CASE("sampler: temperature 0 is argmax with the lowest id on ties") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (uint32_t pos = 0; pos < 20; ++pos) CHECK(sample(sampling(0), logits, kNoBan, kNoIds, kNoIds, 0, pos) == 1);
  const std::vector<double> p = sampling_distribution(sampling(0), logits, kNoBan, kNoIds, kNoIds);
  CHECK(support(p) == std::vector<int>{1});
  CHECK(p[1] == 1.0);
  // Greedy ignores top-k / top-p / min-p and the seed.
  SamplingParams g = sampling(0, 99);
  g.top_k = 1;
  g.top_p = 0.1;
  g.min_p = 0.9;
  CHECK(sample(g, logits, kNoBan, kNoIds, kNoIds, 3, 4) == 1);
  // -inf and NaN are skipped.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> odd = {-std::numeric_limits<float>::infinity(), nan, -3.0f, nan};
  CHECK(sample(sampling(0), odd, kNoBan, kNoIds, kNoIds, 0, 0) == 2);
}

TEST_CASE("sampler: banned ids are never chosen, even when highest") {
  const std::vector<float> logits = {1.0f, 9.0f, 0.5f, 9.0f, 8.5f};
  const std::vector<uint8_t> banned = {0, 1, 0, 1, 0};
  CHECK(sample(sampling(0), logits, banned, kNoIds, kNoIds, 0, 0) == 4);
  const std::vector<double> p = sampling_distribution(sampling(1.0), logits, banned, kNoIds, kNoIds);
  CHECK(p[1] == 0.0);
  CHECK(p[3] == 0.0);
  for (uint32_t pos = 0; pos < 2000; ++pos) {
    const int32_t t = sample(sampling(5.0, 3), logits, banned, kNoIds, kNoIds, 1, pos);
    REQUIRE(t != 1);
    REQUIRE(t != 3);
  }
  // Every id banned is an error; all allowed logits NaN/-inf gives the lowest allowed id.
  const std::vector<uint8_t> all = {1, 1, 1, 1, 1};
  CHECK_THROWS_AS(sample(sampling(1.0), logits, all, kNoIds, kNoIds, 0, 0), InputError);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> dead = {nan, 5.0f, nan, 5.0f, -std::numeric_limits<float>::infinity()};
  CHECK(sample(sampling(1.0), dead, banned, kNoIds, kNoIds, 0, 0) == 0);
  CHECK(sample(sampling(0), dead, banned, kNoIds, kNoIds, 0, 0) == 0);
  CHECK(support(sampling_distribution(sampling(1.0), dead, banned, kNoIds, kNoIds)) == std::vector<int>{0});
}

TEST_CASE("sampler: top-k keeps the k largest and every tie with the k-th (HF rule)") {
  std::vector<double> s = {1.0, 3.0, 2.0, 2.0, 0.0};
  top_k_filter(s, 2);  // HF TopKLogitsWarper(2) on these scores keeps ids 1, 2, 3
  CHECK(s == std::vector<double>{-INFINITY, 3.0, 2.0, 2.0, -INFINITY});
  s = {1.0, 3.0, 2.0, 2.5, 0.0};
  top_k_filter(s, 3);
  CHECK(s == std::vector<double>{-INFINITY, 3.0, 2.0, 2.5, -INFINITY});
  s = {1.0, 3.0, 2.0};
  top_k_filter(s, 3);  // k >= V: no change
  CHECK(s == std::vector<double>{1.0, 3.0, 2.0});
  top_k_filter(s, 0);  // off
  CHECK(s == std::vector<double>{1.0, 3.0, 2.0});
  top_k_filter(s, 1);
  CHECK(s == std::vector<double>{-INFINITY, 3.0, -INFINITY});

  // Through the whole pipeline: exactly the top 2 survive, renormalised.
  SamplingParams p = sampling(1.0);
  p.top_k = 2;
  const std::vector<double> d = sampling_distribution(p, logits_of({0.1, 0.4, 0.2, 0.3}), kNoBan, kNoIds, kNoIds);
  CHECK(support(d) == std::vector<int>{1, 3});
  CHECK(d[1] == doctest::Approx(4.0 / 7).epsilon(1e-6));
  CHECK(d[3] == doctest::Approx(3.0 / 7).epsilon(1e-6));
}

TEST_CASE("sampler: top-p keeps the smallest prefix with mass >= top_p (HF boundary)") {
  // The values HF TopPLogitsWarper gives on these probabilities (transformers 5.x, checked):
  // 0.8 -> {0, 1}; 0.81 -> {0, 1, 2}; 0.5 -> {0}; 0.50001 -> {0, 1}; 0 -> {0}.
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  REQUIRE(0.5 + 0.3 == 0.8);  // so the boundary below is exact in fp64
  CHECK(top_p_kept(p, 0.8) == std::vector<int>{0, 1});                  // mass above id 2 is 0.8: not < 0.8
  CHECK(top_p_kept(p, std::nextafter(0.8, 1.0)) == std::vector<int>{0, 1, 2});
  CHECK(top_p_kept(p, 0.81) == std::vector<int>{0, 1, 2});
  CHECK(top_p_kept(p, 0.5) == std::vector<int>{0});
  CHECK(top_p_kept(p, 0.50001) == std::vector<int>{0, 1});
  CHECK(top_p_kept(p, 0.0) == std::vector<int>{0});  // at least one id
  CHECK(top_p_kept(p, 0.96) == std::vector<int>{0, 1, 2, 3});
  CHECK(top_p_kept(p, 1.0) == std::vector<int>{0, 1, 2, 3});
  // Unsorted ids: the order is by probability, not by id.
  CHECK(top_p_kept({0.15, 0.5, 0.05, 0.3}, 0.8) == std::vector<int>{1, 3});
  // Ties: lowest id first (HF's tie order is torch.sort's, unspecified).
  const std::vector<double> t = {0.125, 0.25, 0.125, 0.5};
  CHECK(top_p_kept(t, 0.75) == std::vector<int>{1, 3});
  CHECK(top_p_kept(t, 0.8) == std::vector<int>{0, 1, 3});
  CHECK(top_p_kept(t, 0.9) == std::vector<int>{0, 1, 2, 3});

  // Through the pipeline (away from the boundary, where fp32 log/exp rounding cannot matter).
  SamplingParams s = sampling(1.0);
  s.top_p = 0.79;
  std::vector<double> d = sampling_distribution(s, logits_of(p), kNoBan, kNoIds, kNoIds);
  CHECK(support(d) == std::vector<int>{0, 1});
  CHECK(d[0] == doctest::Approx(0.5 / 0.8).epsilon(1e-6));
  s.top_p = 0.81;
  d = sampling_distribution(s, logits_of(p), kNoBan, kNoIds, kNoIds);
  CHECK(support(d) == std::vector<int>{0, 1, 2});
  CHECK(d[2] == doctest::Approx(0.15 / 0.95).epsilon(1e-6));
}

TEST_CASE("sampler: min-p keeps p >= min_p * p_max (HF boundary)") {
  const std::vector<double> p = {0.0625, 0.5, 0.125, 0.25, 0.0625};
  CHECK(min_p_kept(p, 0.25) == std::vector<int>{1, 2, 3});  // 0.125 == 0.25 * 0.5 is kept
  CHECK(min_p_kept(p, std::nextafter(0.25, 1.0)) == std::vector<int>{1, 3});
  CHECK(min_p_kept(p, 0.0) == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(min_p_kept(p, 1.0) == std::vector<int>{1});
  // Relative to the max, so renormalisation before it does not matter.
  CHECK(min_p_kept({0.03125, 0.25, 0.0625, 0.125, 0.03125}, 0.25) == std::vector<int>{1, 2, 3});
}

TEST_CASE("sampler: order of operations is penalties, temperature, top-k, top-p, min-p") {
  // top-k before top-p: after top_k = 2 the distribution is (4/7, 3/7), so top_p = 0.5 keeps one
  // id; top-p on the full distribution (0.4, 0.3, 0.2, 0.1) would keep two.
  SamplingParams s = sampling(1.0);
  s.top_k = 2;
  s.top_p = 0.5;
  CHECK(support(sampling_distribution(s, logits_of({0.4, 0.3, 0.2, 0.1}), kNoBan, kNoIds, kNoIds)) ==
        std::vector<int>{0});

  // min-p after temperature: p = (0.5, 0.3, 0.2) at T = 1 with min_p = 0.5 keeps {0, 1} (0.2 < 0.25);
  // T = 2 flattens to ratios sqrt(0.6), sqrt(0.4) ≈ 0.77, 0.63 of the max, so all three stay.
  SamplingParams m = sampling(1.0);
  m.min_p = 0.5;
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  CHECK(support(sampling_distribution(m, l, kNoBan, kNoIds, kNoIds)) == std::vector<int>{0, 1});
  m.temperature = 2.0;
  CHECK(support(sampling_distribution(m, l, kNoBan, kNoIds, kNoIds)) == std::vector<int>{0, 1, 2});

  // Temperature itself: p ∝ exp(x / T).
  const std::vector<float> x = {1.0f, 0.0f, -1.0f};
  const std::vector<double> d = sampling_distribution(sampling(0.5), x, kNoBan, kNoIds, kNoIds);
  const double z = std::exp(2.0) + 1.0 + std::exp(-2.0);
  CHECK(d[0] == doctest::Approx(std::exp(2.0) / z).epsilon(1e-12));
  CHECK(d[2] == doctest::Approx(std::exp(-2.0) / z).epsilon(1e-12));

  // Penalties before temperature and greedy: with a repetition penalty of 4, id 0 (logit 2, seen)
  // becomes 0.5 and loses the argmax to id 1 (logit 1).
  SamplingParams r = sampling(0);
  r.repetition_penalty = 4.0;
  const std::vector<int32_t> seen = {0};
  CHECK(sample(r, std::vector<float>{2.0f, 1.0f}, kNoBan, seen, kNoIds, 0, 0) == 1);
}

TEST_CASE("sampler: repetition penalty divides positive and multiplies negative logits, once per id") {
  SamplingParams s = sampling(1.0);
  s.repetition_penalty = 2.0;
  const std::vector<float> logits = {2.0f, -2.0f, 0.0f, 1.0f, 3.0f};
  const std::vector<int32_t> prompt = {0, 1, 0, 7, -1};  // 7 and -1 are outside the vocab: ignored
  const std::vector<int32_t> generated = {2, 0, 1};
  // HF RepetitionPenaltyLogitsProcessor(2.0) gives [1, -4, 0, ...] for the seen ids.
  CHECK(penalized_logits(s, logits, kNoBan, prompt, generated) == std::vector<double>{1.0, -4.0, 0.0, 1.0, 3.0});
  // Prompt ids count as well as generated ones.
  CHECK(penalized_logits(s, logits, kNoBan, kNoIds, std::vector<int32_t>{4}) ==
        std::vector<double>{2.0, -2.0, 0.0, 1.0, 1.5});
  CHECK(penalized_logits(s, logits, kNoBan, std::vector<int32_t>{4}, kNoIds) ==
        std::vector<double>{2.0, -2.0, 0.0, 1.0, 1.5});
  // A penalty < 1 rewards.
  s.repetition_penalty = 0.5;
  CHECK(penalized_logits(s, logits, kNoBan, std::vector<int32_t>{0, 1}, kNoIds) ==
        std::vector<double>{4.0, -1.0, 0.0, 1.0, 3.0});
  // Banned ids stay removed.
  const std::vector<uint8_t> banned = {1, 0, 0, 0, 0};
  CHECK(penalized_logits(s, logits, banned, std::vector<int32_t>{0}, kNoIds)[0] == -INFINITY);
}

TEST_CASE("sampler: presence penalty subtracts once per generated id, never for prompt-only ids") {
  SamplingParams s = sampling(0);
  s.presence_penalty = 0.25;
  const std::vector<float> logits = {1.0f, 0.875f, 0.5f, -1.0f};
  const std::vector<int32_t> prompt = {1, 2};
  const std::vector<int32_t> generated = {0, 0, 0, 3};
  CHECK(penalized_logits(s, logits, kNoBan, prompt, generated) == std::vector<double>{0.75, 0.875, 0.5, -1.25});
  CHECK(sample(s, logits, kNoBan, prompt, generated, 0, 0) == 1);
  CHECK(sample(s, logits, kNoBan, prompt, kNoIds, 0, 0) == 0);  // prompt ids are not penalised
  // Both penalties: repetition first (vLLM's order), then presence.
  s.repetition_penalty = 2.0;
  CHECK(penalized_logits(s, logits, kNoBan, prompt, generated) == std::vector<double>{0.25, 0.4375, 0.25, -2.25});
}

TEST_CASE("sampler: inverse CDF in ascending id order") {
  const std::vector<double> w = {0.0, 0.5, 0.0, 0.25, 0.25};
  CHECK(inverse_cdf(w, 0.0) == 1);
  CHECK(inverse_cdf(w, std::nextafter(0.5, 0.0)) == 1);
  CHECK(inverse_cdf(w, 0.5) == 3);
  CHECK(inverse_cdf(w, 0.75) == 4);
  CHECK(inverse_cdf(w, 1.0 - std::ldexp(1.0, -53)) == 4);
  // Unnormalised weights give the same answer.
  CHECK(inverse_cdf(std::vector<double>{0.0, 2.0, 0.0, 1.0, 1.0}, 0.5) == 3);
  CHECK(inverse_cdf(std::vector<double>{0.0, 0.0}, 0.3) == -1);
  // Zero-weight ids are never returned, whatever u.
  for (int i = 0; i < 1000; ++i) {
    const int32_t t = inverse_cdf(w, philox_uniform(9, 0, static_cast<uint32_t>(i)));
    REQUIRE((t == 1 || t == 3 || t == 4));
  }
}

TEST_CASE("sampler: same seed gives the same tokens, another seed or case different ones") {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * i));
  SamplingParams s;
  s.temperature = 1.0;
  s.top_k = 40;
  s.top_p = 0.95;
  s.min_p = 0.01;
  auto run = [&](uint64_t seed, uint32_t case_index) {
    s.seed = seed;
    std::vector<int32_t> out;
    for (uint32_t pos = 100; pos < 164; ++pos) out.push_back(sample(s, logits, kNoBan, kNoIds, kNoIds, case_index, pos));
    return out;
  };
  const std::vector<int32_t> a = run(1234, 0);
  CHECK(run(1234, 0) == a);
  auto differing = [](const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
    int n = 0;
    for (size_t i = 0; i < x.size(); ++i) n += x[i] != y[i];
    return n;
  };
  CHECK(differing(a, run(1235, 0)) > 32);
  CHECK(differing(a, run(1234, 1)) > 32);
  CHECK(differing(a, run(1234ull << 32, 0)) > 32);
}

TEST_CASE("sampler: empirical frequencies over many positions match the distribution") {
  // Six ids, temperature 0.9, top_k 5 (id 1 is dropped); 20000 draws at positions 0..19999.
  const std::vector<float> logits = {0.3f, -1.2f, 2.0f, 0.7f, -0.4f, 1.1f};
  SamplingParams s = sampling(0.9, 12345);
  s.top_k = 5;
  const std::vector<double> p = sampling_distribution(s, logits, kNoBan, kNoIds, kNoIds);
  REQUIRE(p[1] == 0.0);
  double total = 0;
  for (double v : p) total += v;
  CHECK(total == doctest::Approx(1.0).epsilon(1e-15));
  const int n = 20000;
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(sample(s, logits, kNoBan, kNoIds, kNoIds, 7, static_cast<uint32_t>(i)))];
  CHECK(count[1] == 0);
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    const double e = n * p[i];
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  // 4 degrees of freedom: the 0.999 quantile is 18.47. The seed is fixed, so this never flakes.
  CAPTURE(chi2);
  CHECK(chi2 < 18.47);
}

TEST_CASE("sampler: coupled draws: a small perturbation of the logits changes few tokens") {
  // The point of drawing the same u on both paths: the tokens differ only where the distributions
  // do, so the fraction that changes is about the total variation distance, not 1 - sum p^2.
  const size_t vocab = 64;
  std::vector<float> a(vocab), b(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    a[i] = static_cast<float>(2.0 * std::sin(1.3 * i));
    b[i] = a[i] + static_cast<float>(1e-3 * std::cos(2.9 * i));  // "bf16-like" noise
  }
  const SamplingParams s = sampling(1.0, 77);
  int changed = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const uint32_t pos = static_cast<uint32_t>(i);
    changed += sample(s, a, kNoBan, kNoIds, kNoIds, 0, pos) != sample(s, b, kNoBan, kNoIds, kNoIds, 0, pos);
  }
  // Total variation here is below 1e-3; independent draws would differ about 90% of the time.
  CAPTURE(changed);
  CHECK(changed <= 10);
}

TEST_CASE("sampler: invalid parameters are input errors") {
  const std::vector<float> logits = {0.0f, 1.0f};
  auto bad = [&](SamplingParams p) {
    CHECK_THROWS_AS(sample(p, logits, kNoBan, kNoIds, kNoIds, 0, 0), InputError);
  };
  SamplingParams p;
  p.temperature = -1;
  bad(p);
  p = {};
  p.temperature = std::numeric_limits<double>::quiet_NaN();
  bad(p);
  p = {};
  p.top_k = -1;
  bad(p);
  p = {};
  p.top_p = 1.5;
  bad(p);
  p = {};
  p.min_p = -0.1;
  bad(p);
  p = {};
  p.repetition_penalty = 0;
  bad(p);
  p = {};
  p.presence_penalty = std::numeric_limits<double>::infinity();
  bad(p);
  p = {};
  CHECK_NOTHROW(validate(p));
  CHECK_THROWS_WITH_AS(validate(SamplingParams{.top_p = 2}), doctest::Contains("top_p"), InputError);
}
