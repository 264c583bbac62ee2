// Tests for src/judge/metrics.*: every metric of metrics.md §1-§6 on small inputs whose values are
// computed by hand (the arithmetic is in the comments), the edge cases issue 5 names (empty output,
// one token, all-equal tokens, T smaller than n, NaN in the tested tensor), each degenerate rule
// firing alone, and brute-force cross-checks of the suffix-array and Z-function algorithms.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "judge/metrics.h"
#include "util/error.h"

using namespace degen;
namespace m = degen::metrics;
using doctest::Approx;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();

std::vector<int32_t> repeat(const std::vector<int32_t>& block, int times) {
  std::vector<int32_t> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), block.begin(), block.end());
  return out;
}
std::vector<int32_t> range(int32_t from, int32_t count) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(from + i);
  return out;
}
std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// O(T^3) longest substring occurring at two different starts (overlap allowed).
int64_t brute_lrs(const std::vector<int32_t>& x) {
  int64_t best = 0, T = static_cast<int64_t>(x.size());
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) {
      int64_t l = 0;
      while (j + l < T && x[i + l] == x[j + l]) ++l;
      best = std::max(best, l);
    }
  return best;
}

// Straight from the definition: for p = 1.., the longest p-periodic suffix, scanned directly.
std::optional<m::TailPeriod> brute_tail(const std::vector<int32_t>& x, int64_t min_len) {
  int64_t T = static_cast<int64_t>(x.size());
  for (int64_t p = 1; 2 * p <= T; ++p) {
    int64_t L = p;
    while (L < T && x[T - 1 - L] == x[T - 1 - L + p]) ++L;
    int64_t k = L / p;
    if (k >= 2 && k * p >= min_len) return m::TailPeriod{p, k, T - L};
  }
  return std::nullopt;
}

}  // namespace

// ==== §1 ====

TEST_CASE("metrics: tensor error on a 3-element example") {
  // a = [1,2,3], r = [1,2,4], d = a - r = [0,0,-1]
  std::vector<float> a{1, 2, 3}, r{1, 2, 4};
  m::TensorError e = m::tensor_error(a, r);
  CHECK(e.n == 3);
  CHECK(e.n_compared == 3);
  CHECK(e.nonfinite == 0);
  CHECK(e.passes_nonfinite());
  // nmse = Σd² / Σr² = 1 / (1+4+16) = 1/21
  CHECK(e.nmse == Approx(1.0 / 21).epsilon(1e-15));
  CHECK(e.rel_l2 == Approx(std::sqrt(1.0 / 21)).epsilon(1e-15));  // 0.2182178902
  // nmse_var: mean(d²) = 1/3; mean r = 7/3, var r = ((4/3)² + (1/3)² + (5/3)²)/3 = (42/9)/3 = 14/9;
  // (1/3)/(14/9) = 3/14
  CHECK(e.nmse_var == Approx(3.0 / 14).epsilon(1e-15));
  // Σar = 1+4+12 = 17, Σa² = 14, Σr² = 21: cos_dist = 1 - 34/35 = 1/35; cosine = 17/√(14·21) = 17/√294
  CHECK(e.cos_dist == Approx(1.0 / 35).epsilon(1e-13));
  CHECK(e.cosine == Approx(17.0 / std::sqrt(294.0)).epsilon(1e-15));  // 0.99146
  CHECK(e.max_abs == 1.0);
  CHECK(e.argmax_abs == 2);
  // min_tol: atol-only = max|d| = 1; rtol-only = max |d|/|r| = 1/4
  CHECK(e.min_atol == 1.0);
  CHECK(e.min_rtol == 0.25);
  // frontier: atol(rtol) = max(0, 0 - rtol·1, 0 - rtol·2, 1 - rtol·4): at 0.1 → 0.6, at 0.25 → 0
  std::vector<double> ad{1, 2, 3}, rd{1, 2, 4};
  CHECK(m::min_atol_at_rtol(ad, rd, 0.1) == Approx(0.6).epsilon(1e-15));
  CHECK(m::min_atol_at_rtol(ad, rd, 0.25) == 0.0);
  // the double overload gives the same numbers
  CHECK(m::tensor_error(ad, rd).nmse == e.nmse);
  CHECK(m::nmse(a, r) == e.nmse);

  nlohmann::json j = e.to_json();
  CHECK(j["argmax_abs"] == 2);
  CHECK(j["min_tol"]["rtol"] == 0.25);
  CHECK(j.contains("nmse_var"));
  CHECK(j.contains("cos_dist"));
}

TEST_CASE("metrics: tensor error edge cases") {
  SUBCASE("empty tensors are equal") {
    std::vector<float> a, r;
    m::TensorError e = m::tensor_error(a, r);
    CHECK(e.n == 0);
    CHECK(e.nmse == 0);
    CHECK(e.nmse_var == 0);
    CHECK(e.cos_dist == 0);
    CHECK(e.cosine == 1);
    CHECK(e.max_abs == 0);
    CHECK(e.argmax_abs == -1);
    CHECK(e.to_json()["argmax_abs"].is_null());
  }
  SUBCASE("reference all zero") {
    std::vector<float> z{0, 0}, a{0, 1};
    // Σr² = 0 and Σd² = 1: nmse = inf; r = 0 with d ≠ 0: rtol-only = inf; one norm zero: cosine 0
    m::TensorError e = m::tensor_error(a, z);
    CHECK(e.nmse == kInf);
    CHECK(e.rel_l2 == kInf);
    CHECK(e.nmse_var == kInf);
    CHECK(e.min_rtol == kInf);
    CHECK(e.min_atol == 1);
    CHECK(e.cosine == 0);
    CHECK(e.cos_dist == 1);  // 1 - 0/1
    // both all zero: every error 0
    m::TensorError e0 = m::tensor_error(z, z);
    CHECK(e0.nmse == 0);
    CHECK(e0.min_rtol == 0);
    CHECK(e0.cosine == 1);
    CHECK(e0.argmax_abs == 0);  // max |d| = 0, first index
  }
  SUBCASE("NaN in the tested tensor fails first") {
    std::vector<float> a{1, kNaNF, 3, kInfF}, r{1, 2, 3, 4};
    m::TensorError e = m::tensor_error(a, r);
    CHECK(e.nonfinite == 2);
    CHECK_FALSE(e.passes_nonfinite());
    CHECK(e.n_compared == 2);
    CHECK(e.nmse == 0);  // over the two finite pairs, which agree: NOT a pass
  }
  SUBCASE("non-finite reference values") {
    std::vector<float> r{kInfF, 1}, same{kInfF, 1}, other{-kInfF, 1};
    m::TensorError e = m::tensor_error(same, r);
    CHECK(e.ref_nonfinite == 1);
    CHECK(e.ref_nonfinite_mismatch == 0);
    CHECK(e.passes_nonfinite());
    CHECK(e.nmse == 0);
    m::TensorError e2 = m::tensor_error(other, r);
    CHECK(e2.ref_nonfinite_mismatch == 1);
    CHECK_FALSE(e2.passes_nonfinite());
  }
  SUBCASE("size mismatch throws") {
    std::vector<float> a{1, 2}, r{1};
    CHECK_THROWS_AS(m::tensor_error(a, r), std::invalid_argument);
  }
}

