// Helpers shared by the report writers (see common.h).
#include "report/common.h"

#include <cmath>
#include <cstdio>

namespace degen::report {

using nlohmann::json;

std::optional<double> as_num(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  return std::nullopt;
}

std::optional<double> opt_num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  return as_num(j[key]);
}

std::optional<int64_t> opt_int(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<int64_t>();
}

std::string opt_str(const json& j, const char* key, const std::string& fallback) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return fallback;
  return j[key].get<std::string>();
}

std::string fmt_sci(std::optional<double> v) {
  if (!v) return "-";
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  if (*v == 0) return "0";
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", *v);
  return b;
}

std::string fmt_fixed(std::optional<double> v, int decimals) {
  if (!v) return "-";
  if (!std::isfinite(*v)) return fmt_sci(v);
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, *v);
  return b;
}

int verdict_rank(const std::string& v) {
  if (v == "bad") return 5;
  if (v == "error") return 4;
  if (v == "model-intrinsic") return 3;
  if (v == "good") return 2;
  if (v == "untestable") return 1;
  return 0;  // "none" or unknown
}

std::string worst_verdict(const std::string& a, const std::string& b) { return verdict_rank(b) > verdict_rank(a) ? b : a; }

std::vector<std::pair<bool, std::string>> split_code(std::string_view text) {
  std::vector<std::pair<bool, std::string>> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find('`', i);
    const size_t close = open == std::string_view::npos ? open : text.find('`', open + 1);
    if (open == std::string_view::npos || close == std::string_view::npos) {
      out.emplace_back(false, std::string(text.substr(i)));
      break;
    }
    if (open > i) out.emplace_back(false, std::string(text.substr(i, open - i)));
    out.emplace_back(true, std::string(text.substr(open + 1, close - open - 1)));
    i = close + 1;
  }
  return out;
}

std::string probe_detail(const nlohmann::json& p) {
  const std::string reason = p.value("reason", nlohmann::json()).is_string() ? p["reason"].get<std::string>() : "";
  std::string d = reason;
  auto add = [&d](const std::string& part) { d += (d.empty() ? "" : "; ") + part; };
  const nlohmann::json& cached = p.value("cached_tokens", nlohmann::json());
  const nlohmann::json& slots = p.value("slots", nlohmann::json());
  if (cached.is_number() && reason.find("cached") == std::string::npos) add("cached " + cached.dump() + " tokens");
  if (slots.is_number() && reason.find("slot") == std::string::npos) add(slots.dump() + " slots");
  return d;
}

}  // namespace degen::report
