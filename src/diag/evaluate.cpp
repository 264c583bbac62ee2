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
    nlohmann::json cj = {{"id", c.id}, {"verdict", metrics::verdict_name(c.verdict)}, {"reasons", c.reasons},
                         {"first_break", c.first_break ? nlohmann::json(c.first_break->second) : nlohmann::json(nullptr)}};
    // What bisect needs to name the op of a model-level (MTP) culprit.
    if (c.mtp) cj["mtp_drafts_pass"] = c.mtp->pass;
    if (c.mtp_forced && c.mtp_forced->state_layer)
      cj["mtp_rollback_state"] = {{"layer", *c.mtp_forced->state_layer}, {"position", *c.mtp_forced->state_position},
                                  {"part", c.mtp_forced->state_part}, {"rel_l2", metrics::json_number(c.mtp_forced->state_err)}};
    for (const ServingCheck& sc : c.serving)
      if (sc.state_layer && !cj.contains("serving_state"))
        cj["serving_state"] = {{"mechanism", sc.mechanism}, {"what", sc.what}, {"layer", *sc.state_layer}, {"part", sc.state_part},
                               {"position", *sc.state_position}, {"rel_l2", metrics::json_number(sc.state_err)}};
    bool main_pass = true;
    for (const auto& l : c.logits) main_pass = main_pass && (!l || l->pass);
    cj["main_logits_pass"] = main_pass && !c.first_break;
    cases.push_back(std::move(cj));
  }
  s.detail = {{"cases", cases}, {"floors", r.floors}, {"seconds", r.seconds}};
  return s;
}

std::optional<MtpOp> mtp_culprit_op(const CellSummary& s) {
  if (!s.detail.contains("cases") || !s.detail["cases"].is_array()) return std::nullopt;
  for (const nlohmann::json& c : s.detail["cases"])
    if (c.contains("mtp_rollback_state") && c["mtp_rollback_state"].is_object())
      return MtpOp{"gdn_core", c["mtp_rollback_state"].value("layer", -1), c.value("id", ""), c["mtp_rollback_state"]};
  for (const nlohmann::json& c : s.detail["cases"])
    if (c.value("mtp_drafts_pass", true) == false && c.value("main_logits_pass", false))
      return MtpOp{"mtp_in", -1, c.value("id", ""), nlohmann::json::object()};
  return std::nullopt;
}

std::optional<ServingOp> serving_culprit(const CellSummary& s, const std::string& mechanism) {
  if (mechanism == "rollback") {
    auto m = mtp_culprit_op(s);
    if (!m || m->op != "gdn_core") return std::nullopt;
    const std::string part = m->evidence.value("part", "S");
    return ServingOp{"rollback", part == "conv" ? "gdn_conv" : "gdn_core", m->layer, m->case_id, m->evidence};
  }
  if (!s.detail.contains("cases") || !s.detail["cases"].is_array()) return std::nullopt;
  for (const nlohmann::json& c : s.detail["cases"]) {
    if (!c.contains("serving_state") || !c["serving_state"].is_object()) continue;
    const nlohmann::json& st = c["serving_state"];
    if (st.value("mechanism", "") != mechanism) continue;
    return ServingOp{mechanism, st.value("part", "S") == "conv" ? "gdn_conv" : "gdn_core", st.value("layer", -1),
                     c.value("id", ""), st};
  }
  return std::nullopt;
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