TEST_CASE("metrics: non-finite numbers in JSON") {
  CHECK(m::json_number(1.5) == 1.5);
  CHECK(m::json_number(kInf) == "inf");
  CHECK(m::json_number(-kInf) == "-inf");
  CHECK(m::json_number(std::nan("")) == "nan");
  CHECK(m::json_number(std::optional<double>{}).is_null());
  CHECK(m::number_from_json(m::json_number(kInf)) == kInf);
  CHECK(m::number_from_json(m::json_number(-kInf)) == -kInf);
  CHECK(std::isnan(m::number_from_json("nan")));
  CHECK(m::number_from_json(2.0) == 2.0);
  CHECK_THROWS_AS(m::number_from_json("infinity"), std::invalid_argument);
  // A TensorError with inf survives a dump/parse round trip.
  std::vector<float> z{0}, a{1};
  nlohmann::json j = nlohmann::json::parse(m::tensor_error(a, z).to_json().dump());
  CHECK(j["nmse"] == "inf");
  CHECK(m::number_from_json(j["nmse"]) == kInf);
}

TEST_CASE("metrics: noise floor rule") {
  // floor_ratio = err / floor
  CHECK(m::floor_ratio(0.3, 0.1) == Approx(3.0));
  CHECK(m::floor_ratio(0, 0) == 0);
  CHECK(m::floor_ratio(1e-9, 0) == kInf);
  // pass iff err <= 3·floor + 1e-12
  CHECK(m::floor_pass(0.3, 0.1));
  CHECK_FALSE(m::floor_pass(0.31, 0.1));
  CHECK(m::floor_pass(1e-13, 0.0));  // eps keeps a zero floor from failing round-off
  CHECK_FALSE(m::floor_pass(1e-9, 0.0));
  CHECK_FALSE(m::floor_pass(std::nan(""), 0.1));
  CHECK(m::floor_pass(0.5, 0.1, m::FloorRule{5.0, 0.0}));
  // layers: 0.1 ≤ 0.3 ok, 0.2 ≤ 0.3 ok, 0.5 > 0.3 breaks (layer 2), 0.9 breaks too but later
  std::vector<double> err{0.1, 0.2, 0.5, 0.9}, floor{0.1, 0.1, 0.1, 0.1};
  CHECK(m::first_floor_break(err, floor) == std::optional<int64_t>(2));
  std::vector<double> ok{0.1, 0.1, 0.1, 0.1};
  CHECK_FALSE(m::first_floor_break(ok, floor).has_value());
  std::vector<double> short_floor{0.1};
  CHECK_THROWS_AS(m::first_floor_break(err, short_floor), std::invalid_argument);
}

// ==== §2 ====

TEST_CASE("metrics: KLD of identical distributions is 0") {
  std::vector<float> l{1.5f, -2.0f, 0.25f, 3.0f, -kInfF};
  m::LogitPosition p = m::compare_logits(l, l, 3);
  CHECK(p.kld == 0.0);
  CHECK(p.top1_agree);
  CHECK(p.golden_top1 == 3);
  CHECK(p.topk == 5);  // k' = min(10, 5 real ids)
  CHECK(p.topk_overlap == 1.0);
  CHECK(*p.dp == 0.0);
  CHECK(*p.logit_nmse == 0.0);
}

TEST_CASE("metrics: KLD of a 2-token example") {
  // golden [0,0] → q = (1/2, 1/2); test [1,0] → p = (e/(1+e), 1/(1+e)) = (0.7310585786, 0.2689414214)
  // KL(q‖p) = ½ ln(½/p0) + ½ ln(½/p1) = ½ ln(¼ / (p0 p1)) = ½ ln(¼ (1+e)²/e)
  //         = ½ (2 ln(1+e) − 1 − ln 4) = ½ (2.626523375 − 1 − 1.386294361) = 0.1201145070
  std::vector<float> golden{0, 0}, test{1, 0};
  m::LogitPosition p = m::compare_logits(test, golden, 0);
  CHECK(p.kld == Approx(0.12011450695827752).epsilon(1e-14));
  // both argmax: golden tie → lowest id 0; test 0
  CHECK(p.top1_agree);
  // dp = p(0) − q(0) = 0.7310585786 − 0.5
  CHECK(*p.dp == Approx(0.2310585786300049).epsilon(1e-14));
  // logit_nmse = Σ(t−g)² / Σg² with Σg² = 0, Σd² = 1 → inf
  CHECK(*p.logit_nmse == kInf);
  // no next token → no dp
  CHECK_FALSE(m::compare_logits(test, golden, -1).dp.has_value());
}

TEST_CASE("metrics: KLD with -inf logits, padding mask and undefined distributions") {
  std::vector<float> g1{0, -kInfF}, t1{0, 0};
  // q = (1, 0), p = (½, ½): only the q_0 term: 1·ln(1/½) = ln 2; q_1 = 0 contributes 0
  CHECK(m::compare_logits(t1, g1, 0).kld == Approx(std::log(2.0)).epsilon(1e-15));
  // q = (½, ½), p = (1, 0): q_1 > 0 with p_1 = 0 → +inf
  CHECK(m::compare_logits(g1, t1, 0).kld == kInf);
  CHECK(*m::compare_logits(g1, t1, 0).logit_nmse == kInf);  // a -inf test logit where the golden is 0
  // both (1, 0): 0
  CHECK(m::compare_logits(g1, g1, 0).kld == 0.0);

  // padding id 2 excluded: the real distributions are equal, whatever id 2 holds
  std::vector<float> g{0, 0, -5}, t{0, 0, 100};
  std::vector<uint8_t> pad{0, 0, 1};
  m::LogitPosition p = m::compare_logits(t, g, 1, pad);
  CHECK(p.kld == 0.0);
  CHECK(p.test_top1 == 0);  // not 2
  CHECK(p.topk == 2);
  CHECK(*p.logit_nmse == 0.0);
  CHECK_THROWS_AS(m::compare_logits(t, g, 2, pad), std::invalid_argument);  // next is padding

  // NaN in the test logits: the worst case, not an exception
  std::vector<float> tn{0, kNaNF, 0};
  m::LogitPosition pn = m::compare_logits(tn, g, 0);
  CHECK(pn.kld == kInf);
  CHECK(pn.test_nonfinite == 1);
  CHECK_FALSE(pn.top1_agree);
  CHECK(pn.test_top1 == -1);
  // dp = p(0) − q(0) with p undefined (taken as 0): −q(0) = −1/(1 + 1 + e⁻⁵) (no mask here)
  CHECK(*pn.dp == Approx(-1.0 / (2.0 + std::exp(-5.0))).epsilon(1e-7));
  // NaN in the golden: invalid
  CHECK_THROWS_AS(m::compare_logits(g, tn, 0), std::invalid_argument);
  std::vector<float> short_row{0, 0};
  CHECK_THROWS_AS(m::compare_logits(short_row, g, 0), std::invalid_argument);
}

TEST_CASE("metrics: top-k overlap") {
  // golden [4,3,2,1]: top2 {0,1}; test [4,1,2,3]: top2 {0,3}; overlap {0} → 1/2
  std::vector<float> g{4, 3, 2, 1}, t{4, 1, 2, 3};
  m::LogitPosition p = m::compare_logits(t, g, 0, {}, 2);
  CHECK(p.topk == 2);
  CHECK(p.topk_overlap == 0.5);
  CHECK(p.top1_agree);
  // k = 3: golden {0,1,2}, test {0,3,2} → {0,2} → 2/3
  CHECK(m::compare_logits(t, g, 0, {}, 3).topk_overlap == Approx(2.0 / 3));
  // ties go to the lowest id: golden [1,1,1,0] top2 {0,1}; test [0,1,1,1] top1 = 1, top2 {1,2} → 1/2
  std::vector<float> gt{1, 1, 1, 0}, tt{0, 1, 1, 1};
  m::LogitPosition pt = m::compare_logits(tt, gt, 0, {}, 2);
  CHECK(pt.golden_top1 == 0);
  CHECK(pt.test_top1 == 1);
  CHECK(pt.topk_overlap == 0.5);
  std::vector<uint8_t> bad_mask{0, 0};
  CHECK_THROWS_AS(m::compare_logits(tt, gt, 0, bad_mask), std::invalid_argument);
}

