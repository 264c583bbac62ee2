// A compare result as `degenbisect report` reads it (`compare --json`): the typed CompareResult
// (judge/compare_json.h: strict, every key with its type, keys of earlier versions defaulted), or
// the form `compare --json` writes for a configuration it could not test at all (verdict
// "untestable", no "cases"), which only names the run. Beside them, what a result may carry outside
// CompareResult's own keys: the reason of an untestable verdict ("reason"), and a case's decoded
// texts ("text" and "golden_text" in its generation), shown instead of decoding the token ids.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/result.h"

namespace degen::report {

// compare --json's form for an untestable configuration; null for a key it does not hold.
struct UntestableCompare {
  std::optional<std::string> config, suite, golden, model;
  std::optional<int64_t> exit_code;
  std::optional<double> seconds;
  std::optional<bool> fail_on_model_degeneration;
};

struct CaseText {
  std::string tested, golden;
};

struct CompareInput {
  std::optional<CompareResult> result;         // unset: the untestable form
  UntestableCompare untestable;                // the untestable form's keys
  std::optional<std::string> reason;           // "reason", in either form
  std::vector<std::optional<CaseText>> texts;  // per case of `result`: its texts, where it carries both
};

// InputError naming the key path ("compare result: cases[0].generation.tokens: missing").
CompareInput read_compare_input(const nlohmann::json& j);

}  // namespace degen::report
