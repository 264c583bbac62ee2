// The teacher-forced driver shared by golden, compare, localise and the server comparison: a token
// sequence through an engine from a fresh state, in one prefill or one token per call, with layer
// outputs captured, golden layer inputs injected (isolated layers) or one layer's output patched.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "judge/metrics.h"
#include "record/forced_mode.h"
#include "engine/engine.h"

namespace degen {

// ForcedMode (prefill, decode): record/forced_mode.h. A decode run can start with a prefill of the
// first tokens (ForcedOptions::prefill_positions): the order generation takes (the prompt in one call,
// then one token per call).

// Golden layer inputs to inject (metrics.md §3): in[L] = the input of layer L over positions
// [0, P) (row-major [P, H]): the embedding for L = 0, else the golden output of layer L-1; an empty
// vector leaves layer L's input alone.
struct LayerInputs {
  int64_t positions = 0;  // P
  int64_t hidden = 0;     // H
  std::vector<std::vector<float>> in;  // [L] of [P * H] or empty
};

struct ForcedOptions {
  ForcedMode mode = ForcedMode::prefill;
  int64_t run_positions = -1;              // tokens to run (-1: all); injection needs <= inject->positions
  int64_t capture_positions = 0;           // P: layer outputs kept for positions [0, P)
  std::vector<bool> capture_layers;        // [L]; empty = none
  const LayerInputs* inject = nullptr;     // golden inputs (isolated run), or null
  bool logits = true;                      // keep the logits of every position
  bool mtp = false;                        // prefill only: MTP draft logits for every position but the last
  bool mtp_prenorm_hidden = false;         // fault mtp-prenorm-hidden: feed the MTP head l_out-(L-1), not the post-norm hidden
  const std::vector<uint8_t>* vocab_mask = nullptr;
  // decode only: the first N tokens in ONE forward call that keeps only its last logits row (as
  // generate() prefills a prompt), then one token per call; logits then start at position N - 1
  // (ForcedRun::logits_pos0). 0: every token through the decode path. No injection with it.
  int64_t prefill_positions = 0;
  // Confirmation by patching (localise.h): the output of layer patch_layer replaced by patch_out
  // (row-major [P, H], the record's l_out) at positions [0, P); run_positions must not exceed P.
  int patch_layer = -1;
  const std::vector<float>* patch_out = nullptr;
};

struct ForcedRun {
  int64_t T = 0;                          // positions run
  int64_t P = 0;                          // positions captured
  std::vector<float> logits;              // [T - logits_pos0, V] (padding ids -inf)
  int64_t logits_pos0 = 0;                // position of the first logits row (prefill_positions - 1, else 0)
  std::vector<float> embed;               // [P, H] the model's own embedding output
  std::vector<std::vector<float>> l_out;  // [L] of [P, H] for captured layers (else empty)
  std::vector<float> l_out_norm;          // [L, T] row L2 norms of every layer output
  std::vector<float> mtp_logits;          // [T-1, V] when asked and the model has MTP
  double seconds = 0;
};

// Runs `tokens` teacher-forced through `eng` from a fresh state.
ForcedRun forced_run(Engine& eng, const std::vector<int32_t>& tokens, const ForcedOptions& opt);

// The golden layer inputs of a record's data: in[0] = embed, in[L] = l_out[L-1].
LayerInputs make_layer_inputs(const std::vector<float>& embed, const std::vector<std::vector<float>>& l_out, int64_t P,
                              int64_t H);
// Per-layer tensor errors of test against golden outputs (nullopt where either is absent, or, with
// `inputs`, where the layer's input was not injected).
std::vector<std::optional<metrics::TensorError>> layer_errors(const std::vector<std::vector<float>>& test,
                                                              const std::vector<std::vector<float>>& golden,
                                                              const LayerInputs* inputs);

}  // namespace degen
