// The token sampler shared by every backend: greedy, temperature, top-k, top-p, min-p, repetition
// penalty (multiplicative, as Hugging Face) and presence penalty (additive, as OpenAI / vLLM), with
// the random number drawn from Philox4x32-10 keyed by (seed; case, position) (util/philox.h), so that
// the CPU reference and a GPU path draw the same uniform and their tokens differ only where their
// distributions do (DESIGN.md §5, "sampling is coupled").
//
// Order of operations (all arithmetic in fp64 on a copy of the fp32 logits; V = logits.size()):
//  1. Removed set. Banned ids (banned[i] != 0) and NaN logits are removed: never chosen, never counted.
//  2. Repetition penalty r (HF RepetitionPenaltyLogitsProcessor): for every distinct id t in
//     prompt_ids ∪ generated_ids with 0 <= t < V, applied once: x_t = x_t < 0 ? x_t * r : x_t / r.
//     Ids outside [0, V) are ignored (HF drops ids >= V too).
//  3. Presence penalty q (OpenAI definition, as vLLM's apply_penalties, which runs it after the
//     repetition penalty): x_t -= q once for every distinct id t in generated_ids only; prompt ids
//     are not penalised (vLLM's output_mask).
//  4. temperature == 0: greedy. Return argmax x over the ids not removed, lowest id on ties. Steps
//     5-10 do not apply (top-k/top-p/min-p always keep the argmax). Penalties do apply, as in HF,
//     where logits processors run in greedy search too.
//  5. Temperature T (HF TemperatureLogitsWarper, x / T): z = (x - x_max) / T, which is HF's x / T
//     shifted by the constant x_max / T: it changes no probability and no comparison below, but
//     cannot overflow for a tiny T (if x_max = +inf: z = 0 for the +inf ids, -inf for the others).
//     HF's warpers then run in the order temperature -> top-k -> top-p -> min-p (transformers 5.x,
//     GenerationMixin._get_logits_processor), and so do we.
//  6. top-k (k > 0, HF TopKLogitsWarper): remove every z < the k-th largest z. Ties with the k-th
//     value are all kept, so more than k ids may survive, exactly as HF (`scores < topk(...)[-1]`).
//     Ids with z = -inf are treated as removed everywhere.
//  7. Probabilities over the survivors: w_i = exp(z_i - z_max) (z_max = 0 here), S = sum of w_i in
//     ascending id order, p_i = w_i / S.
//  8. top-p (top_p < 1, HF TopPLogitsWarper): order the survivors by p descending, ties by ascending
//     id; walking that order, let A be the fp64 sum of the p of the ids before the current one; keep
//     the current id iff A < top_p; the first id is always kept (HF's min_tokens_to_keep = 1). This is
//     HF's rule written the other way round: HF sorts ascending and removes an id when its inclusive
//     ascending cumulative probability is <= 1 - top_p, i.e. when the mass above it is >= top_p. So
//     with p = (0.5, 0.3, 0.15, 0.05) and top_p = 0.8, exactly the first two survive (0.5 + 0.3 is
//     not < 0.8), as HF gives. note: HF's order among equal probabilities is that of torch.sort
//     (not stable by default, observed to vary with size); ours is lowest id first.
//  9. min-p (min_p > 0, HF MinPLogitsWarper, after temperature and after top-p): remove p_i <
//     min_p * p_max (strict: p_i == min_p * p_max is kept). HF's softmax here runs over the top-k /
//     top-p survivors; the test is a ratio to p_max, so it does not depend on that renormalisation.
// 10. Final distribution: the surviving p_i renormalised by their sum in ascending id order
//     (sampling_distribution returns it; zeros elsewhere).
// 11. Draw: u = philox_uniform(seed, case_index, position, stream 0), 53 bits in [0, 1). Inverse CDF
//     in ascending token-id order: C_i = sum_{j <= i} p_j (fp64, ascending id), T = C_{V-1}; the token
//     is the first i with u * T < C_i (ids with p_i = 0 can never be chosen). Ascending id order makes
//     the choice independent of any sort, so a GPU can reproduce it with a prefix sum.
//
// Checked against HF (transformers 5.24, its processors run in fp64 on 380 random cases with
// penalties, temperature, top-k, top-p, min-p): the same surviving ids except, where probabilities
// tie at the top-p cut, which of the tied ids survive; probabilities equal within 1.3e-15.
//
// Degenerate logits: if every id that is not banned is NaN or -inf, the lowest id that is not banned
// is returned (deterministically; engines with NaN logits typically emit id 0 the same way); the
// caller's NaN/Inf checks are what report such a step. Every id banned is an error.
//
// note: bit-for-bit reproduction on a GPU needs the same fp64 operations in the same order; exp() is
// the one operation whose last bit may differ between libm and CUDA, which only matters when u falls
// within ~1e-16 (relative) of a CDF boundary. A GPU path that must match exactly can copy its fp32
// logits to the host and call sample() itself: the coupling is in the draw, not in the arithmetic.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace degen {

