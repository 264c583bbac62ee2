// Generation loop over the Engine: prefill every prompt of a batch in one forward, then one
// decode step per token for the sequences still running, until a stop token, max_new_tokens or
// the model's maximum context. Tokens are chosen by the shared sampler (engine/sampler.h):
// temperature 0 is greedy (argmax, lowest id on ties); otherwise the coupled Philox draw keyed by
// (seed, case index, position), so the CPU and a GPU path draw the same numbers.
// With MTP (options.mtp.draft_tokens = k > 0) every sequence continues after the shared prefill
// with speculative rounds of its own (engine/spec_decode.h): greedy output is then token for token,
// and bit for bit in its logits, that of plain decode of the sequence alone.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/spec_stats.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/serving.h"
#include "engine/spec_decode.h"

namespace degen {

struct GenerateOptions {
  int max_new_tokens = 64;
  std::vector<int32_t> stop_ids;                     // generation ends after emitting one of these
  SamplingParams sampling;                           // temperature 0 = greedy
  const std::vector<uint8_t>* vocab_mask = nullptr;  // [V] 1 = never chosen (padding ids); masked to -inf
  uint32_t first_case = 0;                           // case index of prompt 0 (prompt i: first_case + i)
  MtpOptions mtp;                                    // MTP drafts per step and MTP faults (mtp_options(RunConfig))
  // Check every logits row a sequence's tokens are chosen from for values that are not finite (a
  // masked padding id's -inf excepted): GenerateResult::nonfinite_logits. Copies the logits to the
  // host at every step (golden: the reference runs on the CPU, where that is the data itself).
  bool check_finite = false;
  // Keep the K most probable ids of every row a token is chosen from, with their log-probabilities
  // over the unmasked vocabulary (GenerateResult::step_topk): golden's spot check of the path that
  // generated a continuation against the teacher-forced logits. Copies the logits to the host.
  int keep_topk = 0;
  // The serving mechanisms (engine/serving.h: serving_options(RunConfig)): chunked prefill, padded
  // decode steps, and with prefix_cache (the caller's, shared by its generate() calls) the prefix
  // cache. Off: the forward calls of plain generation.
  ServingOptions serving;
  PrefixCache* prefix_cache = nullptr;
};

// The top-K of one generation step's logits row (GenerateOptions::keep_topk), most probable first.
struct StepTopK {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
};

enum class StopReason : uint8_t { stop_token, max_tokens, max_context };
const char* stop_reason_name(StopReason r);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, the stop token included when there was one
  StopReason reason = StopReason::max_tokens;
  double prefill_seconds = 0;   // wall time of the batch prefill (shared by the batch)
  double decode_seconds = 0;    // wall time of the decode steps this sequence took part in
  bool nonfinite_logits = false;  // with GenerateOptions::check_finite
  std::vector<StepTopK> step_topk;  // with GenerateOptions::keep_topk: one per token in `tokens` (plain decode)
  // MTP (options.mtp.draft_tokens > 0): one entry per verify step, and their summary
  // (accept_rate, accept_len; metrics.md §5). Empty / nullopt without MTP.
  std::vector<VerifyStep> verify_steps;
  std::optional<SpecDecode> spec;
};

// Throws InputError for an empty prompt or bad sampling parameters, UntestableError for MTP drafts
// on a checkpoint without MTP weights.
std::vector<GenerateResult> generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& options, Trace* trace = nullptr);

}  // namespace degen
