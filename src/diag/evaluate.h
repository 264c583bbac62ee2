// The cell evaluator shared by sweep and bisect: compare one configuration against a golden record
// and reduce the result to the CellSummary those tools tabulate.
#pragma once
#include "judge/result.h"
#include "subjects/engine.h"
#include "diag/sweep.h"

namespace degen {

// verdict, the first layer breaking its floor (earliest over the cases), the worst mean KLD
// (prefill mode), the worst seq_rep_4 and the earliest loop onset of the generations, the first
// reason; detail = per-case verdicts and reasons.
CellSummary summarize_compare(const CompareResult& r);

// The operation of a model-level MTP culprit, from a compare summary's per-case detail: the GDN
// state after a rollback (op "gdn_core" at that layer: the teacher-forced draft/verify check found it
// differing from plain decode's; evidence = {layer, position, part, rel_l2}), or the MTP head (op
// "mtp_in", layer -1: its teacher-forced drafts break their floor while the main model's logits and
// layers agree). nullopt when neither shows.
struct MtpOp {
  std::string op;
  int layer = -1;
  std::string case_id;
  nlohmann::json evidence;
};
std::optional<MtpOp> mtp_culprit_op(const CellSummary& s);

// The op, layer and serving mechanism a failing cell's serving-state check names (judge/result.h
// ServingCheck): the first GDN layer whose state left plain processing's, op gdn_core (S) or gdn_conv
// (the conv window), and the mechanism ("chunk", "snapshot", "slot"); for "rollback" the MTP
// teacher-forced check's state (mtp_culprit_op). nullopt when no check named a layer.
struct ServingOp {
  std::string mechanism;
  std::string op;
  int layer = -1;
  std::string case_id;
  nlohmann::json evidence;  // the check's "serving_state" (what ran, part, position, rel_l2)
};
std::optional<ServingOp> serving_culprit(const CellSummary& s, const std::string& mechanism);

// An evaluator that runs compare_golden with `base` options and the cell's configuration.
// `rec`, `model` and `tok` must outlive it (the model is loaded once for every cell).
CellEvaluator compare_evaluator(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, CompareOptions base,
                                BackendFactory factory);

}  // namespace degen
