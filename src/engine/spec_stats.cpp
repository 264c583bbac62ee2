#include "engine/spec_stats.h"

#include <stdexcept>

#include "util/error.h"
#include "util/json_number.h"

namespace degen {

SpecDecode spec_decode(std::span<const VerifyStep> steps, std::optional<int64_t> loop_onset, const SpecRules& rules) {
  SpecDecode s;
  int64_t emitted = 0, prop_before = 0, acc_before = 0, prop_loop = 0, acc_loop = 0;
  for (const auto& st : steps) {
    if (st.proposed < 0 || st.accepted < 0 || st.accepted > st.proposed)
      throw std::invalid_argument(cat("spec_decode: step at position ", st.position, " accepted ", st.accepted,
                                      " of ", st.proposed, " drafts"));
    ++s.steps;
    s.proposed += st.proposed;
    s.accepted += st.accepted;
    emitted += st.accepted + 1;
    if (loop_onset) {
      if (st.position >= *loop_onset) {
        prop_loop += st.proposed;
        acc_loop += st.accepted;
      } else {
        prop_before += st.proposed;
        acc_before += st.accepted;
      }
    }
  }
  auto rate = [](int64_t a, int64_t p) {
    return p > 0 ? std::optional<double>(static_cast<double>(a) / static_cast<double>(p)) : std::nullopt;
  };
  s.accept_rate = rate(s.accepted, s.proposed);
  if (s.steps > 0) s.accept_len = static_cast<double>(emitted) / static_cast<double>(s.steps);
  if (loop_onset) {
    s.accept_rate_before = rate(acc_before, prop_before);
    s.accept_rate_loop = rate(acc_loop, prop_loop);
    if (s.accept_rate_before && s.accept_rate_loop) {
      if (*s.accept_rate_loop >= rules.high && *s.accept_rate_before < rules.high) s.accept_anomaly = "accept_rate_jump";
      else if (*s.accept_rate_loop <= rules.low && *s.accept_rate_before > rules.low)
        s.accept_anomaly = "accept_rate_collapse";
    }
  }
  return s;
}

nlohmann::json SpecDecode::to_json() const {
  return {{"steps", steps},
          {"proposed", proposed},
          {"accepted", accepted},
          {"accept_rate", json_number(accept_rate)},
          {"accept_len", json_number(accept_len)},
          {"accept_rate_before", json_number(accept_rate_before)},
          {"accept_rate_loop", json_number(accept_rate_loop)},
          {"accept_anomaly", accept_anomaly ? nlohmann::json(*accept_anomaly) : nlohmann::json(nullptr)}};
}

}  // namespace degen
