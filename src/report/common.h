// Small helpers shared by the report writers: reading optional numbers of the report document,
// formatting them, verdict order and the `code` spans of summary text.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen::report {

// j[key] as a double: a number, or "inf" / "-inf" / "nan"; nullopt when absent, null or otherwise.
std::optional<double> opt_num(const nlohmann::json& j, const char* key);
std::optional<double> as_num(const nlohmann::json& v);
std::optional<int64_t> opt_int(const nlohmann::json& j, const char* key);
std::string opt_str(const nlohmann::json& j, const char* key, const std::string& fallback = "");

// "1.23e-04", "0", "inf", "nan"; "-" for nullopt.
std::string fmt_sci(std::optional<double> v);
// Fixed decimals; "-" for nullopt.
std::string fmt_fixed(std::optional<double> v, int decimals);

// Order of verdicts for "worst of": bad > error > model-intrinsic > good > untestable.
int verdict_rank(const std::string& verdict);
std::string worst_verdict(const std::string& a, const std::string& b);

// A serving probe's detail column (an entry of a case's generation.probes in the report document):
// its reason, with what was cached or how many slots there were where the reason does not say it.
std::string probe_detail(const nlohmann::json& probe);

// Splits text at backticks: (false, plain), (true, code), ... An unpaired backtick is plain.
std::vector<std::pair<bool, std::string>> split_code(std::string_view text);

}  // namespace degen::report
