// Numbers in JSON. JSON has no inf/NaN: json_number() writes a finite double as a number and
// +inf / -inf / NaN as the STRINGS "inf" / "-inf" / "nan"; number_from_json() reads both forms back.
// `null` is kept for "not defined here", so "inf" (a real, infinitely bad value) and null (nothing
// to measure) never mix (spec metrics.md; used by every JSON output).
#pragma once
#include <optional>

#include <nlohmann/json.hpp>

namespace degen {

// A double as JSON: a number when finite, else the string "inf", "-inf" or "nan".
nlohmann::json json_number(double v);
// An optional double: null when absent, else json_number(v).
nlohmann::json json_number(const std::optional<double>& v);
// Inverse of json_number: accepts a number or one of "inf", "-inf", "nan"; anything else throws
// std::invalid_argument.
double number_from_json(const nlohmann::json& j);
// True when number_from_json(j) would succeed (a JSON number or "inf", "-inf", "nan").
bool is_json_number(const nlohmann::json& j);

}  // namespace degen
