// compare --server, the serving probes: each a row of probe_table(), written once against the engine
// API's capabilities (subjects/server/run.h).
#include "subjects/server/run.h"

#include <algorithm>
#include <cmath>

#include "engine/backend_factory.h"
#include "engine/sampler.h"
#include "judge/compare.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"

namespace degen {

namespace server_subject {


ProbeResult not_applicable(ProbeResult& p, std::string why) {
  p.verdict = "not applicable";
  p.reason = std::move(why);
  return p;
}

// A probe's judgement (judge/result.h ProbeResult): the case's answer in another serving state (`other`,
// described by `what`, e.g. "warm (18 cached tokens)") against its cold, solo answer: the same tokens
// (greedy; a sampled case keeps its seed, its tokens may part where the distributions differ within
// the limit) and, at every step both stated a distribution up to the first differing token, a
// KLD(cold || other) within `limit`. `alone` names the cold answer in a reason ("cold", "solo");
// `good_what` opens the reason of a good probe.
void judge_against_cold(ProbeResult& p, const ServerRun& run, bool greedy, const server_answer::Generated& cold,
                        const server_answer::Generated& other, const std::string& what, const char* alone,
                        const std::string& good_what, double limit) {
  std::string oov;  // an id beyond the vocabulary in the other answer: no correct server of this model gives one
  for (size_t i = 0; i < other.tokens.size(); ++i)
    if (other.tokens[i] >= run.V && oov.empty())
      oov = cat("the ", what, " answer generated token id ", other.tokens[i], " at step ", i, ", beyond the model's vocabulary of ", run.V, " ids");
  for (size_t i = 0; i < other.steps.size(); ++i) note_out_of_vocabulary(other.steps[i], run, cat("step ", i, " of the ", what, " answer"), oov);
  if (!oov.empty()) {
    p.verdict = "bad";
    p.reason = oov;
    return;
  }
  const size_t n = std::min(other.tokens.size(), cold.tokens.size());
  for (size_t i = 0; i < n && !p.first_difference; ++i)
    if (other.tokens[i] != cold.tokens[i]) p.first_difference = static_cast<int64_t>(i);
  if (!p.first_difference && other.tokens.size() != cold.tokens.size()) p.first_difference = static_cast<int64_t>(n);
  const size_t upto = p.first_difference ? static_cast<size_t>(*p.first_difference) + 1 : n;
  std::optional<int64_t> over;
  for (size_t i = 0; i < upto && i < n && i < other.steps.size() && i < cold.steps.size(); ++i) {
    if (other.steps[i].empty() || cold.steps[i].empty()) continue;
    const std::optional<double> k = lists_kld(run, cold.steps[i], other.steps[i]);
    if (!k) continue;
    p.max_kld = std::max(p.max_kld.value_or(0.0), *k);
    if (!over && !(*k <= limit)) over = static_cast<int64_t>(i);
  }
  p.limit = limit;
  if (over) {
    p.verdict = "bad";
    p.reason = cat(what, " against ", alone, ": step ", *over, " KLD over the limit ", limit, " (max ", *p.max_kld, ")",
                   p.first_difference ? cat("; the tokens differ from token ", *p.first_difference) : "");
  } else if (p.first_difference && greedy) {
    p.verdict = "bad";
    p.reason = cat(what, " leaves the ", alone, " answer at token ", *p.first_difference);
  } else {
    p.verdict = "good";
    p.reason = cat(good_what, p.max_kld ? cat(" (max KLD ", *p.max_kld, ")") : "");
  }
}


// `req` sent again and read as the case's own run is (its per-step lists taken to the model's distribution).
server_answer::Generated probe_generation(const ProbeCase& c, const json& req, json* answer = nullptr) {
  const server::EngineApi& api = *c.run.api;
  const std::string url = api.url(c.run.ctx);
  const json a = net::post_json(url, req, c.run.ctx.generation_cap(c.prompt(), c.g.max_new_tokens, api.generation_ids(c.run.ctx)));
  server_answer::Generated got = api.read_generation(c.run.ctx, a, url);
  std::string note;  // the case's own run says it
  api.model_steps(c.run.ctx, c.sp, c.greedy, got, note);
  if (answer) *answer = a;
  return got;
}

// The prefix-cache probe: the case's prompt sent once (one token, into the server's cache), then the
// case again, warm; judged against the cold run. Not applicable where the cold run reused tokens
// itself (a cache that could not be emptied), or the warm answer says it reused none (or not what).
ProbeResult prefix_cache_probe(const ProbeCase& c) {
  ProbeResult p;
  const server::EngineApi& api = *c.run.api;
  const server::ApiCapabilities& caps = api.caps();
  if (c.cold.cached_tokens && *c.cold.cached_tokens > 0)
    return not_applicable(p, cat("the cold run reused ", *c.cold.cached_tokens, " cached tokens itself",
                                 c.run.flush_note.empty() ? "" : cat(" (", c.run.flush_note, ")")));
  api.prime(c.run.ctx, c.g.prompt);
  json answer;
  const server_answer::Generated warm = probe_generation(c, api.warm_request(c.cold_req), &answer);
  p.cached = api.cached_tokens(answer, warm, api.url(c.run.ctx));
  if (!p.cached || *p.cached == 0)
    return not_applicable(p, p.cached ? cat("the server reused no cached tokens (", caps.cached_field, " 0", caps.no_reuse_hint, ")")
                                      : cat("the server does not say what it reused (no ", caps.cached_field, caps.no_field_hint, ")"));
  judge_against_cold(p, c.run, c.greedy, c.cold, warm, cat("warm (", *p.cached, " cached tokens)"), "cold",
                     cat(*p.cached, " cached tokens; warm equals cold"), c.limit);
  return p;
}

// The k-th distractor of a prompt: the prompt rotated by k * (T / 2 + 1), another text of its length.
std::vector<int32_t> distractor(const std::vector<int32_t>& prompt, int64_t k) {
  std::vector<int32_t> rotated(prompt.begin(), prompt.end());
  const size_t T = prompt.size();
  if (T > 1) std::rotate(rotated.begin(), rotated.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(k) * (T / 2 + 1)) % T), rotated.end());
  return rotated;
}

