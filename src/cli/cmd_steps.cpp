// `degenbisect steps`: the trace steps of the forward pass (engine/trace.h) in forward order, what each
// holds, and the fused op of the engine's path that computes it in a GDN layer and in a gated-attention
// layer (engine/fused_ops.h): the words bisect, localise and `run --dump` name a step with. A step inside
// a fused op is written by the op when the layer is observed; where a GPU kernel keeps it inside,
// localisation names the fused op and its steps instead (docs/architecture.md, "Observation").
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/fused_ops.h"
#include "engine/trace.h"
#include "util/json_output.h"

namespace degen::cli {
namespace {

nlohmann::json fused_json(const FusedOp* f) {
  if (!f) return nullptr;
  nlohmann::json steps = nlohmann::json::array();
  for (Step s : f->steps) steps.push_back(step_name(s));
  return {{"op", f->op}, {"steps", steps}, {"what", f->what}};
}

int run_steps(bool json_out) {
  // The dense layer's op (moe = false); a MoE layer differs only in its FFN steps, listed apart.
  if (json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const StepInfo& s : trace_steps())
      j.push_back({{"step", s.name},
                   {"per_layer", s.per_layer},
                   {"what", s.what},
                   {"fused_op_gdn_layer", fused_json(fused_op_of(s.step, LayerKind::linear, false))},
                   {"fused_op_attention_layer", fused_json(fused_op_of(s.step, LayerKind::full, false))},
                   {"fused_op_moe_layer", fused_json(fused_op_of(s.step, LayerKind::full, true))}});
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  std::printf("%zu trace steps in forward order (a layer's steps are named STEP-LAYER, e.g. gdn_conv-4).\n"
              "'in' names the fused op that computes the step (G: GDN layer, A: attention layer, M: MoE FFN).\n\n",
              trace_steps().size());
  for (const StepInfo& s : trace_steps()) {
    std::printf("%-12s %s\n", s.name, s.what);
    const FusedOp* g = fused_op_of(s.step, LayerKind::linear, false);
    const FusedOp* a = fused_op_of(s.step, LayerKind::full, false);
    const FusedOp* m = fused_op_of(s.step, LayerKind::full, true);
    if (g && g == a) {
      std::printf("             in (G, A) %s\n", fused_op_words(*g).c_str());
    } else {
      if (g) std::printf("             in (G) %s\n", fused_op_words(*g).c_str());
      if (a) std::printf("             in (A) %s\n", fused_op_words(*a).c_str());
    }
    if (m && m != a) std::printf("             in (M) %s\n", fused_op_words(*m).c_str());
  }
  return 0;
}

CommandRegistrar reg("steps", "List the trace steps of the forward pass and the fused op that computes each", 76,
                     [](CLI::App* sub) -> std::function<int()> {
                       auto json_out = std::make_shared<bool>(false);
                       sub->add_flag("--json", *json_out, "Print the steps as JSON");
                       sub->footer("Examples:\n  degenbisect steps\n  degenbisect steps --json");
                       return [json_out] { return run_steps(*json_out); };
                     });

}  // namespace
}  // namespace degen::cli
