// Every number degenbisect reports, as defined in ../shared/spec/metrics.md (the "spec" below):
//   §1 tensor error (TensorError) and the per-layer noise-floor rule (FloorRule),
//   §2 logit distribution per position (LogitPosition) and its llama.cpp-style summary (LogitSummary),
//   §4 degeneration of a generated token sequence (Degeneration) and the degenerate verdict,
//   §5 speculative decoding (SpecDecode, MtpEquiv),
//   §6 verdicts and exit codes (Verdict).
// Names of functions, fields and JSON keys are the spec's names, so a user can look them up there.
// All arithmetic is fp64, whatever the input dtype. No fast-math (the CMake build has none).
//
// JSON and non-finite numbers: JSON has no inf/NaN. json_number() writes a finite double as a
// number and +inf / -inf / NaN as the STRINGS "inf" / "-inf" / "nan"; number_from_json() reads
// both forms back. `null` is kept for "not defined here" (no tail period, no next token, ...), so
// "inf" (a real, infinitely bad value) and null (nothing to measure) never mix.
//
// Invalid arguments (size mismatch, empty vocabulary, out-of-range ids) throw
// std::invalid_argument: they are bugs in the caller, not user input errors.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/topk.h"
#include "util/logits.h"
#include "engine/spec_stats.h"
#include "util/error.h"
#include "util/json_number.h"

namespace degen::metrics {

// ---- JSON helpers (util/json_number.h) and the speculative-decoding records (engine/spec_stats.h) ----
using degen::json_number;
using degen::number_from_json;
using degen::SpecDecode;
using degen::SpecRules;
using degen::VerifyStep;
using degen::spec_decode;

// ==== §1 Tensor error ====

// Errors of a tested tensor `a` against the reference `r` (same number of elements), fp64.
//
// Non-finite values:
//  - `nonfinite` counts the i with a_i NaN/±Inf where r_i is finite. Any such element fails the
//    comparison before every other check (passes_nonfinite() is false). The other metrics are then
//    still computed, over the elements where both a_i and r_i are finite, to help diagnosis; they
//    must not be read as a pass.
//  - `ref_nonfinite` counts the i where r_i itself is not finite. Those elements are excluded from
//    every sum; `ref_nonfinite_mismatch` counts those among them where a_i is not the same value
//    (both NaN, or the same signed infinity), which also fails passes_nonfinite().
//  - n_compared = n - nonfinite - ref_nonfinite: the elements the sums run over.
//
// Zero and empty references (sums over the compared elements; d = a - r):
//  - nmse = Σd²/Σr²; if Σr² = 0: 0 when Σd² = 0, else +inf. rel_l2 = √nmse.
//  - nmse_var = mean(d²)/var(r), var the population variance; if var(r) = 0: 0 when mean(d²) = 0,
//    else +inf (a constant reference leaves no scale to normalise by).
//  - cos_dist = 1 − 2Σar / Σ(a²+r²); 0 when Σ(a²+r²) = 0 (both all zero).
//  - cosine = Σar / (‖a‖‖r‖); 1 when both are all zero, 0 when exactly one is.
//  - max_abs = max|d|, argmax_abs = the first index attaining it; -1 (JSON null) when nothing was
//    compared. An empty tensor pair is "equal": every error 0, cosine 1.
//
// min_tol (Polygraphy's "minimum required tolerance"). The pair (atol, rtol) is sufficient iff
//   |d_i| ≤ atol + rtol·|r_i| for every compared i, i.e. iff atol ≥ f(rtol) := max_i max(0, |d_i| − rtol·|r_i|).
// f is convex, piecewise linear and non-increasing, so there is no single smallest pair but a
// frontier; we report its two ends, as Polygraphy does:
//  - min_atol = f(0) = max|d| (the tolerance with rtol = 0, "atol-only");
//  - min_rtol = the smallest rtol with f(rtol) = 0 = max over r_i ≠ 0 of |d_i|/|r_i| ("rtol-only"),
//    +inf if some r_i = 0 has d_i ≠ 0 (no relative tolerance covers it).
// min_atol_at_rtol() evaluates any other point of the frontier.
struct TensorError {
  int64_t n = 0;                       // elements in each tensor
  int64_t n_compared = 0;              // elements where a and r are both finite
  int64_t nonfinite = 0;               // a non-finite where r is finite: fails first
  int64_t ref_nonfinite = 0;           // r non-finite (excluded from the sums)
  int64_t ref_nonfinite_mismatch = 0;  // ... and a is not the same non-finite value
  double nmse = 0;                     // Σ(a−r)² / Σr²
  double nmse_var = 0;                 // mean((a−r)²) / var(r)
  double rel_l2 = 0;                   // ‖a−r‖₂ / ‖r‖₂ = √nmse
  double cos_dist = 0;                 // 1 − 2Σar / Σ(a²+r²)
  double cosine = 1;                   // Σar / (‖a‖‖r‖)
  double max_abs = 0;                  // max |a−r|
  int64_t argmax_abs = -1;             // first index of max_abs, -1 if nothing compared
  double min_atol = 0;                 // min_tol, atol-only = max|a−r|
  double min_rtol = 0;                 // min_tol, rtol-only = max |a−r|/|r| over r ≠ 0 (inf if r=0, a≠r)

