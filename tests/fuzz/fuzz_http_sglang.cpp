// SGLang's POST /generate answers as compare --server --api sglang reads them (net::parse_answer, then
// server_answer, src/subjects/server/compare.h). Byte 0 picks the request the body answers:
//   0  the teacher-forced request: 1 + (byte 1 & 1) sequences in one (input_ids as a list of lists),
//      each of 1 + (byte 1 >> 1) % 8 ids, all 1 + (byte 1 >> 4) % 3; the answer a list of one answer
//      per sequence, each read by sglang_sequence (the distribution after every prefix);
//   1  a free-running generation without per-step log-probs (sglang_generation);
//   2  one with them (top_logprobs_num asked), each step then taken back to the model's distribution
//      by sglang_model_step as compare --server does it (the tokens generated before the step, the
//      sampling of byte 2, a vocabulary of 1 + byte 3 % 8 ids), and step 0 also read both ways as the
//      temperature check reads it;
//   3  the batched probe's answer: a list whose first answer is a generation with per-step lists.
// The rule: the parsed values, or a degen::Error (128: a malformed answer; an abort: 125); what the
// tool relies on after parsing (fuzz_http_common.h), and of a step taken back: the same ids in the
// same order, every log-prob a number <= kMaxServerLogprob or -inf, and (where it was transformed)
// the probabilities summing to 1.
#include <cmath>

#include "fuzz_http_common.h"
#include "net/http.h"

namespace {

using degen::server_answer::TopList;

// The sampling compare --server takes SGLang's output log-probs back from: a temperature (> 0: a
// greedy request takes them at 1), the presence and repetition penalties (run_config's ranges:
// temp in (0, 100], presence_pen in [-100, 100], rep_pen in (0, 100]).
struct Sampling {
  double temperature, presence, repetition;
};
Sampling sampling_of(uint8_t b) {
  static const double temps[] = {1.0, 0.7, 1.3, 100.0, 1e-3, 1e-300};
  static const double presences[] = {0.0, 1.5, -100.0, 100.0};
  static const double repetitions[] = {1.0, 1.1};
  return {temps[b % 6], presences[(b / 6) % 4], repetitions[(b / 24) % 2]};
}

void check_model_step(const TopList& listed, const std::optional<TopList>& m, bool transformed) {
  if (!m) return;
  if (m->size() != listed.size()) fuzz::finding("http sglang", "a step taken back changed the number of listed ids");
  double mass = 0;
  for (size_t i = 0; i < m->size(); ++i) {
    const auto [id, lp] = (*m)[i];
    if (id != listed[i].first) fuzz::finding("http sglang", "a step taken back changed the ids or their order");
    if (std::isnan(lp) || lp > degen::server_answer::kMaxServerLogprob)
      fuzz::finding("http sglang", "a step taken back holds a log-prob out of range: " + std::to_string(lp));
    mass += std::exp(lp);
  }
  if (transformed && !(std::abs(mass - 1) <= 1e-6))
    fuzz::finding("http sglang", "a step taken back is not a distribution: its probabilities sum to " + std::to_string(mass));
}

// compare --server's reading of a generation's steps (SglangApi::model_steps in src/subjects/server/api_sglang.cpp and
// sglang_check_temperature), with the invariants above.
void model_steps(const degen::server_answer::Generated& g, const Sampling& s, int64_t vocab) {
  std::vector<int64_t> before;
  for (size_t i = 0; i < g.steps.size(); ++i) {
    if (!g.steps[i].empty()) {
      const auto m = degen::server_answer::sglang_model_step(g.steps[i], s.temperature, s.presence, s.repetition, before, vocab);
      check_model_step(g.steps[i], m, s.temperature != 1 || (s.presence != 0 && !before.empty()));
    }
    if (i < g.tokens.size()) before.push_back(g.tokens[i]);
  }
  if (!g.steps.empty() && !g.steps[0].empty())
    for (double t : {1.0, s.temperature})
      check_model_step(g.steps[0], degen::server_answer::sglang_model_step(g.steps[0], t, 0, 1, {}, vocab), t != 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int which = data[0] % 4;
  const Sampling s = sampling_of(data[2]);
  const int64_t vocab = 1 + data[3] % 8;
  const std::string body(fuzz::as_view(data + 4, size - 4));
  fuzz::expect_clean("http sglang", [&] {
    const std::string url = "http://127.0.0.1:30000/generate";
    const nlohmann::json j = degen::net::parse_answer(url, body);
    if (which == 0) {
      const size_t n = 1 + (data[1] & 1);
      const std::vector<int32_t> seq(static_cast<size_t>(1 + (data[1] >> 1) % 8), 1 + (data[1] >> 4) % 3);
      // (SglangApi::forced in api_sglang.cpp: one answer per sequence, else 128)
      if (!j.is_array() || j.size() != n) return;
      for (size_t k = 0; k < n; ++k) {
        const auto tops = degen::server_answer::sglang_sequence(j.at(k), seq, url);
        if (tops.size() != seq.size()) fuzz::finding("http sglang", "input rows: not one list per position");
        for (const auto& t : tops) fuzz::check_top("http sglang", t);
      }
    }
    if (which == 1) fuzz::check_generated("http sglang", degen::server_answer::sglang_generation(j, url, false));
    if (which == 2) {
      const auto g = degen::server_answer::sglang_generation(j, url, true);
      fuzz::check_generated("http sglang", g);
      model_steps(g, s, vocab);
    }
    if (which == 3 && j.is_array() && !j.empty()) {
      const auto g = degen::server_answer::sglang_generation(j.at(0), url, true);
      fuzz::check_generated("http sglang", g);
      model_steps(g, s, vocab);
    }
  });
  return 0;
}
