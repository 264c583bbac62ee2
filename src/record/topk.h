// Top-K of logits rows under the golden rules (what a golden record stores per position). The
// comparison of a run's logits with a stored top-K is judge/metrics.h (logit_positions).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>


namespace degen {

// Top-K of one logits row under the golden rules: log-softmax in fp64 over the real ids, K most likely
// (descending, lowest id on ties), the log-sum-exp over the real ids (lse) and lse_pad = the
// log-sum-exp over all V rows minus lse (meaningful only when the row's padding logits are really
// there, not masked to -inf).
struct TopK {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  double lse = 0;
  double lse_pad = 0;  // >= 0; NaN when a padding logit is not finite
};
TopK topk_of_row(const float* logits, int64_t V, const std::vector<uint8_t>* mask, int k);

// Top-K of `rows` logits rows [rows, V]. undefined_row >= 0: that row is not a distribution.
struct TopKBlock {
  int K = 0;
  std::vector<int32_t> ids;      // [rows, K]
  std::vector<float> logprobs;   // [rows, K]
  std::vector<float> lse;        // [rows] over the real ids
  std::vector<float> lse_pad;    // [rows] log-sum-exp over all V rows minus lse; empty in older records
  int64_t undefined_row = -1;
};
TopKBlock topk_block(const std::vector<float>& logits, int64_t rows, int64_t V, const std::vector<uint8_t>* mask, int K);
// From the record's normalisation to an engine's that normalises over all vocab_size rows, at `row`:
// log p_engine(i) = topk_logprobs(i) + vocab_shift, vocab_shift = lse - lse_vocab = -lse_pad (<= 0;
// exactly 0 when there are no padding rows). nullopt when the block has no (finite) lse_pad: an
// older record.
std::optional<double> vocab_shift(const TopKBlock& b, int64_t row);

}  // namespace degen
