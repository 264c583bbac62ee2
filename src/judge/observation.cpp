// Observed run against the run that is not observed (see observation.h).
#include "judge/observation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "judge/metrics.h"
#include "engine/engine.h"
#include "engine/trace.h"
#include "util/error.h"

namespace degen {

namespace {

std::vector<float> prefill_logits(Engine& eng, const std::vector<int32_t>& tokens, const std::vector<uint8_t>* mask,
                                  Trace* tr) {
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  fo.vocab_mask = mask;
  return eng.backend().to_host_f32(eng.forward({SeqInput{&st, tokens}}, fo, tr).logits);
}

}  // namespace

ObservationCheck check_observation(Engine& eng, const std::vector<int32_t>& tokens, const std::vector<uint8_t>* vocab_mask,
                                   const std::string& case_id, int64_t max_positions) {
  ObservationCheck c;
  c.case_id = case_id;
  c.positions = std::min<int64_t>(static_cast<int64_t>(tokens.size()), max_positions);
  if (c.positions <= 0) return c;
  const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + c.positions);
  Trace tr;  // offered every step; reads none of them (the engine's taps are what is under test)
  tr.observer = [&c](const TraceEvent&, Tensor&, Backend&) { ++c.steps; };
  const std::vector<float> observed = prefill_logits(eng, prefix, vocab_mask, &tr);
  const std::vector<float> plain = prefill_logits(eng, prefix, vocab_mask, nullptr);
  DEGEN_ASSERT(observed.size() == plain.size(), "observation check: ", observed.size(), " logits observed, ",
               plain.size(), " not");
  c.values = static_cast<int64_t>(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    if (std::memcmp(&observed[i], &plain[i], sizeof(float)) == 0) continue;
    ++c.differing;
    const double d = std::abs(double(observed[i]) - double(plain[i]));
    c.max_abs = std::max(c.max_abs, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return c;
}

std::string ObservationCheck::reason() const {
  return cat("observing the layers changes the result: case '", case_id, "' prefilled over ", positions,
             " tokens with every layer step observed gives ", differing, " of ", values,
             " logits that differ from the same run unobserved (largest difference ", max_abs,
             "); the layer figures of the observed runs do not describe the verdict run (a fused kernel that computes ",
             "otherwise when it writes its taps, or a race)");
}

}  // namespace degen