  // False when a non-finite value appears where the reference is finite (or a non-finite reference
  // value is not matched): the comparison fails, whatever the other metrics say.
  bool passes_nonfinite() const { return nonfinite == 0 && ref_nonfinite_mismatch == 0; }
  // Keys: n, n_compared, nonfinite, ref_nonfinite, ref_nonfinite_mismatch, nmse, nmse_var, rel_l2,
  // cos_dist, cosine, max_abs, argmax_abs (null if -1), min_tol: {atol, rtol}.
  nlohmann::json to_json() const;
};

// Throws std::invalid_argument when a.size() != r.size().
TensorError tensor_error(std::span<const float> a, std::span<const float> r);
TensorError tensor_error(std::span<const double> a, std::span<const double> r);

// Single metrics (same definitions and edge cases as TensorError).
double nmse(std::span<const float> a, std::span<const float> r);
double nmse(std::span<const double> a, std::span<const double> r);

// A point of the min_tol frontier: the smallest atol that suffices together with `rtol`
// (max_i max(0, |a_i−r_i| − rtol·|r_i|) over the elements where both are finite).
double min_atol_at_rtol(std::span<const double> a, std::span<const double> r, double rtol);

// ---- Noise floor (§1, per layer) ----

// A layer passes when err ≤ k·floor + eps. `err` and `floor` are the same metric (the caller picks
// which: rel_l2 or nmse), floor from the golden record.
struct FloorRule {
  double k = 3.0;     // multiple of the floor allowed (PyTorch same(): 2-3x the reference's own error)
  double eps = 1e-12; // absolute slack in err's units: keeps a zero floor from failing on fp64 round-off
};

// err / floor; 0 when both are 0, +inf when only floor is 0; NaN propagates.
double floor_ratio(double err, double floor);
// err ≤ k·floor + eps; false for a NaN err or floor.
bool floor_pass(double err, double floor, const FloorRule& rule = {});
// The first index L (layer) with floor_pass(err[L], floor[L]) false, or nullopt when every layer
// passes. Throws std::invalid_argument when the sizes differ.
std::optional<int64_t> first_floor_break(std::span<const double> err, std::span<const double> floor,
                                         const FloorRule& rule = {});

// ==== §2 Logit distribution (per position) ====

// p = softmax(test logits), q = softmax(golden logits), both over the real vocabulary: the ids i
// with excluded[i] == 0 (an empty `excluded` means every id is real; padding ids are excluded).
// log-softmax is computed in fp64 with the log-sum-exp shift. -inf logits are allowed (probability
// 0). Conventions:
//  - kld = KL(q‖p) = Σ_{q_i>0} q_i (log q_i − log p_i) in nats: terms with q_i = 0 contribute 0; a
//    term with q_i > 0 and p_i = 0 makes kld = +inf. Not clamped at 0: round-off may leave a tiny
//    negative value, as in llama.cpp's report; below −kKldRoundoff it is no measurement (an
//    inconsistent golden distribution or a bug) and throws InputError, never reaching a verdict.
//  - top-1 and top-k use the logits with ties broken by the lowest id (the sampler's rule, so greedy
//    decoding and top1_agree agree). topk_overlap = |topk(p) ∩ topk(q)| / k' with
//    k' = min(k, number of real ids).
//  - dp = p(next) − q(next), next = the golden next token (teacher forcing); nullopt when there is
//    no next token (next < 0).
//  - logit_nmse = nmse(test logits, golden logits) over the real ids (TensorError rules: -inf/-inf
//    pairs are excluded as a matched non-finite reference); +inf when a test logit is -inf where the
//    golden's is finite, or the reverse.
//  - An undefined TEST distribution (a NaN or +inf logit among the real ids, or all of them -inf)
//    is the worst case, not an exception: test_nonfinite counts those logits, kld = +inf,
//    top1_agree = false, topk_overlap = 0, dp = −q(next), logit_nmse = +inf, test_top1 = -1.
//    So is a test distribution whose largest real logit lies beyond ±kMaxLogitMagnitude, where
//    float32 no longer resolves the differences softmax needs (test_out_of_range = true).
//  - An undefined GOLDEN distribution (NaN or +inf, or all -inf) throws std::invalid_argument.
// The largest magnitude a position's largest logit may have: 2^15. Where it comes from:
//  - real logits are far inside it: an LM head's raw logits are tens of nats (the largest in the
//    trained tiny model's golden records is 30.4; soft-capped models such as Gemma 2 cap them at
//    30), and an fp16 engine cannot hold more than 65504 at all;
//  - float32 spaces numbers of magnitude 2^15 by 2^-8 = 0.004 nats. Softmax depends only on logit
//    differences, and a rounding error δ of the logits moves the KLD by about ½·Var_q(δ): at 2^15
//    ≤ ½·(2^-9)² ≈ 2e-6 nats, below the bf16 class's KLD floor (1.5e-5 nats, golden/tiny-trained).
//    The spacing is a whole nat at 2^23, and at 1e20 (issue 40: a dump's logits plus 1e20) every
//    logit of a position rounds to one float: no distribution is left to measure.
// Beyond it the test distribution is undefined (the worst case, as NaN is).
constexpr double kMaxLogitMagnitude = 32768.0;

// How far below 0 rounding can take a KLD, in nats: 1e-5. The bound: KL(q̃‖p) ≥ Σq̃ − Σp for any
// non-negative q̃ (log x ≤ x − 1), Σp = 1 in fp64, and the golden q̃ sums to at least 1 except for
// rounding: a top-K record's tail bucket is max(0, 1 − Σ_S q_i), and its log-probs are fp32, each
// off by ≤ 2^-24·|log q_i|, so Σq_i is off by ≤ 2^-24·Σ q_i|log q_i| ≤ 2^-24·ln V ≤ 1.3e-6 for any
// V < 2^31 (the entropy is at most ln V). The fp64 sum Σp of V terms is off by ≤ V·2^-53, 2.4e-7
// at V = 2^31 (3e-11 at Qwen3.5's 248320). 1e-5 is 6x the sum of both bounds. Further below 0 is no
// rounding: the golden's probabilities do not sum to 1 (an inconsistent record) or it is a bug.
constexpr double kKldRoundoff = 1e-5;

struct LogitPosition {
  double kld = 0;                      // KL(q‖p), nats; kld_topk when topk_bound
  bool topk_bound = false;             // true: from a top-K golden record, kld is kld_topk (≤ the full KLD)
  bool top1_agree = false;             // argmax p == argmax q
  double topk_overlap = 0;             // |topk(p) ∩ topk(q)| / k'
  int topk = 0;                        // k' used
  std::optional<double> dp;            // p(next) − q(next)
  std::optional<double> logit_nmse;    // nmse of the raw logits (full logits only)
  std::optional<double> logit_nmse_topk;  // nmse of the raw logits over the stored top-K ids (top-K record only)
  int32_t test_top1 = -1;              // argmax p (-1 if the test distribution is undefined)
  int32_t golden_top1 = -1;            // argmax q
  int64_t test_nonfinite = 0;          // NaN / +inf test logits among the real ids
  bool test_out_of_range = false;      // the largest real test logit is beyond ±kMaxLogitMagnitude
  double test_max_logit = 0;           // that largest real test logit (when finite)
  std::optional<double> resolved;      // a server's listing: the record's stored mass at listed ids / all of it
  // Keys: kld (or kld_topk when topk_bound), top1_agree, topk_overlap, topk, dp, logit_nmse or
  // logit_nmse_topk, test_top1, golden_top1, test_nonfinite, test_out_of_range; resolved where set.
  nlohmann::json to_json() const;
};

// Full logits: test and golden are [V] rows of the same length; excluded is empty or [V].
LogitPosition compare_logits(std::span<const float> test, std::span<const float> golden, int32_t next,
                             std::span<const uint8_t> excluded = {}, int topk = 10);

// log_softmax and the real-id rules of a row: util/logits.h.

// One position of a golden record that keeps only the top-K: ids, their log-probabilities
// log q_i = logit_i − lse under the golden, and lse = log Σ exp(golden logits) over the real ids.
struct GoldenTopK {
  std::span<const int32_t> ids;     // [K] distinct token ids, real (not excluded)
  std::span<const float> logprobs;  // [K] log q_i
  double lse = 0;                   // log-sum-exp of the golden logits (recovers logit_i = log q_i + lse)
};

// kld_topk: the KL divergence with the golden tail lumped into one bucket. With S the stored ids,
// Q_S = Σ_{i∈S} q_i, P_S = Σ_{i∈S} p_i:
//   kld_topk = Σ_{i∈S} q_i (log q_i − log p_i) + (1 − Q_S)·(log(1 − Q_S) − log(1 − P_S)),
// the second (tail) term taken as 0 when 1 − Q_S ≤ 0 (clamped: round-off of the stored fp32
// log-probs) or when S covers every real id, and +inf when 1 − Q_S > 0 and the test puts no mass
// outside S. 1 − P_S is computed directly as Σ_{i∉S} p_i from the full test logits (no cancellation).
// By the log-sum inequality Σ_{i∉S} q_i log(q_i/p_i) ≥ (Σ q_i) log(Σ q_i / Σ p_i), so kld_topk ≤ kld
// (a lower bound), with equality when S is the whole real vocabulary.
// Other fields from the top-K record: golden_top1 = the stored id with the largest log-prob (lowest
// id on ties); topk_overlap against the best k' = min(k, K, real ids) stored ids; dp only when next ∈ S
// (nullopt otherwise: q(next) is unknown); logit_nmse_topk over S with golden logits log q_i + lse.
LogitPosition compare_logits_topk(std::span<const float> test, const GoldenTopK& golden, int32_t next,
                                  std::span<const uint8_t> excluded = {}, int topk = 10);

// ---- Another engine's listing: the K ids a server states at a position (docs/metrics.md "Top-K") ----

// What a server states at one position, in the record's normalisation (over the real ids): each
// listed id once, padding ids and ids beyond the vocabulary taken out, log p_i (-inf allowed), and
// how many real ids it leaves out. A partial listing is a top-K: every unlisted id is at most as
// likely as the least likely listed one.
struct Listing {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  int64_t unlisted = 0;  // real ids not listed; 0: the listing is complete (renormalised over the real ids)
  // The listed probabilities share one normaliser, the server's sum over its rows, known only to within
  // this relative error (listing_scale_slack); a partial listing is taken at every common scale in it.
  double scale_slack = 0;
};

// How far a server's normalising sum over `rows` fp32 terms can be off, relative: (rows - 1) x 2^-24,
// the bound of recursive summation (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
// eq. 4.4; any summation order is within it). llama-server sums its probabilities so (one fp32 sum
// over every row, server-common.cpp get_token_probabilities): on 248,320 rows the terms below half an
// fp32 step of the running sum are dropped, and its listed log-probs came out 3.9e-4 nats above the
// true ones on the real-vocabulary test model, where its logits agree with the reference to 1e-7
// (compare --dump). 0.0148 at 248,320 rows, 6.1e-5 at 1,024.
inline double listing_scale_slack(int64_t rows) { return rows > 1 ? static_cast<double>(rows - 1) * 0x1p-24 : 0.0; }

// The mass below which a partial listing resolves nothing: 1e-5. A server states each listed
// probability in fp32 (llama-server computes probabilities and takes their log; vLLM and SGLang a
// log-softmax), so each is off by about 2^-24 relative, and the unlisted mass 1 - sum(p) is known to
// about 6e-8 (llama-server's top probability near 1 is rounded to 1 - 6e-8 steps). The tail cell gets
// this pseudo-mass on both sides (below); a rounding delta of the tail then moves the KLD by at most
// delta^2 / (2 x pseudo-mass) = 1.8e-10 at delta = 6e-8, under the fp32 class's eps of 1e-9. It also
// bounds how far the listed mass may exceed 1, or the unlisted ids' probabilities the least listed one,
// before the listing contradicts itself.
constexpr double kListingMassResolution = 1e-5;
// A partial listing of fewer ids than this resolves nothing that can judge a floor: its KLD rests on
// so few cells that independent noise gives a chi-square of 1-4 degrees of freedom (one listed id:
// estimates of the same noise spread over three orders of magnitude, 1.7e-7 to 3.4e-4 nats, where
// the record's cells gave 3e-4 to 1e-3; test_metrics measures the share from 5 ids on).
constexpr size_t kMinListedIds = 5;

// KLD(golden || engine) from a listing, the smallest the listing allows. The record states q_i for
// its top-K S and the tail mass q_R = 1 - sum_S q; the listing states p_i for its ids L. Cells: each
// id of S, and the rest R (every other id, the listed ones outside S included: their q is unknown).
//  - i in S and L: both known;
//  - i in S, not in L (A): p_i is unknown, in [0, min listed p] and, summed over A, at most the
//    unlisted mass U = 1 - sum_L p; the p_A that gives the smallest KLD is taken (convex: the
//    p_i = min(t q_i, cap) that equalise q_i / p_i with the tail's, found by bisection);
//  - R: q_R against p_R = 1 - sum_{S and L} p - sum_A p, each given kListingMassResolution of
//    pseudo-mass (by the log-sum inequality (q+e) log((q+e)/(p+e)) <= q log(q/p): still a lower bound);
//  - the listed p all scaled by one factor c within exp(+-scale_slack) (the server's normaliser), the
//    smallest KLD over c taken (convex in c: golden-section search).
// The result is at most the KLD over these cells for the true p, which is at most the full KLD
// (log-sum inequality), so an engine that computes the reference's distribution scores ~0 with any
// listing, and a score over a limit is a deviation at least that large. What a partial listing cannot
// show: how the engine spreads the mass it does not list. `resolved` = the share of the record's
// stored mass at ids the listing states (1: S within L), the part of the KLD it can see (under
// independent logit noise the estimate is about that share of the KLD from 5 listed ids on:
// test_metrics), and 0 for a partial listing of fewer than kMinListedIds ids.
// A complete listing (unlisted 0) is renormalised over the real ids and scored exactly as
// compare_logits_topk scores full logits. Other fields: test_top1 = the listed id with the largest
// log-prob (lowest id on ties); topk_overlap over k' = min(k, K, listed) ids; dp and
// logit_nmse_topk (over log-probs) where the listing states the id. Throws std::invalid_argument for an
// inconsistent golden (as compare_logits_topk) or a listing with an id twice or a NaN.
LogitPosition compare_listing(const GoldenTopK& golden, const Listing& test, int32_t next, int topk = 10);

// ---- Summary over positions (llama.cpp `llama-perplexity --kl-divergence`) ----

// Percentile of an ascending-sorted, non-empty list, by linear interpolation between order
// statistics (as llama.cpp's report, and numpy's default "linear" method): with h = fraction·(N−1),
// i = ⌊h⌋, the value is x_i + (h − i)·(x_{i+1} − x_i) (x_i exactly when h = i, so an infinite
// neighbour does not turn it into NaN). fraction is clamped to [0, 1]. The median is fraction 0.5
// (the mean of the two middle values when N is even). Throws std::invalid_argument when empty.
double percentile(std::span<const double> sorted, double fraction);

// The percentiles llama.cpp prints, in its order. JSON keys: max, p99_9, p99, p95, p90, median, p10,
// p5, p1, p0_1, min.
struct Percentiles {
  double max = 0, p99_9 = 0, p99 = 0, p95 = 0, p90 = 0, median = 0, p10 = 0, p5 = 0, p1 = 0, p0_1 = 0,
         min = 0;
  nlohmann::json to_json() const;
};
// Sorts a copy (NaN last) and takes the percentiles. Throws std::invalid_argument when empty.
Percentiles percentiles(std::span<const double> values);

// A mean with its uncertainty (standard error), printed "value ± uncertainty". JSON {value, uncertainty}.
struct MeanErr {
  double value = 0;
  double uncertainty = 0;
  nlohmann::json to_json() const;
};
// mean ± sqrt(Σ(x−mean)² / (N(N−1))) (llama.cpp's sqrt((Σx²/N − mean²)/(N−1)), computed in two
// passes); uncertainty 0 when N = 1, +inf when the mean is not finite. Throws when empty.
MeanErr mean_and_uncertainty(std::span<const double> values);

// The llama.cpp KL report over N positions. Fractions are fractions (llama.cpp prints Δp and
// "same top p" in percent: multiply by 100 to compare).
//  - kld_mean ± standard error; kld percentiles.
//  - dp_mean ± standard error, dp percentiles, dp_rms = sqrt(mean(dp²)) ± 0.5/rms · stderr(dp²)
//    (llama.cpp's propagation; 0 uncertainty when rms = 0), over the n_dp positions that have a dp.
//  - same_top_p = fraction with top1_agree ± sqrt(p(1−p)/(N−1)) (0 when N = 1).
// JSON: {n, kld|kld_topk: {mean, percentiles}, n_dp, dp: {mean, percentiles, rms}, same_top_p};
// with n = 0 only {"n": 0}; the dp block is null when n_dp = 0.
struct LogitSummary {
  int64_t n = 0;
  bool topk_bound = false;  // any position's kld is a kld_topk lower bound
  MeanErr kld_mean;
  Percentiles kld;
  int64_t n_dp = 0;
  MeanErr dp_mean;
  Percentiles dp;
  MeanErr dp_rms;
  MeanErr same_top_p;
  nlohmann::json to_json() const;
};
LogitSummary summarize_logits(std::span<const LogitPosition> positions);

// ==== §4 Degeneration (x = generated tokens, prompt excluded, T = |x|) ====

// seq_rep_n = 1 − |unique n-grams| / |n-grams|; 0 when T < n (no n-gram, nothing repeats).
double seq_rep_n(std::span<const int32_t> x, int n);
// rep_w = (1/T) Σ_i 1[x_i ∈ x_{max(i−w,0)} … x_{i−1}]; 0 when T = 0.
double rep_w(std::span<const int32_t> x, int w = 16);
// rep_r = fraction of positions i that belong to a bigram (x_{i−1},x_i) or (x_i,x_{i+1}) occurring
// more than once in x (occurrences may overlap); 0 when T < 2.
double rep_r(std::span<const int32_t> x);
// distinct_n = |unique n-grams| / |n-grams| pooled over all outputs (an n-gram never spans two
// outputs); 1 when there is no n-gram at all (consistent with seq_rep_n = 0).
double distinct_n(std::span<const std::vector<int32_t>> outputs, int n);
// The length of the longest substring occurring at two different start positions (overlap allowed:
// in [7,7,7] it is [7,7], length 2), from the suffix array and its LCP array (max LCP of adjacent
// suffixes). lrs = lrs_length / T; 0 when T = 0.
int64_t lrs_length(std::span<const int32_t> x);
double lrs(std::span<const int32_t> x);
// Longest run of one identical token; 0 when T = 0.
int64_t max_run(std::span<const int32_t> x);

// Tail periodicity. For a period p, L_p = the length of the longest suffix of x that is p-periodic
// (x_i = x_{i−p} for every i of the suffix past its first p tokens, i.e. L_p = p + the number of
// consecutive i counting back from T−1 with x_i = x_{i−p}, capped at T), and k_p = ⌊L_p / p⌋ the
// whole periods in it (a loop cut mid-period by the budget still counts its full periods).
// tail_period = the smallest p ≥ 1 with k_p ≥ 2 and k_p·p ≥ min_tail_len (8), tail_repeats = k_p;
// loop_onset = T − L_p, the first position (0-based, in x) from which x is p-periodic to its end.
// None of the three is reported (nullopt) when no p qualifies. Computed in O(T) with the Z-function
// of reversed x (L_p = p + Z[p]).
struct TailPeriod {
  int64_t period = 0;   // tail_period
  int64_t repeats = 0;  // tail_repeats
  int64_t onset = 0;    // loop_onset
};
std::optional<TailPeriod> tail_period(std::span<const int32_t> x, int64_t min_tail_len = 8);

// empty_content. x is cut at its first stop id (the generation ends there; the budget ends x).
// With thinking (think_end set): the answer is the tokens after the FIRST think_end; empty_content
// is true when there is no think_end before the cut (the budget or a stop came first) or the answer
// has no token outside `ignore_ids` (e.g. whitespace-only tokens). Without thinking (think_end
// nullopt; also when the chat template closed the think block inside the prompt): the answer is
// all of x before the cut, empty when it has no token outside ignore_ids.
struct ContentOptions {
  std::optional<int32_t> think_end;  // id of </think>; nullopt for no-thinking mode
  std::vector<int32_t> stop_ids;     // EOS / end-of-turn ids
  std::vector<int32_t> ignore_ids;   // ids that do not count as content (whitespace-only tokens)
};
bool empty_content(std::span<const int32_t> x, const ContentOptions& opt);

// The degenerate verdict's rules (spec §4 defaults). Rule names, in the order they are checked:
//  "nonfinite_logits": the generation produced non-finite logits (flag passed in);
//  "tail_loop":  tail_repeats ≥ min_tail_repeats with tail_period ≤ max_tail_period;
//  "seq_rep_4":  seq_rep_4 > max_seq_rep_4;
//  "max_run":    max_run ≥ min_max_run.
struct DegenRules {
  int64_t min_tail_repeats = 4;  // whole periods in the tail loop
  int64_t max_tail_period = 32;  // tokens; longer loops are not flagged by this rule
  double max_seq_rep_4 = 0.5;    // fraction of repeated 4-grams
  int64_t min_max_run = 16;      // tokens of one identical id
  int64_t min_tail_len = 8;      // k·p below this: no tail period reported
  int rep_window = 16;           // w of rep_w
};

struct Degeneration {
  int64_t T = 0;
  std::array<double, 4> seq_rep{};  // seq_rep_1 .. seq_rep_4
  double rep_w = 0;
  double rep_r = 0;
  double lrs = 0;
  int64_t max_run = 0;
  std::optional<int64_t> tail_period, tail_repeats, loop_onset;
  std::optional<bool> empty_content;       // when ContentOptions were given
  bool nonfinite_logits = false;
  bool degenerate = false;
  std::optional<std::string> rule;         // first rule that fired, null when none
  std::vector<std::string> rules_fired;    // every rule that fired, in check order
  std::string reason;                      // human text for the first rule, e.g. "tail_repeats 6 >= 4 ..."
  // Keys: T, seq_rep_1..4, rep_w, rep_r, lrs, max_run, tail_period, tail_repeats, loop_onset,
  // empty_content, nonfinite_logits, degenerate, rule, rules_fired, reason.
  nlohmann::json to_json() const;
};
Degeneration degeneration(std::span<const int32_t> x, const DegenRules& rules = {},
                          bool nonfinite_logits = false,
                          const std::optional<ContentOptions>& content = std::nullopt);

// ==== §5 Speculative decoding (MTP) ====

// mtp_equiv: greedy with MTP on equals greedy with MTP off token for token. first_difference = the
// first index where they differ, or the shorter length when one is a strict prefix of the other;
// nullopt when equal. JSON {mtp_equiv, first_difference}.
struct MtpEquiv {
  bool mtp_equiv = true;
  std::optional<int64_t> first_difference;
  nlohmann::json to_json() const;
};
MtpEquiv mtp_equiv(std::span<const int32_t> mtp_on, std::span<const int32_t> mtp_off);

// ==== §6 Verdicts and exit codes ====

// good: within tolerances and not degenerate. bad: divergent, or degenerate where the golden is
// not (engine-induced). untestable: cannot be tested here. model_intrinsic: degenerate, but the
// golden run is degenerate too under the same prompt and sampling (a warning).
enum class Verdict { good, bad, untestable, model_intrinsic };

// "good", "bad", "untestable", "model-intrinsic".
const char* verdict_name(Verdict v);
// good → 0, bad → 1, untestable → 125, model_intrinsic → 0 (a warning), or 1 when
// fail_on_model_degeneration (--fail-on-model-degeneration).
ExitCode exit_code(Verdict v, bool fail_on_model_degeneration = false);
// Combines the verdicts of several checks or cases: bad > untestable > model_intrinsic > good
// (a definite bad outranks an untestable cell; a warning outranks good).
Verdict worst(Verdict a, Verdict b);
// Model or engine: the tested run not degenerate → good; degenerate and the golden run (same
// prompt, same sampling) degenerate too → model_intrinsic; degenerate and the golden not, or no
// golden run to compare with (nullopt) → bad (engine-induced).
Verdict degeneration_verdict(bool tested_degenerate, std::optional<bool> golden_degenerate);
// "engine" for bad, "model-intrinsic" for model_intrinsic, "none" otherwise (the JSON `cause`).
const char* degeneration_cause(Verdict v);

}  // namespace degen::metrics

namespace degen {

// metrics::compare_logits_topk for every row of test logits [rows, V] against a golden top-K block;
// next[i] = the golden next token at row i (-1: none).
std::vector<metrics::LogitPosition> logit_positions(const std::vector<float>& logits, int64_t rows, int64_t V,
                                                    const TopKBlock& golden, const std::vector<int32_t>& next,
                                                    const std::vector<uint8_t>* mask);
double mean_kld(const std::vector<metrics::LogitPosition>& pos);

}  // namespace degen
