// Batch generation: prefill together, decode together, sample per sequence on the host.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "util/error.h"

namespace degen {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::stop_token: return "stop token";
    case StopReason::max_tokens: return "max tokens";
    case StopReason::max_context: return "max context";
  }
  return "?";
}

std::vector<GenerateResult> generate(Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& opt, Trace* trace) {
  using clock = std::chrono::steady_clock;
  validate(opt.sampling);
  const ModelConfig& cfg = eng.config();
  const size_t n = prompts.size();
  std::vector<GenerateResult> res(n);
  if (n == 0 || opt.max_new_tokens <= 0) return res;
  std::vector<SeqState> states;
  for (size_t i = 0; i < n; ++i) {
    if (prompts[i].empty()) input_error("case ", opt.first_case + i, ": empty prompt");
    states.push_back(eng.new_state());
  }
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = opt.vocab_mask;
  std::span<const uint8_t> banned;
  if (opt.vocab_mask) banned = *opt.vocab_mask;
  const int64_t V = cfg.vocab_size;

  // Chooses the next token of every active sequence from its logits row.
  std::vector<size_t> active;
  auto choose = [&](const Tensor& logits) {
    std::vector<float> lg = eng.backend().to_host_f32(logits);
    std::vector<size_t> still;
    for (size_t r = 0; r < active.size(); ++r) {
      const size_t i = active[r];
      std::span<const float> row(lg.data() + r * V, static_cast<size_t>(V));
      const uint32_t position = static_cast<uint32_t>(prompts[i].size() + res[i].tokens.size());
      int32_t tok = sample(opt.sampling, row, banned, prompts[i], res[i].tokens,
                           opt.first_case + static_cast<uint32_t>(i), position);
      res[i].tokens.push_back(tok);
      if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), tok) != opt.stop_ids.end())
        res[i].reason = StopReason::stop_token;
      else if (static_cast<int>(res[i].tokens.size()) >= opt.max_new_tokens)
        res[i].reason = StopReason::max_tokens;
      else if (cfg.max_position_embeddings > 0 && states[i].pos >= cfg.max_position_embeddings)
        res[i].reason = StopReason::max_context;
      else
        still.push_back(i);
    }
    active = std::move(still);
  };

  // Prefill all prompts in one batch.
  std::vector<SeqInput> in;
  for (size_t i = 0; i < n; ++i) {
    in.push_back({&states[i], prompts[i]});
    active.push_back(i);
  }
  auto t0 = clock::now();
  ForwardOutput out = eng.forward(in, fo, trace);
  const double prefill = std::chrono::duration<double>(clock::now() - t0).count();
  for (auto& r : res) r.prefill_seconds = prefill;
  choose(out.logits);

  // Decode the running sequences together, one token each per step.
  while (!active.empty()) {
    std::vector<SeqInput> step;
    for (size_t i : active) step.push_back({&states[i], {res[i].tokens.back()}});
    auto t1 = clock::now();
    ForwardOutput o = eng.forward(step, fo, trace);
    const double dt = std::chrono::duration<double>(clock::now() - t1).count();
    for (size_t i : active) res[i].decode_seconds += dt;
    choose(o.logits);
  }
  return res;
}

}  // namespace degen
