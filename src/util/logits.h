// The real-id rules of one logits row, shared by the golden record's top-K and by every metric:
// `excluded` is empty (every id is real) or one byte per row (1: a padding id of the vocabulary, no
// token, never counted). Pure fp64 arithmetic, no state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace degen::metrics {

bool is_real(std::span<const uint8_t> excluded, size_t i);
// std::invalid_argument naming `who` when a non-empty mask is not one entry per logit.
void check_mask(std::span<const uint8_t> excluded, size_t V, const char* who);
// Count of NaN / +inf among the real ids; `all_neg_inf` set when no real logit exceeds -inf.
int64_t undefined_logits(std::span<const float> logits, std::span<const uint8_t> excluded, bool& all_neg_inf);
size_t count_real(std::span<const uint8_t> excluded, size_t V);
// The largest real logit (-inf when there is none above -inf; NaN ignored: counted elsewhere).
double max_real_logit(std::span<const float> logits, std::span<const uint8_t> excluded);

// log-softmax over the real ids, fp64 (excluded ids get -inf), as (x_i − m) − ln Σ exp(x_j − m)
// with m the largest real logit (never x_i − (m + ln Σ...): beside a logit of 1e20 that sum
// rounds away and every id at the maximum got p = 1). Throws std::invalid_argument when there is
// no real id; returns all-NaN when the distribution is undefined (NaN/+inf or all -inf).
std::vector<double> log_softmax(std::span<const float> logits, std::span<const uint8_t> excluded = {});

}  // namespace degen::metrics