TEST_CASE("metrics: kld_topk from a top-K golden record") {
  // golden q = (½, ¼, ¼) from logits [ln 2, 0, 0]; test p = (¼, ½, ¼) from logits [0, ln 2, 0].
  std::vector<float> golden{std::log(2.0f), 0, 0}, test{0, std::log(2.0f), 0};
  // full KLD = ½ ln(½/¼) + ¼ ln(¼/½) + ¼ ln(¼/¼) = ½ ln 2 − ¼ ln 2 = ¼ ln 2 = 0.1732867951
  m::LogitPosition full = m::compare_logits(test, golden, 0);
  CHECK(full.kld == Approx(0.25 * std::log(2.0)).epsilon(1e-7));
  // K = 1 (id 0, log q = ln ½): stored term ½ ln(½/¼) = ½ ln 2; tail: Q = ½ against P = ¾:
  // ½ ln(½/¾) = ½ ln(2/3). Sum = ½ ln(4/3) = 0.1438410362 ≤ 0.1732867951 (log-sum inequality)
  double lse = std::log(4.0);  // log(2 + 1 + 1)
  std::vector<int32_t> ids{0};
  std::vector<float> lq{std::log(0.5f)};
  m::LogitPosition k1 = m::compare_logits_topk(test, m::GoldenTopK{ids, lq, lse}, 0);
  CHECK(k1.topk_bound);
  CHECK(k1.kld == Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-7));
  CHECK(k1.kld <= full.kld);
  CHECK(k1.golden_top1 == 0);
  CHECK(k1.test_top1 == 1);
  CHECK_FALSE(k1.top1_agree);
  CHECK(k1.topk == 1);
  CHECK(*k1.dp == Approx(0.25 - 0.5).epsilon(1e-7));         // p(0) − q(0)
  CHECK_FALSE(m::compare_logits_topk(test, m::GoldenTopK{ids, lq, lse}, 1).dp.has_value());  // q(1) unknown
  // logit_nmse_topk over id 0: golden logit ln ½ + ln 4 = ln 2, test 0 → (ln 2)² / (ln 2)² = 1
  CHECK(*k1.logit_nmse_topk == Approx(1.0).epsilon(1e-6));
  CHECK(k1.to_json().contains("kld_topk"));
  CHECK_FALSE(k1.to_json().contains("kld"));

  // K = V: equal to the full KLD (up to the fp32 rounding of the stored log-probs)
  std::vector<int32_t> all{2, 0, 1};  // any order
  std::vector<float> lq_all{std::log(0.25f), std::log(0.5f), std::log(0.25f)};
  m::LogitPosition kv = m::compare_logits_topk(test, m::GoldenTopK{all, lq_all, lse}, 0);
  CHECK(kv.kld == Approx(full.kld).epsilon(1e-6));

  // invalid records
  std::vector<int32_t> dup{0, 0};
  std::vector<float> lq2{std::log(0.5f), std::log(0.5f)};
  CHECK_THROWS_AS(m::compare_logits_topk(test, m::GoldenTopK{dup, lq2, lse}, 0), std::invalid_argument);
  std::vector<int32_t> oob{7};
  CHECK_THROWS_AS(m::compare_logits_topk(test, m::GoldenTopK{oob, lq, lse}, 0), std::invalid_argument);
}

TEST_CASE("metrics: kld_topk is a lower bound, equal at K = V (random logits)") {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int V = 50;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> g(V), t(V);
    for (int i = 0; i < V; ++i) {
      g[i] = nd(rng);
      t[i] = g[i] + 0.5f * nd(rng);
    }
    m::LogitPosition full = m::compare_logits(t, g, 0);
    std::vector<double> lq = m::log_softmax(g);
    std::vector<int32_t> order(V);
    for (int i = 0; i < V; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lq[a] > lq[b]; });
    double lse = g[0] - lq[0];
    for (int K : {1, 5, 20, V}) {
      std::vector<int32_t> ids(order.begin(), order.begin() + K);
      std::vector<float> lqk;
      for (int32_t id : ids) lqk.push_back(static_cast<float>(lq[id]));
      m::LogitPosition k = m::compare_logits_topk(t, m::GoldenTopK{ids, lqk, lse}, -1);
      CHECK(k.kld <= full.kld + 1e-6);
      if (K == V) CHECK(k.kld == Approx(full.kld).epsilon(1e-5));
      if (K >= 10) CHECK(k.topk_overlap == full.topk_overlap);
      CHECK(k.top1_agree == full.top1_agree);
    }
  }
}

// Issue 40: a dump's logits plus 1e20 gave KLD -5.53 and the verdict good. log-softmax took
// x − (m + ln Σexp(x − m)): beside m = 1e20 the sum rounds away, so every id at the maximum got p = 1.
TEST_CASE("metrics: log-softmax keeps ln Σexp apart from a huge maximum") {
  std::vector<float> big{1e20f, 1e20f, 1e20f, 1e20f};
  for (double lp : m::log_softmax(big)) CHECK(lp == Approx(-std::log(4.0)).epsilon(1e-15));
  // Softmax depends on differences only: shifted by 30000 (inside kMaxLogitMagnitude; integers, so
  // exact in float32) the KLD against the unshifted golden is 0.
  std::vector<float> g{3, 1, 0, -2}, t{30003, 30001, 30000, 29998};
  m::LogitPosition p = m::compare_logits(t, g, 0);
  CHECK_FALSE(p.test_out_of_range);
  CHECK(std::abs(p.kld) < 1e-15);
  CHECK(p.top1_agree);
}

TEST_CASE("metrics: a test distribution beyond kMaxLogitMagnitude is the worst case, not a number") {
  std::vector<float> g{3, 1, 0, -2};
  for (float shift : {1e20f, -1e20f, 3e38f, 40000.0f}) {
    INFO(shift);
    std::vector<float> t = g;
    for (float& x : t) x += shift;
    m::LogitPosition p = m::compare_logits(t, g, 0);
    CHECK(p.test_out_of_range);
    CHECK(p.test_max_logit == Approx(static_cast<double>(3.0f + shift)));
    CHECK(p.kld == kInf);
    CHECK_FALSE(p.top1_agree);
    CHECK(p.test_top1 == -1);
    CHECK(*p.dp < 0);
    CHECK(p.to_json().at("test_out_of_range") == true);
    // the same from a top-K record
    std::vector<int32_t> ids{0, 1};
    std::vector<double> lq = m::log_softmax(g);
    std::vector<float> lqk{static_cast<float>(lq[0]), static_cast<float>(lq[1])};
    m::LogitPosition k = m::compare_logits_topk(t, m::GoldenTopK{ids, lqk, 3.0 - lq[0]}, 0);
    CHECK(k.test_out_of_range);
    CHECK(k.kld == kInf);
  }
  // At the bound it is still a distribution; far below the maximum is only probability 0.
  std::vector<float> edge{32768.0f, 32767.0f, -1e30f, -3e38f};
  m::LogitPosition e = m::compare_logits(edge, g, 0);
  CHECK_FALSE(e.test_out_of_range);
  CHECK(std::isfinite(e.kld));
  CHECK(e.kld >= 0);
}

