#include "util/json_number.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "util/error.h"
#include "util/json_input.h"

namespace degen {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

nlohmann::json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json json_number(const std::optional<double>& v) {
  return v ? json_number(*v) : nlohmann::json(nullptr);
}

bool is_json_number(const nlohmann::json& j) {
  if (j.is_number()) return true;
  if (!j.is_string()) return false;
  const auto& s = j.get_ref<const std::string&>();
  return s == "inf" || s == "-inf" || s == "nan";
}

double number_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "inf") return kInf;
    if (s == "-inf") return -kInf;
    if (s == "nan") return kNaN;
  }
  throw std::invalid_argument(cat("number_from_json: expected a number or \"inf\"/\"-inf\"/\"nan\", found ", json_excerpt(j)));
}

}  // namespace degen
