// The real-id rules of one logits row (util/logits.h).
#include "util/logits.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "util/error.h"

namespace degen::metrics {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

bool is_real(std::span<const uint8_t> excluded, size_t i) { return excluded.empty() || excluded[i] == 0; }

void check_mask(std::span<const uint8_t> excluded, size_t V, const char* who) {
  if (!excluded.empty() && excluded.size() != V)
    throw std::invalid_argument(cat(who, ": padding mask has ", excluded.size(), " entries, logits have ", V));
}

// Count of NaN / +inf among the real ids; `all_neg_inf` set when no real logit exceeds -inf.
int64_t undefined_logits(std::span<const float> logits, std::span<const uint8_t> excluded, bool& all_neg_inf) {
  int64_t bad = 0;
  all_neg_inf = true;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!is_real(excluded, i)) continue;
    float v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) ++bad;
    else if (v != -std::numeric_limits<float>::infinity()) all_neg_inf = false;
  }
  return bad;
}

size_t count_real(std::span<const uint8_t> excluded, size_t V) {
  if (excluded.empty()) return V;
  return static_cast<size_t>(std::count(excluded.begin(), excluded.end(), uint8_t{0}));
}

// The largest real logit (-inf when there is none above -inf; NaN ignored: counted elsewhere).
double max_real_logit(std::span<const float> logits, std::span<const uint8_t> excluded) {
  double m = -kInf;
  for (size_t i = 0; i < logits.size(); ++i)
    if (is_real(excluded, i) && !std::isnan(logits[i])) m = std::max(m, static_cast<double>(logits[i]));
  return m;
}

std::vector<double> log_softmax(std::span<const float> logits, std::span<const uint8_t> excluded) {
  check_mask(excluded, logits.size(), "log_softmax");
  if (count_real(excluded, logits.size()) == 0) throw std::invalid_argument("log_softmax: no real vocabulary id");
  std::vector<double> out(logits.size(), -kInf);
  bool all_neg_inf = false;
  if (undefined_logits(logits, excluded, all_neg_inf) > 0 || all_neg_inf) {
    std::fill(out.begin(), out.end(), kNaN);
    return out;
  }
  const double m = max_real_logit(logits, excluded);
  double s = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (is_real(excluded, i)) s += std::exp(static_cast<double>(logits[i]) - m);
  const double log_s = std::log(s);  // in [0, ln V]: kept apart from m, which may dwarf it
  for (size_t i = 0; i < logits.size(); ++i)
    if (is_real(excluded, i)) out[i] = (static_cast<double>(logits[i]) - m) - log_s;
  return out;
}

}  // namespace degen::metrics