TEST_CASE("metrics: a KLD below 0 beyond rounding is an input error, never a verdict") {
  // K = V = 2 stored ids whose probabilities sum to ½ (an inconsistent record), test p = (½, ½):
  // kld = 2 · ¼ · (ln ¼ − ln ½) = −½ ln 2.
  std::vector<float> t{0, 0};
  std::vector<int32_t> ids{0, 1};
  std::vector<float> half{std::log(0.25f), std::log(0.25f)};
  CHECK_THROWS_WITH_AS(m::compare_logits_topk(t, m::GoldenTopK{ids, half, 0.0}, 0),
                       doctest::Contains("below 0 by more than rounding"), InputError);
  CHECK_THROWS_WITH_AS(m::compare_logits_topk(t, m::GoldenTopK{ids, half, 0.0}, 0),
                       doctest::Contains("the golden probabilities sum to 0.5"), InputError);
  // Rounding is not an error: the same with log-probs off by a few fp32 ulps (sum 1 − 1.2e-7).
  std::vector<float> near{std::nextafter(std::log(0.5f), -1.0f), std::nextafter(std::log(0.5f), -1.0f)};
  m::LogitPosition k = m::compare_logits_topk(t, m::GoldenTopK{ids, near, 0.0}, 0);
  CHECK(k.kld < 0);
  CHECK(k.kld > -m::kKldRoundoff);
  // With a tail (K < V) the tail bucket takes 1 − Σq: never negative beyond rounding.
  std::vector<float> t3{0, 0, 0};
  std::vector<int32_t> one{0};
  std::vector<float> lq1{std::log(0.25f)};
  CHECK(m::compare_logits_topk(t3, m::GoldenTopK{one, lq1, 0.0}, 0).kld >= 0);
}

TEST_CASE("metrics: percentiles by linear interpolation") {
  // [1,2,3,4,5]: h = f·4; p90 → h = 3.6 → 4 + 0.6 = 4.6; p10 → h = 0.4 → 1.4; p99.9 → 3.996 → 4.996
  std::vector<double> v{5, 3, 1, 4, 2};  // unsorted on purpose
  m::Percentiles p = m::percentiles(v);
  CHECK(p.max == 5);
  CHECK(p.p99_9 == Approx(4.996));
  CHECK(p.p99 == Approx(4.96));
  CHECK(p.p95 == Approx(4.8));
  CHECK(p.p90 == Approx(4.6));
  CHECK(p.median == 3);
  CHECK(p.p10 == Approx(1.4));
  CHECK(p.p5 == Approx(1.2));
  CHECK(p.p1 == Approx(1.04));
  CHECK(p.p0_1 == Approx(1.004));
  CHECK(p.min == 1);
  // even count: median = mean of the two middle values: [1,2,3,4] → 2.5
  std::vector<double> even{1, 2, 3, 4};
  CHECK(m::percentile(even, 0.5) == 2.5);
  // one element: every percentile is it
  std::vector<double> one{7};
  CHECK(m::percentiles(one).p0_1 == 7);
  // an infinite neighbour: fraction 0 gives the finite value, not NaN
  std::vector<double> inf_last{1, kInf};
  CHECK(m::percentile(inf_last, 0.0) == 1);
  CHECK(m::percentile(inf_last, 0.5) == kInf);
  std::vector<double> none;
  CHECK_THROWS_AS(m::percentiles(none), std::invalid_argument);
}

TEST_CASE("metrics: mean and uncertainty, llama.cpp summary") {
  // [1,2,3,4]: mean 2.5; Σ(x−m)² = 2.25+0.25+0.25+2.25 = 5; √(5/(4·3)) = 0.6454972244
  std::vector<double> v{1, 2, 3, 4};
  m::MeanErr me = m::mean_and_uncertainty(v);
  CHECK(me.value == 2.5);
  CHECK(me.uncertainty == Approx(0.6454972243679028).epsilon(1e-14));
  std::vector<double> one{3};
  CHECK(m::mean_and_uncertainty(one).uncertainty == 0);

  // positions: kld (0, 0.1, 0.2), top1 (yes, yes, no), dp (0.1, −0.1, 0.2), one position without dp
  std::vector<m::LogitPosition> pos(4);
  pos[0].kld = 0.0, pos[0].top1_agree = true, pos[0].dp = 0.1;
  pos[1].kld = 0.1, pos[1].top1_agree = true, pos[1].dp = -0.1;
  pos[2].kld = 0.2, pos[2].top1_agree = false, pos[2].dp = 0.2;
  pos[3].kld = 0.1, pos[3].top1_agree = true;  // no next token
  m::LogitSummary s = m::summarize_logits(pos);
  CHECK(s.n == 4);
  // kld mean (0+0.1+0.2+0.1)/4 = 0.1; Σ(x−m)² = 0.01+0+0.01+0 = 0.02; √(0.02/(4·3)) = 0.0408248290
  CHECK(s.kld_mean.value == Approx(0.1).epsilon(1e-14));
  CHECK(s.kld_mean.uncertainty == Approx(std::sqrt(0.02 / 12)).epsilon(1e-12));
  CHECK(s.kld.max == Approx(0.2));
  CHECK(s.kld.median == Approx(0.1));  // sorted [0, 0.1, 0.1, 0.2]
  // same top p = 3/4 ± √((3/4)(1/4)/3) = √(1/16) = 0.25
  CHECK(s.same_top_p.value == 0.75);
  CHECK(s.same_top_p.uncertainty == Approx(0.25).epsilon(1e-14));
  // dp over 3 positions: mean 0.2/3; RMS = √((0.01+0.01+0.04)/3) = √0.02 = 0.1414213562
  // dp² = (0.01, 0.01, 0.04): mean 0.02, Σ(x−m)² = 0.0006, stderr √(0.0006/6) = 0.01;
  // RMS uncertainty = 0.5/0.1414213562 · 0.01 = 0.0353553391
  CHECK(s.n_dp == 3);
  CHECK(s.dp_mean.value == Approx(0.2 / 3).epsilon(1e-12));
  CHECK(s.dp_rms.value == Approx(std::sqrt(0.02)).epsilon(1e-12));
  CHECK(s.dp_rms.uncertainty == Approx(0.035355339059327376).epsilon(1e-10));
  CHECK(s.dp.min == Approx(-0.1));
  nlohmann::json j = s.to_json();
  CHECK(j["kld"]["percentiles"].contains("p99_9"));
  CHECK(j["same_top_p"]["value"] == 0.75);
  // an infinite KLD keeps the summary serialisable
  pos[2].kld = kInf;
  m::LogitSummary si = m::summarize_logits(pos);
  CHECK(si.kld_mean.value == kInf);
  CHECK(si.kld_mean.uncertainty == kInf);
  CHECK(si.to_json()["kld"]["mean"]["value"] == "inf");
  // no position
  CHECK(m::summarize_logits({}).to_json() == nlohmann::json{{"n", 0}});
}

// ==== §4 ====

TEST_CASE("metrics: seq_rep_n") {
  std::vector<int32_t> x{1, 2, 1, 2, 1};
  // unigrams: 5, unique {1,2} → 1 − 2/5 = 0.6
  CHECK(m::seq_rep_n(x, 1) == Approx(0.6));
  // bigrams 12,21,12,21 → 2 unique of 4 → 0.5
  CHECK(m::seq_rep_n(x, 2) == Approx(0.5));
  // trigrams 121,212,121 → 2 of 3 → 1/3
  CHECK(m::seq_rep_n(x, 3) == Approx(1.0 / 3));
  // 4-grams 1212, 2121 → 0
  CHECK(m::seq_rep_n(x, 4) == 0);
  // T smaller than n: no n-gram → 0
  CHECK(m::seq_rep_n(x, 6) == 0);
  CHECK_THROWS_AS(m::seq_rep_n(x, 0), std::invalid_argument);
}

