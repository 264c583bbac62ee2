// The cell evaluator shared by sweep and bisect: compare one configuration against a golden record
// and reduce the result to the CellSummary those tools tabulate.
#pragma once
#include "diag/compare.h"
#include "diag/sweep.h"

namespace degen {

// verdict, the first layer breaking its floor (earliest over the cases), the worst mean KLD
// (prefill mode), the worst seq_rep_4 and the earliest loop onset of the generations, the first
// reason; detail = per-case verdicts and reasons.
CellSummary summarize_compare(const CompareResult& r);

// An evaluator that runs compare_golden with `base` options and the cell's configuration.
// `rec`, `model` and `tok` must outlive it (the model is loaded once for every cell).
CellEvaluator compare_evaluator(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, CompareOptions base,
                                BackendFactory factory);

}  // namespace degen
