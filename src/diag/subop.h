// Sub-op localisation (DESIGN.md §7 step 2, issue "bisect" step 3): on a suspect layer, with the
// golden input of that layer injected, the error of every intermediate of the layer (for GDN:
// projections, conv, l2norm, gates, recurrence, gated norm, out_proj; for attention: projections,
// norms, rope, core, gate, o_proj; for MLP/MoE: router, experts) against the reference, next to
// the same error of a known-good bf16 run (the op's noise floor). The first op in forward order
// that breaks k·floor + eps is named; the ops after it inherit its error.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/forced_run.h"
#include "record/golden_record.h"
#include "judge/metrics.h"
#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "model/model.h"

namespace degen {

struct SubopRow {
  std::string step;                          // trace step name ("gdn_core")
  metrics::TensorError err;                  // tested vs reference
  std::optional<double> floor;               // known-good bf16 run vs reference (rel_l2)
  double limit = 0;                          // what err.rel_l2 may reach
  bool pass = true;
};

struct SubopReport {
  int layer = 0;
  char kind = 'G';
  ForcedMode mode = ForcedMode::prefill;
  std::string case_id;
  int64_t positions = 0;
  std::vector<SubopRow> rows;                // forward order
  std::optional<std::string> first_break;    // step name of the first op over its limit
  // The fused op of the engine's path that computes first_break (engine/fused_ops.h), in words, or
  // nullopt where first_break is an op of its own; and the steps of that op the tested backend's
  // kernel keeps inside (not written to the trace: the fault may be in any of them, in order).
  std::optional<std::string> fused_op;
  std::vector<std::string> inside;
  std::string floor_config;                  // the known-good run, or why there is no floor
  nlohmann::json to_json() const;
};

// The captures of the reference and floor runs of earlier analyses (they do not depend on the
// tested configuration), for one record, model and backend factory: selftest analyses dozens of
// faults at the same few layers. note: bounded (kMaxFloats); past it, captures are not kept.
struct SubopCache {
  static constexpr size_t kMaxFloats = size_t(1) << 28;  // 1 GiB of fp32
  std::map<std::string, std::map<std::string, std::vector<float>>> captures;  // key -> step -> rows
  size_t floats = 0;
};

// Runs the reference (precision=ref), the floor configuration (precision=bf16, default toggles)
// and `tested` on case `case_index` of the record with the golden input of `layer` injected, in both
// prefill and decode mode. Without a floor (bf16 untestable), the limit is metrics' fallback 1e-4.
// With a cache, the reference and floor runs an earlier call made are reused.
std::vector<SubopReport> subop_analysis(const GoldenRecord& rec, const Model& model, const RunConfig& tested, int layer,
                                        const BackendFactory& factory, size_t case_index = 0, int64_t max_positions = 64,
                                        SubopCache* cache = nullptr);

// The op the reports name: the decode-mode break when prefill shows none, else the prefill one.
std::optional<std::string> named_op(const std::vector<SubopReport>& reports);

}  // namespace degen
