// compare(): the one orchestrator of a comparison, whatever is under test (judge/subject.h): our
// engine, another engine's dump, a running server. It fills the result's header (fingerprints, the
// record check, the floor class and its floors, the limits note), selects the cases once, runs each
// case's parts through the subject, judges each case by one rule (judge_case), and sets the suite's
// verdict and exit code. compare_golden, compare_dump and compare_server are its entry points.
#pragma once
#include <cstdio>

#include "judge/subject.h"

namespace degen {

class Tokenizer;

// The one verdict rule of a case: bad when a reason is bad; else untestable when a check could not be
// judged; else model-intrinsic when the generation degenerates as the golden run does; else good. The
// case's reasons are the bad ones, then the unjudged, then the warnings.
void judge_case(CaseWork& w);

// The last reason of a bad case when the checkpoint is not the record's model: its errors may be the
// changed weights', not the engine's.
std::string model_changed_reason(const CompareResult& r);

// Runs the comparison: InputError (exit 128) for a record made for another model (unless
// opt.allow_model_mismatch), unknown case ids, a damaged record or the subject's bad input;
// UntestableError (exit 125) where the subject cannot be run.
CompareResult compare(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CommonCompareOptions& opt,
                      Subject& subject, std::FILE* progress = nullptr);

}  // namespace degen