TEST_CASE("metrics: rep_w, rep_r, distinct_n, lrs, max_run") {
  // rep_w: [1,2,3,1]: only x_3 = 1 can repeat; w = 2 window {2,3}: no → 0; w = 3 window {1,2,3}: yes → 1/4
  std::vector<int32_t> a{1, 2, 3, 1};
  CHECK(m::rep_w(a, 2) == 0);
  CHECK(m::rep_w(a, 3) == 0.25);
  // rep_r: [1,2,3,1,2]: bigrams 12 (×2), 23, 31. Position 0 ∈ 12 ✓, 1 ∈ 12 ✓, 2 ∈ 23/31 ✗,
  // 3 ∈ 12 ✓, 4 ∈ 12 ✓ → 4/5
  std::vector<int32_t> b{1, 2, 3, 1, 2};
  CHECK(m::rep_r(b) == Approx(0.8));
  // distinct_n over [[1,2,3],[1,2,4]]: bigrams 12,23,12,24 → 3/4; unigrams 1,2,3,1,2,4 → 4/6
  std::vector<std::vector<int32_t>> outs{{1, 2, 3}, {1, 2, 4}};
  CHECK(m::distinct_n(outs, 2) == 0.75);
  CHECK(m::distinct_n(outs, 1) == Approx(4.0 / 6));
  // no n-gram spans two outputs: [[1],[2]] has no bigram → 1
  std::vector<std::vector<int32_t>> singles{{1}, {2}};
  CHECK(m::distinct_n(singles, 2) == 1.0);
  // lrs: [1,2,3,1,2,3,4]: "1 2 3" twice → 3/7
  std::vector<int32_t> c{1, 2, 3, 1, 2, 3, 4};
  CHECK(m::lrs_length(c) == 3);
  CHECK(m::lrs(c) == Approx(3.0 / 7));
  // overlap allowed: b a n a n a = [2,1,3,1,3,1]: "a n a" at 1 and 3 → 3
  std::vector<int32_t> banana{2, 1, 3, 1, 3, 1};
  CHECK(m::lrs_length(banana) == 3);
  // max_run: [1,1,2,2,2,1] → 3
  std::vector<int32_t> d{1, 1, 2, 2, 2, 1};
  CHECK(m::max_run(d) == 3);
}

TEST_CASE("metrics: lrs and tail_period agree with brute force") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    int T = static_cast<int>(rng() % 40);
    int alphabet = 1 + static_cast<int>(rng() % 4);
    std::vector<int32_t> x;
    for (int i = 0; i < T; ++i) x.push_back(static_cast<int32_t>(rng() % alphabet));
    if (trial % 3 == 0) {  // append a loop to get long periodic tails
      auto block = range(0, 1 + static_cast<int32_t>(rng() % 5));
      x = concat(x, repeat(block, 2 + static_cast<int>(rng() % 5)));
    }
    CHECK(m::lrs_length(x) == brute_lrs(x));
    auto got = m::tail_period(x, 8);
    auto want = brute_tail(x, 8);
    REQUIRE(got.has_value() == want.has_value());
    if (got) {
      CHECK(got->period == want->period);
      CHECK(got->repeats == want->repeats);
      CHECK(got->onset == want->onset);
    }
  }
}

TEST_CASE("metrics: tail_period and loop_onset") {
  // [1,2,3]×4: p = 1, 2 fail (k = 1); p = 3: whole sequence periodic, L = 12, k = 4, onset 0
  auto tp = m::tail_period(repeat({1, 2, 3}, 4));
  REQUIRE(tp.has_value());
  CHECK(tp->period == 3);
  CHECK(tp->repeats == 4);
  CHECK(tp->onset == 0);
  // non-periodic prefix [9,8,7] then [1,2,3]×4: L = 12, onset = 15 − 12 = 3
  tp = m::tail_period(concat({9, 8, 7}, repeat({1, 2, 3}, 4)));
  REQUIRE(tp.has_value());
  CHECK(tp->period == 3);
  CHECK(tp->repeats == 4);
  CHECK(tp->onset == 3);
  // prefix [5,2,3]: x_1 = 2 = x_4 already continues the pattern → onset 1, L = 14, k = ⌊14/3⌋ = 4
  tp = m::tail_period(concat({5, 2, 3}, repeat({1, 2, 3}, 4)));
  REQUIRE(tp.has_value());
  CHECK(tp->onset == 1);
  CHECK(tp->repeats == 4);
  // loop cut mid-period by the budget: (1..5)×4 + [1,2]: L = 22, k = 4, onset 0
  tp = m::tail_period(concat(repeat({1, 2, 3, 4, 5}, 4), {1, 2}));
  REQUIRE(tp.has_value());
  CHECK(tp->period == 5);
  CHECK(tp->repeats == 4);
  CHECK(tp->onset == 0);
  // [1,2]×3: k·p = 6 < 8 → not reported; [1,2]×4: 8 → reported
  CHECK_FALSE(m::tail_period(repeat({1, 2}, 3)).has_value());
  tp = m::tail_period(repeat({1, 2}, 4));
  REQUIRE(tp.has_value());
  CHECK(tp->period == 2);
  CHECK(tp->repeats == 4);
  // a loop followed by one other token: the tail is not periodic
  CHECK_FALSE(m::tail_period(concat(repeat({1, 2, 3}, 5), {9})).has_value());
  // the smallest period wins: [1,1,1,...] is 1-periodic (and 2-periodic)
  tp = m::tail_period(repeat({4}, 9));
  REQUIRE(tp.has_value());
  CHECK(tp->period == 1);
  CHECK(tp->repeats == 9);
}

TEST_CASE("metrics: degeneration edge cases: empty, one token, all equal") {
  SUBCASE("empty output") {
    m::Degeneration d = m::degeneration(std::vector<int32_t>{});
    CHECK(d.T == 0);
    for (double s : d.seq_rep) CHECK(s == 0);
    CHECK(d.rep_w == 0);
    CHECK(d.rep_r == 0);
    CHECK(d.lrs == 0);
    CHECK(d.max_run == 0);
    CHECK_FALSE(d.tail_period.has_value());
    CHECK_FALSE(d.loop_onset.has_value());
    CHECK_FALSE(d.degenerate);
    CHECK_FALSE(d.rule.has_value());
    nlohmann::json j = d.to_json();
    CHECK(j["tail_period"].is_null());
    CHECK(j["rule"].is_null());
    CHECK(j["empty_content"].is_null());
  }
  SUBCASE("one token") {
    m::Degeneration d = m::degeneration(std::vector<int32_t>{7});
    CHECK(d.T == 1);
    CHECK(d.seq_rep[0] == 0);  // 1 unigram, 1 unique
    CHECK(d.seq_rep[1] == 0);  // T < 2: no bigram
    CHECK(d.rep_w == 0);
    CHECK(d.rep_r == 0);
    CHECK(d.lrs == 0);
    CHECK(d.max_run == 1);
    CHECK_FALSE(d.tail_period.has_value());
    CHECK_FALSE(d.degenerate);
  }
  SUBCASE("all-equal tokens") {
    // [5]×10: seq_rep_1 = 1 − 1/10; seq_rep_4 = 1 − 1/7 (7 identical 4-grams); rep_w: x_1..x_9 all
    // seen → 9/10; rep_r: bigram 55 ×9 → every position → 1; lrs: [5]×9 at 0 and 1 → 9/10;
    // max_run 10; tail: p = 1, L = 10, k = 10, onset 0.
    m::Degeneration d = m::degeneration(repeat({5}, 10));
    CHECK(d.seq_rep[0] == Approx(0.9));
    CHECK(d.seq_rep[3] == Approx(6.0 / 7));
    CHECK(d.rep_w == Approx(0.9));
    CHECK(d.rep_r == 1.0);
    CHECK(d.lrs == Approx(0.9));
    CHECK(d.max_run == 10);
    CHECK(d.tail_period == std::optional<int64_t>(1));
    CHECK(d.tail_repeats == std::optional<int64_t>(10));
    CHECK(d.loop_onset == std::optional<int64_t>(0));
    // tail_loop (10 ≥ 4, p = 1 ≤ 32) and seq_rep_4 (0.857 > 0.5) fire; max_run 10 < 16 does not
    CHECK(d.degenerate);
    CHECK(d.rule == std::optional<std::string>("tail_loop"));
    CHECK(d.rules_fired == std::vector<std::string>{"tail_loop", "seq_rep_4"});
  }
}

