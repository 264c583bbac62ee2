// What speculative decoding (MTP) did, as the engine records it: one VerifyStep per verify pass,
// summarised by spec_decode() into the acceptance figures of spec metrics.md §5. The engine produces
// them (engine/spec_decode.h, engine/generate.h); the diagnostics read them (judge/metrics.h).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace degen {

// One verify step: `proposed` drafts checked, `accepted` of them accepted (0 ≤ accepted ≤ proposed);
// the step emits accepted + 1 tokens, the first at index `position` of the generated sequence.
struct VerifyStep {
  int proposed = 0;
  int accepted = 0;
  int64_t position = 0;
};
// Secondary signal: inside a loop (steps with position ≥ loop_onset), an acceptance rate ≥ high
// while it was < high before ("accept_rate_jump"), or ≤ low while it was > low before
// ("accept_rate_collapse"). Needs steps on both sides of the onset.
struct SpecRules {
  double high = 0.95;
  double low = 0.05;
};
struct SpecDecode {
  int64_t steps = 0, proposed = 0, accepted = 0;
  std::optional<double> accept_rate;         // accepted / proposed (null when nothing proposed)
  std::optional<double> accept_len;          // mean(accepted + 1) over steps (null when no step)
  std::optional<double> accept_rate_before;  // before loop_onset
  std::optional<double> accept_rate_loop;    // from loop_onset on
  std::optional<std::string> accept_anomaly; // "accept_rate_jump" / "accept_rate_collapse"
  nlohmann::json to_json() const;
};
SpecDecode spec_decode(std::span<const VerifyStep> steps, std::optional<int64_t> loop_onset = std::nullopt,
                       const SpecRules& rules = {});

}  // namespace degen
