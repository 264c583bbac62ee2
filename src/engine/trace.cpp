// Trace step table (the names are defined once, in trace.h's DEGEN_TRACE_STEPS).
#include "engine/trace.h"

namespace degen {

const std::vector<StepInfo>& trace_steps() {
  static const std::vector<StepInfo> steps = {
#define DEGEN_STEP_INFO(name, per_layer, what) {Step::name, #name, per_layer, what},
      DEGEN_TRACE_STEPS(DEGEN_STEP_INFO)
#undef DEGEN_STEP_INFO
  };
  return steps;
}

const char* step_name(Step s) { return trace_steps()[static_cast<size_t>(s)].name; }

std::string trace_name(Step s, int layer) {
  std::string n = step_name(s);
  if (layer >= 0) n += "-" + std::to_string(layer);
  return n;
}

}  // namespace degen