TEST_CASE("metrics: each degenerate rule fires alone") {
  SUBCASE("nonfinite_logits") {
    m::Degeneration d = m::degeneration(std::vector<int32_t>{1, 2, 3}, {}, true);
    CHECK(d.degenerate);
    CHECK(d.rules_fired == std::vector<std::string>{"nonfinite_logits"});
    CHECK(d.to_json()["rule"] == "nonfinite_logits");
  }
  SUBCASE("tail_loop") {
    // 20 distinct tokens then (0..9)×4. 4-grams: 57, unique = 20 (from the prefix) + 10 (the loop)
    // → seq_rep_4 = 27/57 = 0.4737 ≤ 0.5; max_run 1; tail p = 10, k = 4, onset 20.
    auto x = concat(range(100, 20), repeat(range(0, 10), 4));
    m::Degeneration d = m::degeneration(x);
    CHECK(d.seq_rep[3] == Approx(27.0 / 57));
    CHECK(d.tail_period == std::optional<int64_t>(10));
    CHECK(d.tail_repeats == std::optional<int64_t>(4));
    CHECK(d.loop_onset == std::optional<int64_t>(20));
    CHECK(d.rules_fired == std::vector<std::string>{"tail_loop"});
    // and it respects the thresholds: period 10 > max 8 → no rule
    m::DegenRules strict;
    strict.max_tail_period = 8;
    CHECK_FALSE(m::degeneration(x, strict).degenerate);
  }
  SUBCASE("seq_rep_4") {
    // (0..9)×4 then 99: no periodic tail (99 breaks it), max_run 1; 4-grams 38, unique 10 + 1
    // (7,8,9,99) → seq_rep_4 = 1 − 11/38 = 0.7105 > 0.5
    auto x = concat(repeat(range(0, 10), 4), {99});
    m::Degeneration d = m::degeneration(x);
    CHECK_FALSE(d.tail_period.has_value());
    CHECK(d.seq_rep[3] == Approx(27.0 / 38));
    CHECK(d.rules_fired == std::vector<std::string>{"seq_rep_4"});
  }
  SUBCASE("max_run") {
    // 30 distinct, [7]×16, 99. 4-grams 44: 30 from the prefix, "7777" (13 copies) once, (7,7,7,99)
    // → unique 32, seq_rep_4 = 12/44 = 0.2727; tail broken by 99; max_run 16 ≥ 16
    auto x = concat(concat(range(100, 30), repeat({7}, 16)), {99});
    m::Degeneration d = m::degeneration(x);
    CHECK(d.seq_rep[3] == Approx(12.0 / 44));
    CHECK_FALSE(d.tail_period.has_value());
    CHECK(d.max_run == 16);
    CHECK(d.rules_fired == std::vector<std::string>{"max_run"});
    CHECK(d.reason == "max_run 16 >= 16");
    // 15 in a row does not fire
    auto y = concat(concat(range(100, 30), repeat({7}, 15)), {99});
    CHECK_FALSE(m::degeneration(y).degenerate);
  }
}

TEST_CASE("metrics: empty_content") {
  m::ContentOptions think;
  think.think_end = 10;
  think.stop_ids = {0};
  think.ignore_ids = {13};  // e.g. "\n\n"
  CHECK(m::empty_content(std::vector<int32_t>{1, 2, 10, 0}, think));      // answer empty
  CHECK_FALSE(m::empty_content(std::vector<int32_t>{1, 2, 10, 5, 0}, think));
  CHECK(m::empty_content(std::vector<int32_t>{1, 2, 3}, think));          // no </think> before the budget
  CHECK(m::empty_content(std::vector<int32_t>{1, 0, 10, 5}, think));      // stopped before </think>
  CHECK(m::empty_content(std::vector<int32_t>{1, 10, 13, 13, 0}, think)); // only ignored tokens
  CHECK(m::empty_content(std::vector<int32_t>{}, think));
  m::ContentOptions plain;  // no-thinking mode
  plain.stop_ids = {0};
  CHECK(m::empty_content(std::vector<int32_t>{}, plain));
  CHECK(m::empty_content(std::vector<int32_t>{0, 5}, plain));
  CHECK_FALSE(m::empty_content(std::vector<int32_t>{4, 0}, plain));
  // through degeneration(): reported, not a degenerate rule
  m::Degeneration d = m::degeneration(std::vector<int32_t>{1, 10, 0}, {}, false, think);
  CHECK(d.empty_content == std::optional<bool>(true));
  CHECK_FALSE(d.degenerate);
  CHECK(d.to_json()["empty_content"] == true);
}

// ==== §5 ====

TEST_CASE("metrics: speculative decoding") {
  // steps (proposed, accepted): (3,3), (3,0), (3,2): accept_rate = 5/9;
  // tokens per step 4, 1, 3 → accept_len = 8/3
  std::vector<m::VerifyStep> steps{{3, 3, 0}, {3, 0, 4}, {3, 2, 5}};
  m::SpecDecode s = m::spec_decode(steps);
  CHECK(s.steps == 3);
  CHECK(*s.accept_rate == Approx(5.0 / 9));
  CHECK(*s.accept_len == Approx(8.0 / 3));
  CHECK_FALSE(s.accept_anomaly.has_value());
  // before the loop 3/8 = 0.375; inside 8/8 = 1 ≥ 0.95 → jump
  std::vector<m::VerifyStep> jump{{4, 1, 0}, {4, 2, 2}, {4, 4, 5}, {4, 4, 10}};
  m::SpecDecode sj = m::spec_decode(jump, 5);
  CHECK(*sj.accept_rate_before == 0.375);
  CHECK(*sj.accept_rate_loop == 1.0);
  CHECK(sj.accept_anomaly == std::optional<std::string>("accept_rate_jump"));
  std::vector<m::VerifyStep> collapse{{4, 1, 0}, {4, 2, 2}, {4, 0, 5}, {4, 0, 6}};
  CHECK(m::spec_decode(collapse, 5).accept_anomaly == std::optional<std::string>("accept_rate_collapse"));
  // nothing proposed: null rates
  m::SpecDecode none = m::spec_decode({});
  CHECK(none.to_json()["accept_rate"].is_null());
  std::vector<m::VerifyStep> bad{{2, 3, 0}};
  CHECK_THROWS_AS(m::spec_decode(bad), std::invalid_argument);
}

