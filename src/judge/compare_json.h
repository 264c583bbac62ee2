// The JSON form of a compare result (`compare --json`), both ways. CompareResult::to_json and the
// to_json of every type nested in it (judge/result.h, observation.h, the metrics structs of metrics.h)
// are defined in judge/compare_json.cpp; compare_result_from_json reads that form back.
//
// Reading is strict: a key that to_json always writes must be there with the type it writes, or an
// InputError names the key's path ("cases[0].generation.tokens[3]: expected an integer, found
// \"x\""). Null stands for an absent optional value, as to_json writes it; non-finite numbers are
// the strings "inf", "-inf" and "nan" (json_number), and a decode path's unscored step is null
// (NaN). Keys written only when set (a case's "observation", a logits block's "resolved", the
// result's "source" and "limits") may be absent.
//
// Results written by earlier versions of the tool lack keys added since; those are read as their
// defaults when absent (kCompatKeys lists them; to_json then writes them). Among them
// "fail_on_model_degeneration": absent, it is true for a model-intrinsic result that exited 1.
//
// Not in the JSON, so not restored: GenerationResult::rows and verify_steps (the raw per-position
// top-K and verify steps the checks consumed); model_changed comes back from "cause".
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/result.h"

namespace degen {

// InputError (prefixed "compare result: ") for a missing key or a value of the wrong type.
CompareResult compare_result_from_json(const nlohmann::json& j);

// The keys compare_result_from_json accepts as absent because earlier versions did not write them,
// as paths with "*" for an array index (e.g. "cases[*].serving").
extern const std::vector<std::string> kCompatKeys;

}  // namespace degen
