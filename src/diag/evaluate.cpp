// Compare results reduced to sweep / bisect cells (see evaluate.h).
#include "diag/evaluate.h"

#include <algorithm>

namespace degen {

CellSummary summarize_compare(const CompareResult& r) {
  CellSummary s;
  s.verdict = metrics::verdict_name(r.verdict);
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseResult& c : r.cases) {
    if (c.first_break && (s.worst_layer < 0 || c.first_break->second < s.worst_layer)) s.worst_layer = c.first_break->second;
    if (c.logits[0]) s.kld_mean = std::max(s.kld_mean.value_or(0.0), c.logits[0]->mean_kld);
    if (c.gen.degen.T > 0) s.seq_rep_4 = std::max(s.seq_rep_4.value_or(0.0), c.gen.degen.seq_rep[3]);
    if (c.gen.degen.loop_onset && (!s.loop_onset || *c.gen.degen.loop_onset < *s.loop_onset))
      s.loop_onset = *c.gen.degen.loop_onset;
    if (s.reason.empty() && c.verdict != metrics::Verdict::good && !c.reasons.empty()) s.reason = c.id + ": " + c.reasons.front();
    cases.push_back({{"id", c.id}, {"verdict", metrics::verdict_name(c.verdict)}, {"reasons", c.reasons},
                     {"first_break", c.first_break ? nlohmann::json(c.first_break->second) : nlohmann::json(nullptr)}});
  }
  s.detail = {{"cases", cases}, {"floors", r.floors}, {"seconds", r.seconds}};
  return s;
}

CellEvaluator compare_evaluator(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, CompareOptions base,
                                BackendFactory factory) {
  return [&rec, &model, tok, base, factory](const RunConfig& rc) {
    CompareOptions o = base;
    o.config = rc;
    return summarize_compare(compare_golden(rec, model, tok, o, factory, nullptr));
  };
}

}  // namespace degen