TEST_CASE("metrics: mtp_equiv") {
  std::vector<int32_t> a{1, 2, 3}, b{1, 5, 3}, c{1, 2};
  CHECK(m::mtp_equiv(a, a).mtp_equiv);
  CHECK_FALSE(m::mtp_equiv(a, a).first_difference.has_value());
  CHECK(m::mtp_equiv(a, b).first_difference == std::optional<int64_t>(1));
  CHECK(m::mtp_equiv(c, a).first_difference == std::optional<int64_t>(2));  // strict prefix
  CHECK_FALSE(m::mtp_equiv(c, a).mtp_equiv);
  CHECK(m::mtp_equiv(a, b).to_json()["first_difference"] == 1);
}

// ==== §6 ====

TEST_CASE("metrics: verdicts and exit codes") {
  using m::Verdict;
  CHECK(m::exit_code(Verdict::good) == ExitCode::good);
  CHECK(m::exit_code(Verdict::bad) == ExitCode::bad);
  CHECK(m::exit_code(Verdict::untestable) == ExitCode::untestable);
  CHECK(static_cast<int>(m::exit_code(Verdict::untestable)) == 125);
  CHECK(m::exit_code(Verdict::model_intrinsic) == ExitCode::good);          // a warning
  CHECK(m::exit_code(Verdict::model_intrinsic, true) == ExitCode::bad);     // --fail-on-model-degeneration
  CHECK(std::string(m::verdict_name(Verdict::model_intrinsic)) == "model-intrinsic");
  // model or engine
  CHECK(m::degeneration_verdict(false, true) == Verdict::good);
  CHECK(m::degeneration_verdict(true, true) == Verdict::model_intrinsic);
  CHECK(m::degeneration_verdict(true, false) == Verdict::bad);
  CHECK(m::degeneration_verdict(true, std::nullopt) == Verdict::bad);
  CHECK(std::string(m::degeneration_cause(Verdict::bad)) == "engine");
  CHECK(std::string(m::degeneration_cause(Verdict::model_intrinsic)) == "model-intrinsic");
  // combining
  CHECK(m::worst(Verdict::good, Verdict::model_intrinsic) == Verdict::model_intrinsic);
  CHECK(m::worst(Verdict::untestable, Verdict::model_intrinsic) == Verdict::untestable);
  CHECK(m::worst(Verdict::untestable, Verdict::bad) == Verdict::bad);
  CHECK(m::worst(Verdict::good, Verdict::good) == Verdict::good);
}

// ---- compare_listing: a server's partial listing (docs/metrics.md "Top-K") ----

namespace {

// A synthetic position: V logits ~ N(0, spread^2) (spread 2: flat, the top 40 of 248,320 hold ~6 % of
// the mass; 4.5: peaked, ~70 %), its exact log-probabilities in double.
std::vector<double> gaussian_logprobs(int64_t V, double spread, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, spread);
  std::vector<double> x(static_cast<size_t>(V));
  double mx = -kInf;
  for (double& v : x) mx = std::max(mx, v = n(rng));
  double s = 0;
  for (double v : x) s += std::exp(v - mx);
  const double lse = mx + std::log(s);
  for (double& v : x) v -= lse;
  return x;
}

// The ids of the k largest entries, largest first (lowest id on ties).
std::vector<int32_t> top_of(const std::vector<double>& lp, int64_t k) {
  std::vector<int32_t> ids(lp.size());
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t kk = std::min<int64_t>(k, static_cast<int64_t>(lp.size()));
  std::partial_sort(ids.begin(), ids.begin() + kk, ids.end(),
                    [&](int32_t a, int32_t b) { return lp[a] != lp[b] ? lp[a] > lp[b] : a < b; });
  ids.resize(static_cast<size_t>(kk));
  return ids;
}

struct GoldenOf {  // a golden top-K of exact log-probabilities (stored as fp32, as a record stores them)
  std::vector<int32_t> ids;
  std::vector<float> lq;
  m::GoldenTopK view() const { return m::GoldenTopK{ids, lq, 0.0}; }
};
GoldenOf golden_of(const std::vector<double>& lq, int64_t K) {
  GoldenOf g;
  g.ids = top_of(lq, K);
  for (int32_t id : g.ids) g.lq.push_back(static_cast<float>(lq[static_cast<size_t>(id)]));
  return g;
}

// A server's top-k of lp, each log-prob rounded to fp32 as servers state them (round_fp32) or exact.
m::Listing listing_of(const std::vector<double>& lp, int64_t k, bool round_fp32) {
  m::Listing l;
  l.ids = top_of(lp, k);
  for (int32_t id : l.ids) {
    const double v = lp[static_cast<size_t>(id)];
    l.logprobs.push_back(round_fp32 ? static_cast<double>(static_cast<float>(v)) : v);
  }
  l.unlisted = static_cast<int64_t>(lp.size()) - static_cast<int64_t>(l.ids.size());
  l.scale_slack = m::listing_scale_slack(static_cast<int64_t>(lp.size()));
  return l;
}

double exact_kld(const std::vector<double>& lq, const std::vector<double>& lp) {
  double k = 0;
  for (size_t i = 0; i < lq.size(); ++i) k += std::exp(lq[i]) * (lq[i] - lp[i]);
  return k;
}

}  // namespace

TEST_CASE("compare_listing: an exact engine scores ~0 with any listing, V 1,000 to 248,320, K 1 to V, flat and peaked") {
  // The bound of a listing in fp32: a tail rounding delta moves the KLD by at most delta^2 / (2 e) with
  // e = kListingMassResolution (metrics.h): 1.8e-10 at the 6e-8 of an fp32 probability near 1; the
  // golden's own fp32 log-probs add kTopkSelfKld-sized terms.
  std::mt19937_64 rng(57);
  for (int64_t V : {1000, 16384, 248320})
    for (double spread : {2.0, 4.5})
      for (int64_t K : {int64_t{1}, int64_t{5}, int64_t{20}, int64_t{40}, int64_t{1000}, V}) {
        CAPTURE(V);
        CAPTURE(spread);
        CAPTURE(K);
        const std::vector<double> lq = gaussian_logprobs(V, spread, rng);
        const GoldenOf g = golden_of(lq, 40);
        for (bool rounded : {false, true}) {
          const m::LogitPosition p = m::compare_listing(g.view(), listing_of(lq, K, rounded), -1);
          CHECK(std::isfinite(p.kld));
          CHECK(p.kld <= (rounded ? 3e-10 : 1e-12));
          CHECK(p.kld >= -1e-12);
          CHECK(p.top1_agree);
          REQUIRE(p.resolved.has_value());
          CHECK(*p.resolved <= 1.0 + 1e-12);
          if (K >= 40) CHECK(*p.resolved == Approx(1.0));
          if (K < static_cast<int64_t>(m::kMinListedIds)) CHECK(*p.resolved == 0.0);
        }
      }
}