// The batching probe: the case sent again together with distractor sequences, as the API decodes
// sequences together (llama: concurrent requests, one per other slot of the server; SGLang: one
// /generate of several sequences), at most kBatchDistractors; judged against the case's solo run. A
// distractor is the case's own prompt rotated (another text of the same length: the prompts also fit
// one prefill batch), generating as many tokens as the case with stops ignored, so that it is live
// through every step of the case.
ProbeResult batching_probe(const ProbeCase& c) {
  ProbeResult p;
  const server::EngineApi& api = *c.run.api;
  const server::BatchShape shape = api.batch_shape(c.run.ctx);
  p.slots = shape.slots;
  if (!shape.not_applicable.empty()) return not_applicable(p, shape.not_applicable);
  const int64_t others = shape.others;
  SamplingParams greedy_sp;
  greedy_sp.temperature = 0;
  std::vector<json> reqs;
  for (int64_t k = 1; k <= others; ++k) {
    const std::vector<int32_t> d = distractor(c.g.prompt, k);
    reqs.push_back(api.generation_request(c.run.ctx, {d, greedy_sp, true, c.g.max_new_tokens, true, 0}));
  }
  server_answer::Generated batched = api.together(c.run.ctx, c.cold_req, reqs, c.prompt(), c.g.max_new_tokens);
  std::string note;
  api.model_steps(c.run.ctx, c.sp, c.greedy, batched, note);
  // where the requests run: "2 slots" (the slots the server states), or its continuous batching
  const std::string on = shape.slots ? cat(*shape.slots, " slots") : std::string("continuous batching");
  const std::string what = shape.one_request ? cat("batched (one request of ", others + 1, " sequences)")
                                             : cat("batched (beside ", others, others == 1 ? " other request, " : " other requests, ", on, ")");
  const std::string good = shape.one_request ? cat("in one request beside ", others, " other sequences; batched equals solo")
                                             : cat("beside ", others, others == 1 ? " other request on " : " other requests on ", on,
                                                   "; batched equals solo");
  judge_against_cold(p, c.run, c.greedy, c.cold, batched, what, "solo", good, c.limit);
  return p;
}

