// `degenbisect faults`: the fault catalogue (DESIGN.md §7, src/engine/faults.cpp): every named bug
// class a run can inject with `--config fault=NAME[@layers]`, where it can act, the trace step it
// corrupts first, what the buggy engine does and the public report it mirrors.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/faults.h"
#include "engine/backend.h"
#include "util/json_output.h"

namespace degen::cli {
namespace {

int run_faults(bool json_out) {
  const auto& cat = fault_catalogue();
  if (json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const FaultInfo& f : cat)
      j.push_back({{"name", f.name},
                   {"site", fault_site_name(f.site)},
                   {"op", f.op},
                   {"description", f.description},
                   {"source", f.source},
                   {"forward_pass", f.applied == FaultApplied::op_flag},
                   {"needs_tp", f.needs_tp},
                   {"needs_mtp", f.needs_mtp},
                   {"needs", f.needs ? nlohmann::json(f.needs) : nlohmann::json(nullptr)},
                   {"mechanism", f.mechanism ? nlohmann::json(f.mechanism) : nlohmann::json(nullptr)}});
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  std::printf("%zu faults. Inject one with --config fault=NAME[@layers], e.g. fault=rope-interleaved@3, "
              "fault=gdn-head-mod@linear.\n\n",
              cat.size());
  for (const FaultInfo& f : cat) {
    std::printf("%s\n  acts on: %s; first corrupted step: %s\n  %s\n  source: %s\n", f.name, fault_site_name(f.site),
                f.op, f.description, f.source);
    if (f.mechanism) std::printf("  lives in: the %s mechanism; needs %s\n", f.mechanism, f.needs);
    else if (f.needs_tp) std::printf("  needs: tp > 1\n");
    else if (f.needs_mtp) std::printf("  needs: mtp > 0\n");
    std::printf("\n");
  }
  return 0;
}

CommandRegistrar reg("faults", "List the fault catalogue: bug classes a run can inject (fault=NAME@layers)", 75,
                     [](CLI::App* sub) -> std::function<int()> {
                       auto json_out = std::make_shared<bool>(false);
                       sub->add_flag("--json", *json_out, "Print the catalogue as JSON");
                       sub->footer("Examples:\n  degenbisect faults\n"
                                   "  degenbisect run --model models/tiny-qwen35 --prompt 'What is 2+2?' "
                                   "--config fault=gdn-head-mod@4");
                       return [json_out] { return run_faults(*json_out); };
                     });

}  // namespace
}  // namespace degen::cli