TEST_CASE("compare_listing: a lower bound of the KLD, and how much of it a listing sees (bias against the exact KLD)") {
  // Logit noise of size sigma (an engine off by independent errors): the listing's KLD never exceeds the
  // KLD over the record's cells (kld_topk of the full distribution), which never exceeds the exact KLD;
  // the table shows the bias: the listing's share of kld_topk against the record's mass it resolves.
  std::mt19937_64 rng(58);
  std::normal_distribution<double> noise(0.0, 1.0);
  MESSAGE("V       spread  K     resolved  listing/kld_topk  kld_topk/exact");
  for (int64_t V : {1000, 248320})
    for (double spread : {2.0, 4.5})
      for (int64_t K : {int64_t{1}, int64_t{5}, int64_t{20}, int64_t{40}, V}) {
        double sum_list = 0, sum_topk = 0, sum_exact = 0, sum_res = 0;
        const int draws = V > 100000 ? 3 : 10;
        for (int d = 0; d < draws; ++d) {
          const std::vector<double> lq = gaussian_logprobs(V, spread, rng);
          std::vector<float> x(static_cast<size_t>(V));
          for (int64_t i = 0; i < V; ++i) x[static_cast<size_t>(i)] = static_cast<float>(lq[static_cast<size_t>(i)] + 0.05 * noise(rng));
          const std::vector<double> lp = m::log_softmax(x);
          const GoldenOf g = golden_of(lq, 40);
          const m::LogitPosition full = m::compare_logits_topk(x, g.view(), -1);
          const m::LogitPosition l = m::compare_listing(g.view(), listing_of(lp, K, false), -1);
          const double exact = exact_kld(lq, lp);
          CHECK(l.kld <= full.kld + 1e-12);
          CHECK(full.kld <= exact + 1e-9);
          CHECK(l.kld >= -1e-12);
          sum_list += l.kld;
          sum_topk += full.kld;
          sum_exact += exact;
          sum_res += *l.resolved;
        }
        const double res = sum_res / draws, share = sum_list / sum_topk;
        MESSAGE(V, "  ", spread, "  ", K, "  ", res, "  ", share, "  ", sum_topk / sum_exact);
        // The rule CompareRules::min_resolved rests on: from kMinListedIds ids on, a listing sees about its
        // resolved share of the noise (here at least 60 % of it, and all of it once it lists the
        // record's ids); below, resolved is 0 (the estimate of a few cells is a chi-square of 1-4
        // degrees of freedom: 0.09 to 0.67 of kld_topk in the rows above).
        CHECK(share >= 0.6 * res - 1e-9);
        if (res >= 1.0 - 1e-12) CHECK(share == Approx(1.0).epsilon(1e-6));
      }
}

TEST_CASE("compare_listing: a wrong engine stays wrong whatever it lists") {
  std::mt19937_64 rng(59);
  for (int64_t V : {1000, 248320}) {
    const std::vector<double> lq = gaussian_logprobs(V, 4.5, rng);
    const GoldenOf g = golden_of(lq, 40);
    // The engine's distribution is another draw: its top ids are other ids.
    const std::vector<double> lp = gaussian_logprobs(V, 4.5, rng);
    const double exact = exact_kld(lq, lp);
    for (int64_t K : {int64_t{5}, int64_t{20}, int64_t{40}, V}) {
      CAPTURE(K);
      const m::LogitPosition l = m::compare_listing(g.view(), listing_of(lp, K, true), -1);
      CHECK(l.kld <= exact + 1e-9);
      CHECK(l.kld > 0.1);  // the record's likeliest ids are absent or far off in any listing of it
      CHECK_FALSE(l.top1_agree);
    }
  }
  // The record's top id left out of a listing whose least listed id is far less likely: the smallest
  // KLD the listing allows is large (the unlisted id is at most as likely as the least listed one).
  const std::vector<int32_t> gid{0, 1};
  const std::vector<float> glq{std::log(0.9f), std::log(0.05f)};
  m::Listing l;
  l.ids = {1, 2};
  l.logprobs = {std::log(0.5), std::log(0.4)};
  l.unlisted = 998;
  const m::LogitPosition p = m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, l, -1);
  // id 0 gets at most 0.1 (the unlisted mass, below the least listed 0.4), and the KLD falls as it gets
  // more, so p0 = 0.1 and the rest (id 2 and the unlisted ids) 0.4: 0.9 ln(0.9/0.1) + 0.05 ln(0.05/0.5)
  // + 0.05 ln(0.05/0.4) = 1.7583 nats (the tail's pseudo-mass moves it by 1e-5 at most).
  CHECK(p.kld == Approx(0.9 * std::log(9.0) + 0.05 * std::log(0.1) + 0.05 * std::log(0.125)).epsilon(1e-4));
  CHECK(*p.resolved == 0.0);  // two listed ids: too few to judge
}

TEST_CASE("compare_listing: complete listings, padding mass, rounding above 1, bad input") {
  const std::vector<int32_t> gid{0, 1};
  const std::vector<float> glq{std::log(0.6f), std::log(0.3f)};
  // A complete listing whose mass is short of 1 (a server normalising over padding rows too) is
  // renormalised: the same as the exact distribution.
  m::Listing full;
  full.ids = {0, 1, 2};
  full.logprobs = {std::log(0.6 * 0.98), std::log(0.3 * 0.98), std::log(0.1 * 0.98)};
  full.unlisted = 0;
  CHECK(std::abs(m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, full, 1).kld) < 1e-7);
  // A record whose top-K holds every real id (fp32 log-probs summing to 1 - 6e-8, say) against a
  // complete listing: no tail at all, not an empty tail with mass (which read as inf).
  const std::vector<int32_t> all3{0, 1, 2};
  const std::vector<float> all3lq{std::log(0.6f), std::log(0.3f), std::nextafter(std::log(0.1f), -1.0f)};
  const m::LogitPosition pc = m::compare_listing(m::GoldenTopK{all3, all3lq, 0.0}, full, -1);
  CHECK(std::isfinite(pc.kld));
  CHECK(std::abs(pc.kld) < 1e-6);
  // A partial listing whose probabilities sum a little above 1 (rounding): brought back to 1, finite.
  m::Listing over;
  over.ids = {0, 1};
  over.logprobs = {std::log(0.6002), std::log(0.4)};
  over.unlisted = 5;
  CHECK(std::isfinite(m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, over, -1).kld));
  m::Listing dup = full;
  dup.ids = {0, 0, 2};
  CHECK_THROWS_AS(m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, dup, -1), std::invalid_argument);
  m::Listing nan = full;
  nan.logprobs[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, nan, -1), std::invalid_argument);
  // dp where both state the next token; nullopt where the listing does not.
  m::Listing part;
  part.ids = {0};
  part.logprobs = {std::log(0.5)};
  part.unlisted = 2;
  const m::LogitPosition pp = m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, part, 0);
  REQUIRE(pp.dp.has_value());
  CHECK(*pp.dp == Approx(0.5 - 0.6).epsilon(1e-6));
  CHECK_FALSE(m::compare_listing(m::GoldenTopK{gid, glq, 0.0}, part, 1).dp.has_value());
}

TEST_CASE("compare_listing: a listing's common normaliser is known to within its fp32 sum") {
  // llama-server divides every listed probability by one fp32 sum over all rows, which drops the
  // smallest terms: its listed log-probs all sit a little above the true ones. Within the bound of that
  // sum (listing_scale_slack) an exact engine still scores ~0; a shift far beyond it is a deviation.
  std::mt19937_64 rng(60);
  const int64_t V = 248320;
  const std::vector<double> lq = gaussian_logprobs(V, 4.5, rng);
  const GoldenOf g = golden_of(lq, 40);
  for (double shift : {3.9e-4, -3.9e-4, 0.01}) {
    CAPTURE(shift);
    m::Listing l = listing_of(lq, 20, false);
    for (double& v : l.logprobs) v += shift;
    CHECK(m::compare_listing(g.view(), l, -1).kld < 1e-12);
    l.scale_slack = 0;  // without the slack the same shift reads as moved mass
    CHECK(m::compare_listing(g.view(), l, -1).kld > 1e-9);
  }
  m::Listing far = listing_of(lq, 20, false);
  for (double& v : far.logprobs) v -= 0.2;  // 18 % of the listed mass gone: not rounding
  CHECK(m::compare_listing(g.view(), far, -1).kld > 1e-3);
}