// The repeat probe: the case's request sent again, cold as the first (the cache emptied where the
// API must, the request's own cache control otherwise); both must give the same tokens (greedy) and
// distributions within the probe limit: a server whose answer depends on something the request does
// not fix (a reused cache, another batch, uninitialised memory) parts here. Not applicable where the
// repeat says it reused cached tokens.
ProbeResult repeat_probe(const ProbeCase& c) {
  ProbeResult p;
  const server::EngineApi& api = *c.run.api;
  const std::string flush = api.make_cold(c.run.ctx);
  const server_answer::Generated again = probe_generation(c, api.cold_again(c.cold_req));
  if (again.cached_tokens && *again.cached_tokens > 0)
    return not_applicable(p, cat("the repeat reused ", *again.cached_tokens, " cached tokens", flush.empty() ? "" : cat(" (", flush, ")")));
  judge_against_cold(p, c.run, c.greedy, c.cold, again, "the repeat (cold)", "first", "the same request twice, cold; the repeat equals the first",
                     c.limit);
  return p;
}

// The serving probes (docs/server.md "Serving probes"), one row each: its name (--probes), its help,
// whether it runs by default, the capability it needs of the API (nullptr: none; the API says why
// not in `why_not`), and its function.
struct ServingProbe {
  const char* name;
  const char* help;
  bool by_default;
  bool server::ApiCapabilities::*needs;
  const char* server::ApiCapabilities::*why_not;
  ProbeResult (*run)(const ProbeCase&);
};

const std::vector<ServingProbe>& probe_table() {
  using C = server::ApiCapabilities;
  static const std::vector<ServingProbe> table = {
      {"prefix-cache", "the case sent warm after a request sharing its prompt must equal it sent cold", true, &C::cache_control,
       &C::no_cache_control, prefix_cache_probe},
      {"batching", "the case sent beside distractor requests on a server with several slots must equal it sent alone", true, nullptr,
       nullptr, batching_probe},
      {"repeat", "the case sent again, cold, must equal its first answer", false, &C::cache_control, &C::no_cache_control,
       repeat_probe},
  };
  return table;
}

// The probes --probes asks for, in the table's order, each after the case's generation.
void run_probes(const ProbeCase& c, std::vector<ProbeResult>& out) {
  const server::ApiCapabilities& caps = c.run.api->caps();
  for (const ServingProbe& row : probe_table()) {
    if (std::find(c.run.o.probes.begin(), c.run.o.probes.end(), row.name) == c.run.o.probes.end()) continue;
    ProbeResult p;
    if (row.needs && !(caps.*row.needs))
      p = not_applicable(p, caps.*row.why_not);
    else
      p = row.run(c);
    p.name = row.name;
    out.push_back(std::move(p));
  }
}


}  // namespace server_subject

using server_subject::probe_table;
using server_subject::ServingProbe;

std::vector<std::string> serving_probe_names(bool defaults_only) {
  std::vector<std::string> out;
  for (const ServingProbe& p : probe_table())
    if (p.by_default || !defaults_only) out.emplace_back(p.name);
  return out;
}

std::string serving_probes_help() {
  std::string out;
  for (const ServingProbe& p : probe_table()) out += cat(p.name, " (", p.help, "),\n");
  return out;
}

}  // namespace degen