// Sampling settings (the temp, top_k, top_p, min_p, rep_pen, presence_pen, seed toggles of
// DESIGN.md §5). note: real values are double so that "0.8" from a config string is the same number
// as Python's 0.8 in HF; as a float it is 0.800000011920929, which moves the top-p boundary.
struct SamplingParams {
  double temperature = 0;         // 0 = greedy; > 0: logits / temperature
  int top_k = 0;                  // 0 = off; keep ids whose score ties or beats the k-th largest
  double top_p = 1;               // [0, 1]; 1 = off; smallest prefix (by probability) with mass >= top_p
  double min_p = 0;               // [0, 1]; 0 = off; keep p >= min_p * p_max
  double repetition_penalty = 1;  // > 0; 1 = off; HF multiplicative, over prompt + generated ids
  double presence_penalty = 0;    // 0 = off; OpenAI additive, over generated ids only
  uint64_t seed = 0;              // Philox key
};

// Throws InputError (exit 128) naming the bad field: temperature < 0 or not finite, top_k < 0,
// top_p or min_p outside [0, 1], repetition_penalty <= 0 or not finite, presence_penalty not finite.
void validate(const SamplingParams& params);

// Returns the chosen token. logits [V] fp32; banned [V] or empty: ids that may never be chosen
// (padding); prompt_ids / generated_ids: the sequence so far (for the penalties); position: index of
// the token being chosen in the full sequence (prompt + generated).
int32_t sample(const SamplingParams& params, std::span<const float> logits, std::span<const uint8_t> banned,
               std::span<const int32_t> prompt_ids, std::span<const int32_t> generated_ids,
               uint32_t case_index, uint32_t position);

// ---- the pieces, for tests and for the MTP coupled-acceptance step ----

// Steps 1-3: the penalised logits [V] fp64; removed ids (banned, NaN) are -inf.
std::vector<double> penalized_logits(const SamplingParams& params, std::span<const float> logits,
                                     std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                                     std::span<const int32_t> generated_ids);

// Steps 1-10: the final distribution [V] fp64, summing to 1 (up to rounding); zeros for removed ids.
// Greedy (temperature 0) and degenerate logits give a one-hot vector at the token sample() returns.
std::vector<double> sampling_distribution(const SamplingParams& params, std::span<const float> logits,
                                          std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                                          std::span<const int32_t> generated_ids);

// Argmax over scores [V], lowest id on ties, skipping NaN; -1 if every score is NaN or -inf.
int32_t argmax_lowest(std::span<const double> scores);

// Step 6 in place on scores [V]: sets removed ids to -inf. k <= 0, or k >= the number of scores that
// are neither NaN nor -inf: no change.
void top_k_filter(std::span<double> scores, int k);

// Step 7: probabilities [V] from scores [V] (removed = -inf -> 0). All zeros if no score is finite
// or +inf.
std::vector<double> softmax_fp64(std::span<const double> scores);

// Step 8 in place on probabilities [V] (zeros = removed): zeroes the ids top-p removes. No
// renormalisation. top_p >= 1: no change.
void top_p_filter(std::span<double> probs, double top_p);

// Step 9 in place on probabilities [V]: zeroes p_i < min_p * max p. min_p <= 0: no change.
void min_p_filter(std::span<double> probs, double min_p);

// Step 11: the first id i (ascending) with u * T < C_i, where C is the ascending-id prefix sum of
// `weights` (probabilities or any non-negative weights) and T its total; -1 if T is 0.
// u in [0, 1).
int32_t inverse_cdf(std::span<const double> weights, double u);

// The uniform sample() draws for (seed; case, position): philox_uniform(..., kPhiloxStreamToken).
double sampling_uniform(uint64_t seed, uint32_t case_index, uint32_t position);

}  // namespace degen
