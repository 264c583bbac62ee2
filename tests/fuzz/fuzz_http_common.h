// Shared by fuzz_http_llama.cpp and fuzz_http_openai.cpp: what the tool relies on after a server
// answer was parsed (subjects/server/compare.h, server_answer): every log-prob is a number <= the rounding
// allowance or -inf (never NaN, never +inf), every id >= 0, a stop reason of at most 40 characters. A parsed answer that breaks one of these is a finding.
#pragma once
#include <cmath>
#include <string>

#include "subjects/server/compare.h"
#include "fuzz_common.h"

namespace fuzz {

inline void check_top(const char* what, const degen::server_answer::TopList& top) {
  using namespace degen::server_answer;
  if (top.empty()) finding(what, "an empty top-K list was accepted");
  for (const auto& [id, lp] : top) {
    if (id < 0) finding(what, "a negative id was accepted: " + std::to_string(id));
    if (std::isnan(lp) || lp > kMaxServerLogprob) finding(what, "a log-prob out of range was accepted: " + std::to_string(lp));
  }
}

inline void check_generated(const char* what, const degen::server_answer::Generated& g) {
  for (int64_t id : g.tokens)
    if (id < 0) finding(what, "a negative generated id was accepted: " + std::to_string(id));
  if (g.stop_reason.size() > 40) finding(what, "an unbounded stop reason");
  // with per-step log-probs asked: one list per generated token, each a checked top-K or empty
  if (!g.steps.empty() && g.steps.size() != g.tokens.size()) finding(what, "per-step log-probs not one per generated token");
  for (const auto& s : g.steps)
    if (!s.empty()) check_top(what, s);
  if (g.draft_n && g.draft_accepted && *g.draft_accepted > *g.draft_n) finding(what, "more drafts accepted than drafted");
}

}  // namespace fuzz
