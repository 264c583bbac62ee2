// compare's result as text: what `degenbisect compare` prints on stdout (its JSON: judge/compare_json.h;
// JUnit: report/junit.h junit_for_compare).
#pragma once
#include <string>

#include "judge/result.h"

namespace degen {

// The text printed on stdout: a compact per-layer table (worst over the cases; per_case: one table
// per case), one line per case, the reasons, and the verdict.
std::string format_compare(const CompareResult& r, bool per_case = false);

}  // namespace degen
