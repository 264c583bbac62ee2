// compare --server, the free-running generation of a case: sent cold, read, its ending checked, then
// scored (decode_path.cpp) and probed (probes.cpp) (subjects/server/run.h).
#include "subjects/server/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "engine/sampler.h"
#include "judge/compare.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"

namespace degen::server_subject {

using clock_type = std::chrono::steady_clock;

// Step 0 of a sampled SGLang generation follows the prompt, whose distribution the server's
// teacher-forced answer stated (raw: SGLang's input log-probs are never temperature-scaled). The
// reading of the output log-probs that --sglang-logprobs declares must fit it; where it is far off and
// the other reading fits a hundred times better, the server does not do what the option says:
// InputError (128) naming it. (An engine that is merely wrong fits neither reading.)
void sglang_check_temperature(const ServerRun& run, const SamplingParams& sp, bool greedy, const server_answer::Generated& got,
                              const std::string& url) {
  if (greedy || sp.temperature == 1 || !run.prompt_end || got.steps.empty() || got.steps[0].empty() ||
      static_cast<int64_t>(got.steps[0].size()) < run.V)
    return;
  const bool original = run.o.sglang_original_logprobs;
  const std::optional<TopList> declared = server_answer::sglang_model_step(got.steps[0], original ? 1.0 : sp.temperature, 0, 1, {}, run.V);
  const std::optional<TopList> other = server_answer::sglang_model_step(got.steps[0], original ? sp.temperature : 1.0, 0, 1, {}, run.V);
  if (!declared || !other) return;
  const std::optional<double> kd = lists_kld(run, *run.prompt_end, *declared), ko = lists_kld(run, *run.prompt_end, *other);
  if (!kd || !ko || !(*kd > run.o.rules.probe_kld) || !(*kd > 100 * *ko)) return;
  input_error("malformed response from ", url, ": the output log-probs at step 0 are ",
              original ? "taken at the sampling temperature " : "the model's own (not taken at the sampling temperature ",
              original ? cat(sp.temperature) : cat(sp.temperature, ")"), ": read as ",
              original ? "the model's own (--sglang-logprobs original)" : "temperature-scaled (SGLang's default)",
              " they are KLD ", *kd, " from the server's own teacher-forced distribution after the prompt, read the other way ", *ko,
              original ? ". The server scales them (SGLang's default): drop --sglang-logprobs original, or start it with "
                         "SGLANG_RETURN_ORIGINAL_LOGPROB=1"
                       : ". The server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1: pass --sglang-logprobs original");
}

// Where a generation ended: an empty answer where the golden continuation has content (a correct
// greedy engine, or one told to ignore stops, gives that content's first token; a sampled one may stop
// at once: a warning); a sampled generation stopped by a length limit before its budget (a warning).
void ending_checks(const ServerRun& run, const GoldenCase& g, const GenerationResult& gen, bool greedy, bool answered_empty,
                   std::vector<std::string>& bad, std::vector<std::string>& warn) {
  const std::vector<int32_t> stops = g.ignore_stop ? std::vector<int32_t>{} : run.stops;
  const bool golden_content = std::any_of(g.continuation.begin(), g.continuation.end(), [&](int32_t t) {
    return std::find(stops.begin(), stops.end(), t) == stops.end();
  });
  if (!greedy && !g.ignore_stop && length_stop(gen.stop_reason) && static_cast<int64_t>(gen.tokens.size()) < g.max_new_tokens)
    warn.push_back(cat("the server stopped at a length limit after ", gen.tokens.size(), " of the request's ", g.max_new_tokens,
                       " tokens (stop: ", gen.stop_reason, ")"));
  if (answered_empty && golden_content)
    (greedy || g.ignore_stop ? bad : warn)
        .push_back(cat("the server answered with no tokens (stop: ", gen.stop_reason, ") where the golden continuation has ",
                       g.continuation.size(), " tokens", greedy ? " (greedy)" : g.ignore_stop ? " (stops ignored)" : " (sampled)"));
}

// The case's generation, sent cold (the API's cache emptied where a request cannot say so itself: the
// teacher-forced requests put this sequence in SGLang's radix cache, which would serve the prompt),
// its answer read and its per-step lists taken to the model's distribution; the request in `cold_req`.
server_answer::Generated cold_generation(const ServerRun& run, const GoldenCase& g, const SamplingParams& sp, bool greedy,
                                         json& cold_req, GenerationResult& gen, std::vector<std::string>& warn) {
  const server::EngineApi& api = *run.api;
  run.flush_note = api.make_cold(run.ctx);
  cold_req = api.generation_request(run.ctx, {g.prompt, sp, greedy, g.max_new_tokens, g.ignore_stop, api.generation_ids(run.ctx)});
  server_answer::Generated got = api.generate(run.ctx, cold_req, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens);
  if (api.caps().states_scaled_logprobs) sglang_check_temperature(run, sp, greedy, got, api.url(run.ctx));
  std::string note;
  api.model_steps(run.ctx, sp, greedy, got, note);
  if (!note.empty()) warn.push_back("decode path: " + note);
  if (!got.spec_stated.empty()) gen.spec_stated = got.spec_stated;
  return got;
}

void free_running(const ServerRun& run, const GoldenCase& g, CaseResult& cr, std::vector<std::string>& bad,
                  std::vector<std::string>& warn) {
  GenerationResult& gen = cr.gen;
  gen.golden_tokens = g.continuation;
  if (g.max_new_tokens > 0) {
    const SamplingParams sp = g.sampling_params;
    const bool greedy = !(sp.temperature > 0);
    json cold_req;  // the free-running request, sent cold: the probes send it again
    const auto t0 = clock_type::now();
    const server_answer::Generated got = cold_generation(run, g, sp, greedy, cold_req, gen, warn);
    const std::string url = run.api->url(run.ctx);
    gen.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    take_generated(run, got, greedy, gen, bad, warn);
    {
      std::string oov;  // an id beyond the vocabulary in a step's list is bad, as in a teacher-forced one
      for (size_t i = 0; i < got.steps.size(); ++i) note_out_of_vocabulary(got.steps[i], run, cat("generated step ", i), oov);
      if (!oov.empty()) bad.push_back(oov);
    }
    if (got.draft_n && gen.spec_stated.empty())
      gen.spec_stated = cat("the server drafted ", *got.draft_n, " tokens and accepted ", got.draft_accepted.value_or(0));
    // The decode path, and greedy agreement where the generation left the golden continuation.
    {
      const size_t n = std::min(gen.tokens.size(), gen.golden_tokens.size());
      for (size_t i = 0; i < n && !gen.first_divergence; ++i)
        if (gen.tokens[i] != gen.golden_tokens[i]) gen.first_divergence = static_cast<int64_t>(i);
      if (!gen.first_divergence && gen.tokens.size() != gen.golden_tokens.size()) gen.first_divergence = static_cast<int64_t>(n);
    }
    const bool judge_agreement = greedy && gen.first_divergence && run.o.factory;
    if (run.o.decode_path && run.o.factory && got.tokens.size() == gen.tokens.size()) {
      gen.decode_path = decode_path(run, g, got, gen.tokens, url, judge_agreement ? *gen.first_divergence : -1);
      const DecodePathResult& d = *gen.decode_path;
      if (!d.note.empty()) warn.push_back("decode path: " + d.note);
      if (d.first_bad) {
        const int64_t i = *d.first_bad;
        bad.push_back(cat("decode path: step ", i, " (KLD ", d.kld[static_cast<size_t>(i)], " > limit ", d.limit, ")",
                          d.prefill_kld ? (*d.prefill_kld <= d.limit ? cat(" while the prefill of the same tokens agrees (KLD ", *d.prefill_kld, ")")
                                                                     : cat(" and the prefill of the same tokens is off too (KLD ", *d.prefill_kld, ")"))
                                        : "",
                          d.self_kld ? cat("; the engine's decode against its own prefill there: KLD ", *d.self_kld) : ""));
      }
    }
    run_probes(ProbeCase{run, g, sp, greedy, got, cold_req, run.o.rules.probe_kld}, gen.probes);
    for (const ProbeResult& p : gen.probes)
      if (p.verdict == "bad") bad.push_back(cat("probe ", p.name, ": ", p.reason));
    if (greedy)
      greedy_agreement(run, g, gen, gen.decode_path ? gen.decode_path->limit : run.o.rules.fallback_kld,
                       g.ignore_stop ? run.stops : std::vector<int32_t>{}, bad);
    ending_checks(run, g, gen, greedy, got.tokens.empty(), bad, warn);
  } else {
    gen.stop_reason = "no budget";
  }
  metrics::ContentOptions content;
  if (g.opened_think) content.think_end = run.think_end;
  content.stop_ids = g.ignore_stop ? std::vector<int32_t>{} : run.stops;
  content.ignore_ids = run.ws_ids;
  generation_figures(gen, run.o.rules.degen, content, false, g.nonfinite_logits);
  degeneration_reasons(gen, bad, warn);
}

}  // namespace degen::server_subject
