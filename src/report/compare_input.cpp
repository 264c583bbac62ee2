// Reading a compare result for the report (see compare_input.h).
#include "report/compare_input.h"

#include "judge/compare_json.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen::report {

using nlohmann::json;

namespace {

// j[key] when present and not null, checked against `is`; InputError otherwise.
template <class Is>
const json* optional_key(const json& j, const char* key, Is&& is, const char* expected) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  if (!is(*it)) input_error("compare result: ", key, ": expected ", expected, ", found ", json_excerpt(*it));
  return &*it;
}

std::optional<std::string> opt_string(const json& j, const char* key) {
  const json* v = optional_key(j, key, [](const json& x) { return x.is_string(); }, "a string");
  return v ? std::optional<std::string>(v->get<std::string>()) : std::nullopt;
}

UntestableCompare untestable_form_of(const json& j) {
  UntestableCompare u;
  u.config = opt_string(j, "config");
  u.suite = opt_string(j, "suite");
  u.golden = opt_string(j, "golden");
  u.model = opt_string(j, "model");
  if (const json* v = optional_key(j, "exit_code", [](const json& x) { return x.is_number_integer(); }, "an integer"))
    u.exit_code = v->get<int64_t>();
  if (const json* v = optional_key(j, "seconds", is_json_number, "a number")) u.seconds = number_from_json(*v);
  if (const json* v = optional_key(j, "fail_on_model_degeneration", [](const json& x) { return x.is_boolean(); }, "true or false"))
    u.fail_on_model_degeneration = v->get<bool>();
  return u;
}

}  // namespace

CompareInput read_compare_input(const json& j) {
  CompareInput in;
  if (!j.is_object()) input_error("compare result: expected an object, found ", json_excerpt(j));
  in.reason = opt_string(j, "reason");
  const bool untestable_form = j.contains("verdict") && j["verdict"] == "untestable" && !j.contains("cases");
  if (untestable_form) {
    in.untestable = untestable_form_of(j);
    return in;
  }
  in.result = compare_result_from_json(j);
  const json& cases = j["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& g = cases[i]["generation"];
    const auto text = g.find("text"), golden = g.find("golden_text");
    if (text != g.end() && text->is_string() && golden != g.end() && golden->is_string())
      in.texts.push_back(CaseText{text->get<std::string>(), golden->get<std::string>()});
    else
      in.texts.push_back(std::nullopt);
  }
  return in;
}

}  // namespace degen::report
