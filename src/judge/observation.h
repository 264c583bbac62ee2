// Does observing the layers change the result? (DESIGN.md §7, "Observe what runs")
// The engine has one path: a run whose layers are observed (forced_run's captures, localisation,
// sub-op analysis) calls the same ops as the verdict run, and the fused ops write the steps inside
// them to the trace without computing anything else (Backend::TapSink). This check holds the engine
// to that: a case's tokens prefilled twice on fresh states, once with an observer offered every step
// of every layer, once without, and the logits compared bit for bit. On the CPU the two runs are the
// same arithmetic; on the CUDA path the same kernels with the same launch shapes, and no kernel of
// ours reduces with atomics, so they are bit-equal too. A difference is itself a finding: the layer
// figures of the observed runs do not describe the run that produced the verdict (a fused kernel that
// computes otherwise when asked for its taps, or a race that the extra writes change).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen {

class Engine;

struct ObservationCheck {
  std::string case_id;
  int64_t positions = 0;   // tokens prefilled
  int64_t values = 0;      // logits compared
  int64_t differing = 0;   // of them, not bit-equal
  double max_abs = 0;      // largest |observed - unobserved| (NaN/inf against finite: inf)
  int64_t steps = 0;       // steps offered to the observer (0: the check observed nothing)
  bool equal() const { return differing == 0; }
  nlohmann::json to_json() const;
  std::string reason() const;  // one sentence when !equal()
};

// The first `max_positions` tokens of `tokens` (case `case_id`) through `eng`, observed and not.
ObservationCheck check_observation(Engine& eng, const std::vector<int32_t>& tokens, const std::vector<uint8_t>* vocab_mask,
                                   const std::string& case_id, int64_t max_positions = 64);

}  // namespace degen
