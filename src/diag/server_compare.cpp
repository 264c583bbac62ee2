// compare --server (server_compare.h): the judging. Per case: the teacher-forced top-K, then the
// free-running generation with its decode path, then the serving probes; the requests and answers are
// the engine API's (subjects/server/engine_api.h), which the judging asks by capability.
#include "diag/server_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>

#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "engine/sampler.h"
#include "judge/compare.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct ServerRun {
  const GoldenRecord& rec;
  const Model& model;
  const Tokenizer* tok;
  const ServerCompareOptions& o;
  int64_t V;
  int topk;
  std::string base;
  std::vector<uint8_t> mask;
  std::vector<int32_t> stops, ws_ids;
  std::optional<int32_t> think_end;
  mutable std::string vocab_note;  // set when the vocabulary could not be checked by text
  // The decode-path scoring's engines (made at its first use): the reference, and the floor class's
  // engine that sets the per-step limit.
  mutable std::unique_ptr<Backend> ref_be, floor_be;
  mutable std::unique_ptr<Engine> ref_eng, floor_eng;
  mutable std::string floor_name;
  // sglang: the server's teacher-forced distribution after the current case's prompt (its step-0
  // check), and what POST /flush_cache answered where it did not empty the cache.
  mutable std::optional<std::vector<std::pair<int64_t, double>>> prompt_end;
  mutable std::string flush_note;
  int64_t V_real = 0;  // the ids the tokenizer defines (V without a tokenizer)
  const server::EngineApi* api = nullptr;  // the --api entry
  server::ApiContext ctx;                  // what its requests need (URL, top-K, answer bounds)
};

using server_answer::TopList;

// Before any request: every request the run will make must fit one answer (ApiContext::cap), so that a
// --topk too large for a case's generation is refused now, not after its teacher-forced part.
void check_answer_bounds(const ServerRun& run, const std::vector<size_t>& selected) {
  for (size_t i : selected) {
    const GoldenCase g = run.rec.load_case(i, false);
    const int64_t P = static_cast<int64_t>(g.prompt.size()), T = P + static_cast<int64_t>(g.continuation.size());
    (void)run.ctx.cap(T + 1, run.api->forced_listings(run.ctx, T), run.topk);
    if (run.o.free_running && g.max_new_tokens > 0) (void)run.ctx.generation_cap(P, g.max_new_tokens, run.o.decode_path ? run.topk : 0);
  }
}

// The record's first prompt detokenized by the server must be our tokenizer's text.
void check_vocabulary(const ServerRun& run, const std::vector<int32_t>& ids) {
  if (!run.tok || ids.empty()) return;
  const std::string url = run.base + "/detokenize";
  json r;
  try {
    r = net::post_json(url, run.api->detokenize_request(run.ctx, ids), run.o.http);
  } catch (const net::HttpStatusError& e) {
    // The OpenAI-compatible API has no detokenizer of its own; llama-server and vLLM add one.
    if (run.api->caps().detokenize_optional && (e.status() == 404 || e.status() == 405)) {
      run.vocab_note = "the server has no /detokenize: its vocabulary is checked by its ids only";
      return;
    }
    throw;
  }
  const std::string theirs = server_answer::detokenized(r, url);
  const std::string ours = run.tok->decode(ids);
  if (theirs != ours) {
    size_t i = 0;
    while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
    input_error("the server at ", run.base, " serves another vocabulary: the record's first prompt (", ids.size(),
                " ids) detokenizes to '", theirs.substr(i, 40), "...' there and '", ours.substr(i, 40),
                "...' with the model's tokenizer (first difference at byte ", i, ")");
  }
}

// The server's list at one position as a metrics::Listing in the record's normalisation: ids at or
// beyond the vocabulary out (reported by the caller: the case is bad), padding ids out, an id listed
// twice once (the first), each log-prob moved by `lse_pad` (the record's, from the server's
// normalisation over all vocab_size rows to the real ids'; 0: none known), the real ids it leaves out
// counted.
metrics::Listing listing_of(const TopList& top, const ServerRun& run, double lse_pad) {
  metrics::Listing l;
  std::vector<uint8_t> seen(static_cast<size_t>(run.V), 0);
  for (const auto& [id, v] : top) {
    if (id < 0 || id >= run.V) continue;
    const size_t i = static_cast<size_t>(id);
    if (seen[i] || (!run.mask.empty() && run.mask[i])) continue;
    seen[i] = 1;
    l.ids.push_back(static_cast<int32_t>(id));
    l.logprobs.push_back(v + lse_pad);
  }
  l.unlisted = run.V_real - static_cast<int64_t>(l.ids.size());
  l.scale_slack = metrics::listing_scale_slack(run.V);
  return l;
}

// The first id at or beyond the vocabulary in a list, reported in `oov` (a case with one is bad: no
// correct server of this model lists such an id); listing_of leaves such ids out of the scoring.
void note_out_of_vocabulary(const TopList& top, const ServerRun& run, const std::string& where, std::string& oov) {
  for (const auto& e : top)
    if (e.first >= run.V && oov.empty())
      oov = cat("the server lists token id ", e.first, " at ", where, ", beyond the model's vocabulary of ", run.V,
                " ids (its logit rows): no correct server of this model can");
}

// The server's log-probs are normalised over all its vocab_size rows (llama.cpp, vLLM and HF
// transformers do not mask padding ids); the record's over the real ids. At position i they differ by
// the record's lse_pad (docs/metrics.md "Two normalisations"). For the KLD the server's values are
// taken to the record's normalisation (log p_real = log p_server + lse_pad: exact for a server computing
// the reference's logits; it matters only when the server lists part of the vocabulary, as a
// complete listing is renormalised over the real ids anyway); logprob_offset compares the server's
// log-probs with the record's in the server's normalisation, where a constant offset would show.
void teacher_forced(const ServerRun& run, const GoldenCase& g, CaseResult& cr, double& coverage, std::vector<std::string>& bad,
                    const std::vector<TopList>* fetched) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  const std::vector<TopList>& tops = *fetched;
  run.prompt_end.reset();
  if (!g.prompt.empty() && g.prompt.size() <= tops.size()) run.prompt_end = tops[g.prompt.size() - 1];
  std::vector<metrics::LogitPosition> pos;
  int64_t covered = 0, n_off = 0;
  double sum_off = 0;
  bool vocab_norm = true;
  std::string oov;
  for (int64_t i = 0; i < T; ++i) {
    const std::optional<double> shift = vocab_shift(g.topk, i);  // record -> server normalisation
    if (!shift) vocab_norm = false;
    const TopList& top = tops[static_cast<size_t>(i)];
    note_out_of_vocabulary(top, run, cat("position ", i), oov);
    const metrics::Listing l = listing_of(top, run, shift ? -*shift : 0.0);
    const int K = g.topk.K;
    metrics::GoldenTopK gk{std::span<const int32_t>(g.topk.ids.data() + i * K, static_cast<size_t>(K)),
                           std::span<const float>(g.topk.logprobs.data() + i * K, static_cast<size_t>(K)), 0.0};
    for (size_t j = 0; j < gk.ids.size(); ++j) {
      const auto it = std::find(l.ids.begin(), l.ids.end(), gk.ids[j]);
      const double v = it == l.ids.end() ? -std::numeric_limits<double>::infinity() : l.logprobs[static_cast<size_t>(it - l.ids.begin())];
      if (!std::isfinite(v) || !std::isfinite(gk.logprobs[j])) continue;
      // (server + lse_pad) - record = server - (record - lse_pad): the offset in the server's normalisation
      sum_off += v - static_cast<double>(gk.logprobs[j]);
      ++n_off;
    }
    const int32_t next = i + 1 < T ? seq[static_cast<size_t>(i + 1)] : -1;
    pos.push_back(metrics::compare_listing(gk, l, next));
    covered += pos.back().resolved.value_or(1.0) >= 1.0 ? 1 : 0;
  }
  if (!oov.empty()) bad.push_back(oov);
  coverage = T ? static_cast<double>(covered) / static_cast<double>(T) : 1.0;
  const std::optional<CaseFloors>& floors = g.floors[static_cast<int>(run.o.fclass)];
  std::optional<double> floor = floors ? floors->kld[0] : std::nullopt;
  if (run.o.measured_class) {
    auto it = run.o.measured_floors->find(g.id);
    if (it == run.o.measured_floors->end())
      it = run.o.measured_floors
               ->emplace(g.id, measured_kld_floor(g, run.model, *run.o.measured_class, run.o.factory,
                                                  run.mask.empty() ? nullptr : &run.mask))
               .first;
    floor = it->second;
  }
  cr.logits[0] = logits_result(pos, floor, run.o.rules.kld, run.o.rules.fallback_kld);
  double resolved = 0;
  for (const metrics::LogitPosition& p : pos) resolved += p.resolved.value_or(1.0);
  if (!pos.empty()) cr.logits[0]->resolved = resolved / static_cast<double>(pos.size());
  if (n_off > 0) cr.logits[0]->logprob_offset = sum_off / static_cast<double>(n_off);
  cr.logits[0]->logprob_offset_vocab = vocab_norm;
}

// The generated ids into gen.tokens, judged: an id beyond the vocabulary ends them (bad: no correct
// server of this model can generate it); an id the tokenizer does not define (a padding row) is bad
// in a greedy case (the reference never picks one; its mass there is ~1e-6, docs/server.md) and a
// warning in a sampled one.
void take_generated(const ServerRun& run, const server_answer::Generated& got, bool greedy, GenerationResult& gen,
                    std::vector<std::string>& bad, std::vector<std::string>& warn) {
  gen.stop_reason = got.stop_reason;
  bool padding_seen = false;  // the first one is reported
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const int64_t id = got.tokens[i];
    if (id >= run.V) {
      bad.push_back(cat("the server generated token id ", id, " at step ", i, ", beyond the model's vocabulary of ", run.V,
                        " ids (its logit rows): no correct server of this model can"));
      return;
    }
    if (!run.mask.empty() && run.mask[static_cast<size_t>(id)] && !padding_seen) {
      padding_seen = true;
      (greedy ? bad : warn)
          .push_back(cat("the server generated token id ", id, " at step ", i, ", which the tokenizer does not define (a padding row)",
                         greedy ? ": a greedy generation of a correct engine never picks one" : ""));
    }
    gen.tokens.push_back(static_cast<int32_t>(id));
  }
}

// The engines of the decode-path scoring, made once: the reference (RunConfig{}: fp32 on the CPU)
// and the floor class's engine (fp32 class: the fp64 reference, the same engine the record's fp32
// floors come from; bf16: the bf16 emulation; a measured class: its configuration).
void decode_engines(const ServerRun& run) {
  if (run.ref_eng) return;
  const ModelConfig& cfg = run.model.config;
  RunConfig ref;
  RunConfig fl;
  if (run.o.measured_class) {
    fl = *run.o.measured_class;
    run.floor_name = cat("our engine at ", fl.str(), " (the ", run.o.class_name, " class)");
  } else if (run.o.fclass == FloorClass::bf16) {
    fl.precision = Precision::bf16;
    run.floor_name = "our bf16 emulation (the bf16 class's floor engine)";
  } else {
    fl.precision = Precision::fp64;
    run.floor_name = "our fp64 reference (the fp32 class's floor engine)";
  }
  run.ref_be = run.o.factory(ref, cfg);
  run.ref_eng = std::make_unique<Engine>(cfg, run.model.weights, *run.ref_be, engine_options(ref));
  run.floor_be = run.o.factory(fl, cfg);
  run.floor_eng = std::make_unique<Engine>(cfg, run.model.weights, *run.floor_be, engine_options(fl));
}

// KLD(reference || the distribution `lp` [V]) at row `row` of a reference top-K block.
double step_kld(const std::vector<float>& lp, const TopKBlock& ref, int64_t row, const ServerRun& run) {
  const int K = ref.K;
  metrics::GoldenTopK gk{std::span<const int32_t>(ref.ids.data() + row * K, static_cast<size_t>(K)),
                         std::span<const float>(ref.logprobs.data() + row * K, static_cast<size_t>(K)), 0.0};
  return metrics::compare_logits_topk(lp, gk, -1, run.mask).kld;
}

// A server's list at `row` of a reference top-K block scored against it (metrics::compare_listing),
// its padding-row mass taken out with the block's lse_pad, as teacher_forced does with the record's.
metrics::LogitPosition listing_position(const TopList& top, const TopKBlock& ref, int64_t row, const ServerRun& run) {
  const int K = ref.K;
  metrics::GoldenTopK gk{std::span<const int32_t>(ref.ids.data() + row * K, static_cast<size_t>(K)),
                         std::span<const float>(ref.logprobs.data() + row * K, static_cast<size_t>(K)), 0.0};
  const std::optional<double> shift = vocab_shift(ref, row);
  return metrics::compare_listing(gk, listing_of(top, run, shift ? -*shift : 0.0), -1);
}

// A complete listing (every id of the vocabulary) must hold the whole mass: else the server's
// probabilities do not sum to 1 and cannot be scored as a distribution.
void check_complete_mass(const TopList& top, const ServerRun& run, const std::string& url, int64_t step) {
  if (static_cast<int64_t>(top.size()) < run.V) return;
  double mass = 0;
  for (const auto& e : top) mass += std::exp(e.second);
  if (mass < 1 - server_answer::kMaxServerMassExcess)
    input_error("malformed response from ", url, ": the ", top.size(), " log-probs listed at generated step ", step,
                " (every id of the vocabulary) sum to a probability of ", mass, ", expected 1: not a probability distribution");
}

// KLD(base || test) between two of the server's own listings (one as the golden top-K: padding ids
// and ids beyond the vocabulary out, an id listed twice once, a listing of every real id renormalised
// over them as the reference's is); nullopt when the base lists no real id.
std::optional<double> lists_kld(const ServerRun& run, const TopList& base, const TopList& test) {
  metrics::Listing b = listing_of(base, run, 0.0);
  std::vector<int32_t> ids;
  std::vector<float> lps;
  for (size_t k = 0; k < b.ids.size(); ++k)
    if (std::isfinite(b.logprobs[k])) {
      ids.push_back(b.ids[k]);
      lps.push_back(static_cast<float>(b.logprobs[k]));
    }
  if (ids.empty()) return std::nullopt;
  if (b.unlisted == 0) {
    double mass = 0;
    for (float v : lps) mass += std::exp(static_cast<double>(v));
    for (float& v : lps) v = static_cast<float>(static_cast<double>(v) - std::log(mass));
  }
  metrics::GoldenTopK g{std::span<const int32_t>(ids), std::span<const float>(lps), 0.0};
  return metrics::compare_listing(g, listing_of(test, run, 0.0), -1).kld;
}

// The decode path (compare.h DecodePathResult): the server's distribution at each generated step
// against our reference over the engine's own sequence; per-step limit from the floor class's engine
// over the same sequence, decoded as a server decodes (prompt in one call, then a token per call).
DecodePathResult decode_path(const ServerRun& run, const GoldenCase& g, const server_answer::Generated& got,
                             const std::vector<int32_t>& generated, const std::string& url, int64_t need_step) {
  DecodePathResult d;
  const int64_t P = static_cast<int64_t>(g.prompt.size());
  const int64_t n = static_cast<int64_t>(generated.size());
  d.steps = n;
  d.kld.assign(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < n; ++i)
    if (!got.steps[static_cast<size_t>(i)].empty()) {
      ++d.stated;
      if (run.o.decode_steps < 0 || static_cast<int64_t>(todo.size()) < run.o.decode_steps) todo.push_back(i);
    }
  if (d.stated < n)
    d.note = cat("the server stated no distribution at ", n - d.stated, " of ", n, " generated steps",
                 got.draft_n && *got.draft_n > 0 ? " (llama-server states none for tokens accepted from drafts)" : "");
  if (static_cast<int64_t>(todo.size()) < d.stated)
    d.note += cat(d.note.empty() ? "" : "; ", "--decode-steps ", run.o.decode_steps, ": ", todo.size(), " of ", d.stated, " stated steps scored");
  // The per-step floor is measured up to the last scored step, and up to need_step (the greedy
  // agreement's divergence) where that lies further.
  const int64_t last = std::min(std::max(todo.empty() ? int64_t{-1} : todo.back(), need_step), n - 1);
  if (last < 0 || P == 0) return d;
  decode_engines(run);
  std::vector<int32_t> seq = g.prompt;
  seq.insert(seq.end(), generated.begin(), generated.begin() + last + 1);  // the step `last` needs tokens up to it
  // The reference, teacher-forced (prefill) over the engine's sequence: rows P-1 .. P-1+last. Its
  // padding rows keep their logits (no vocab_mask) so that the block has each row's lse_pad, which takes
  // a server's log-probs to the real ids' normalisation (topk_block masks them for the top-K and lse).
  const std::vector<uint8_t>* mask = run.mask.empty() ? nullptr : &run.mask;
  ForcedOptions ro;
  ro.run_positions = P + last;
  const ForcedRun ref = forced_run(*run.ref_eng, seq, ro);
  const TopKBlock rk = topk_block(ref.logits, P + last, run.V, mask, g.topk.K > 0 ? g.topk.K : 40);
  // The floor engine, decoding as a server does.
  ForcedOptions fo;
  fo.mode = ForcedMode::decode;
  fo.vocab_mask = mask;
  fo.run_positions = P + last;
  fo.prefill_positions = P;
  const ForcedRun fl = forced_run(*run.floor_eng, seq, fo);
  double resolved = 0;
  for (int64_t i = 0; i <= last; ++i) {
    const int64_t row = P - 1 + i;
    if (std::find(todo.begin(), todo.end(), i) != todo.end()) {
      check_complete_mass(got.steps[static_cast<size_t>(i)], run, url, i);
      const metrics::LogitPosition lp = listing_position(got.steps[static_cast<size_t>(i)], rk, row, run);
      d.kld[static_cast<size_t>(i)] = lp.kld;
      resolved += lp.resolved.value_or(1.0);
    }
    const size_t frow = static_cast<size_t>(row - fl.logits_pos0);
    const std::vector<float> frow_logits(fl.logits.begin() + static_cast<std::ptrdiff_t>(frow * run.V),
                                         fl.logits.begin() + static_cast<std::ptrdiff_t>((frow + 1) * run.V));
    const double f = step_kld(frow_logits, rk, row, run);
    d.floor.push_back(f);
    d.peak_floor = std::max(d.peak_floor, std::isfinite(f) ? f : 0.0);
  }
  d.scored = static_cast<int64_t>(todo.size());
  d.floor_source = run.floor_name;
  d.limit = run.o.rules.kld.k * d.peak_floor + run.o.rules.kld.eps;
  if (todo.empty()) return d;
  double sum = 0;
  for (int64_t i : todo) {
    const double x = d.kld[static_cast<size_t>(i)];
    sum += x;
    d.max_kld = std::isnan(x) ? x : std::max(d.max_kld, x);
    if (!d.first_bad && !(x <= d.limit)) d.first_bad = i;  // NaN is over
  }
  d.mean_kld = sum / static_cast<double>(todo.size());
  d.resolved = resolved / static_cast<double>(todo.size());
  d.pass = !d.first_bad;
  if (d.first_bad) {
    // The engine's own prefill of the same tokens: the state carried across steps, or the layer math?
    const int64_t i = *d.first_bad, row = P - 1 + i;
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + row + 1);
    const TopList pre = run.api->position(run.ctx, prefix);
    d.prefill_kld = listing_position(pre, rk, row, run).kld;
    // The engine against itself: its decode distribution against its own prefill one.
    d.self_kld = lists_kld(run, pre, got.steps[static_cast<size_t>(i)]);
  }
  return d;
}

// Greedy agreement (metrics.md "Greedy agreement"): where a greedy generation leaves the golden
// continuation, the record's log-probs give the margin m = log q(golden) - log q(engine's token) at
// that position. Moving that much probability between the two tokens costs at least
// KLD ~ m^2 p_g p_t / (2 (p_g + p_t)) (second order in the log-odds of the pair, the other ids held),
// so noise whose per-step KLD stays within the limit L flips at most m_flip = sqrt(2 L (p_g + p_t) / (p_g p_t)).
// A divergence with m > m_flip is bad on its own. The engine's token outside the record's top-K:
// its log-prob is at most the K-th's; m and p_t are taken there (the margin is then a lower bound).
// note: the second-order cost is accurate for small moves; for moves of a nat or more it over-states
// their KLD (the exact cost grows linearly in the log-odds at large moves), so m_flip would come out
// too small: the rule is not applied where m_flip exceeds this.
constexpr double kMaxFlipMargin = 1.0;

// A stop reason that says the server ran out of tokens (its length limit), not that it chose to stop:
// llama-server's stop_type "limit", the OpenAI API's and SGLang's finish_reason "length".
bool length_stop(const std::string& reason) { return reason == "limit" || reason == "length"; }

void greedy_agreement(const ServerRun& run, const GoldenCase& g, GenerationResult& gen, double limit, const std::vector<int32_t>& stops,
                      std::vector<std::string>& bad) {
  if (!gen.first_divergence) {
    gen.agreement = "same";
    return;
  }
  const int64_t d = *gen.first_divergence;
  // Stop semantics: a record generated with stops ignored runs through its stop ids; llama-server's
  // ignore_eos bans end-of-generation ids instead (as does its OpenAI endpoint), so from the golden's
  // first stop id on, the two rules differ and agreement is not judged.
  for (int64_t j = 0; j <= d && j < static_cast<int64_t>(g.continuation.size()); ++j)
    if (std::find(stops.begin(), stops.end(), g.continuation[static_cast<size_t>(j)]) != stops.end()) {
      gen.agreement = cat("not judged: at or beyond the golden's first stop id (token ", j,
                          "), where a server's ignore_eos bans what the record generated through");
      return;
    }
  if (d >= static_cast<int64_t>(g.continuation.size())) {
    gen.agreement = "not judged: the engine goes on where the golden continuation ends";
    return;
  }
  const int32_t gt = g.continuation[static_cast<size_t>(d)];
  const bool ended = d >= static_cast<int64_t>(gen.tokens.size());  // the engine stopped where the golden goes on
  if (ended && gen.tokens.empty()) {
    gen.agreement = "not judged: no tokens (an empty answer is judged on its own)";
    return;
  }
  if (ended) {
    // A server leaves its stop token out of the tokens: ending where the golden has a stop id is the same end.
    if (!g.ignore_stop && std::find(run.stops.begin(), run.stops.end(), gt) != run.stops.end()) {
      gen.agreement = "same (both end at a stop token)";
      return;
    }
    if (length_stop(gen.stop_reason) || g.ignore_stop) {
      gen.agreement = "cut short";
      bad.push_back(cat("greedy generation cut short: the server stopped after ", d, " of the golden's ", g.continuation.size(),
                        " tokens (stop: ", gen.stop_reason, ") where the golden goes on with token ", gt,
                        g.ignore_stop ? " (stops ignored)" : ", not a stop token", "; the request's budget was ", g.max_new_tokens,
                        " tokens: a correct greedy engine with that budget cannot end there"));
      return;
    }
  }
  const int64_t row = static_cast<int64_t>(g.prompt.size()) - 1 + d;
  const int K = g.topk.K;
  if (K < 2 || row >= static_cast<int64_t>(g.topk.ids.size()) / K) {
    gen.agreement = "not judged: the record has no top-K there";
    if (ended)  // no margin to weigh the early end against: a correct greedy engine does not end there
      bad.push_back(cat("greedy generation ended after ", d, " tokens (stop: ", gen.stop_reason, ") where the golden goes on with token ",
                        gt, ", not a stop token"));
    return;
  }
  // The engine's token at d: what it generated, or, where it ended, the stop id the record finds likeliest.
  double lg = -std::numeric_limits<double>::infinity(), le = lg;
  int32_t et = ended ? -1 : gen.tokens[static_cast<size_t>(d)];
  bool listed = false;
  for (int k = 0; k < K; ++k) {
    const int32_t id = g.topk.ids[static_cast<size_t>(row * K + k)];
    const double v = g.topk.logprobs[static_cast<size_t>(row * K + k)];
    if (id == gt) lg = v;
    const bool is_et = ended ? std::find(run.stops.begin(), run.stops.end(), id) != run.stops.end() && !listed : id == et;
    if (is_et) {
      le = v;
      et = id;
      listed = true;
    }
  }
  if (!listed) le = g.topk.logprobs[static_cast<size_t>(row * K + K - 1)];
  if (!std::isfinite(lg) || !std::isfinite(le)) {
    gen.agreement = "not judged: the record's log-probs there are not finite";
    return;
  }
  const double m = lg - le, pg = std::exp(lg), pt = std::exp(le);
  gen.margin_engine = m;
  gen.flip_margin = std::sqrt(2 * limit * (pg + pt) / (pg * pt));
  if (*gen.flip_margin > kMaxFlipMargin) {
    gen.agreement = cat("not judged: the per-step limit ", limit, " would allow moves of ", *gen.flip_margin,
                        " nats, beyond where the second-order rule holds (", kMaxFlipMargin, ")");
    return;
  }
  const std::string what = ended ? cat("the server ended after ", d, " tokens (stop: ", gen.stop_reason, ")")
                                 : cat("token ", d, " is ", et);
  const std::string theirs = ended ? (listed ? cat("its likeliest stop token ", et) : std::string("any stop token"))
                                   : std::string("the engine's token");
  if (m > *gen.flip_margin) {
    gen.agreement = "beyond noise";
    bad.push_back(cat("greedy agreement: ", what, " where the golden has ", gt, ", a margin of ", m, " nats over ", theirs,
                      listed ? "" : " at least (outside the record's top-K)", " in the record, larger than the ",
                      *gen.flip_margin, " that noise within the per-step KLD limit ", limit, " can flip"));
  } else {
    gen.agreement = "within noise";
  }
}

ProbeResult not_applicable(ProbeResult& p, std::string why) {
  p.verdict = "not applicable";
  p.reason = std::move(why);
  return p;
}

// A probe's judgement (compare.h ProbeResult): the case's answer in another serving state (`other`,
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

// What a serving probe gets: the case, its sampling, and its cold run (the request and its answer).
struct ProbeCase {
  const ServerRun& run;
  const GoldenCase& g;
  const SamplingParams& sp;
  bool greedy;
  const server_answer::Generated& cold;
  const json& cold_req;
  double limit;
  int64_t prompt() const { return static_cast<int64_t>(g.prompt.size()); }
};

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
                                      : cat("the server does not say what it reused (no ", caps.cached_field, ")"));
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
  const std::string what = shape.one_request ? cat("batched (one request of ", others + 1, " sequences)")
                                             : cat("batched (beside ", others, others == 1 ? " other request, " : " other requests, ",
                                                   shape.slots.value_or(0), " slots)");
  const std::string good = shape.one_request ? cat("in one request beside ", others, " other sequences; batched equals solo")
                                             : cat("beside ", others, others == 1 ? " other request on " : " other requests on ",
                                                   shape.slots.value_or(0), " slots; batched equals solo");
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
  const server_answer::Generated again = probe_generation(c, c.cold_req);
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
    RunConfig base;
    const SamplingParams sp = apply_run_config(base, g.sampling).sampling;
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

// The reason of a check whose KLD passes on a listing that resolves too little of the record's mass
// to judge (CompareRules::min_resolved): untestable, not good.
std::string not_judgeable(const char* what, double resolved, double kld, double limit, const ServerRun& run) {
  const std::string why = static_cast<size_t>(run.topk) < metrics::kMinListedIds
                              ? cat("the server's top-", run.topk, " is fewer ids than the ", metrics::kMinListedIds,
                                    " a KLD needs to be judged (a chi-square of so few cells says little about a floor)")
                              : cat("the server's top-", run.topk, " lists only ", cat(std::setprecision(3), 100 * resolved),
                                    "% of the record's stored mass (at least ", 100 * run.o.rules.min_resolved, "% is needed to judge)");
  return cat("not judgeable: ", what, " KLD ", kld, " is within the limit ", limit, ", but ", why, ": ask for more ids (--topk, up to ",
             run.V_real, ")");
}

// --served-model against GET /v1/models: a name the server does not serve is an input error (vLLM
// would refuse each request with 404 "The model ... does not exist"); a server without the list is
// noted (the return value, for the limits line).
std::string check_served_model(const ServerRun& run) {
  const std::string url = run.base + "/v1/models";
  json r;
  try {
    r = net::get_json(url, run.o.http);
  } catch (const net::HttpStatusError& e) {
    if (e.status() == 404 || e.status() == 405) return cat("; the server has no /v1/models: --served-model '", run.o.served_model, "' not checked");
    throw;
  }
  const std::vector<std::string> names = server_answer::served_models(r, url);
  if (std::find(names.begin(), names.end(), run.o.served_model) != names.end()) return "";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n.substr(0, 80) + "'";
  input_error("the server at ", run.base, " does not serve '", run.o.served_model, "' (--served-model): GET /v1/models lists ",
              names.empty() ? std::string("no model") : list);
}

// The --api entry, with the options that apply to it: InputError for an unknown API (naming the
// table's) or an option of another API.
const server::EngineApi& checked_api(const ServerCompareOptions& o) {
  const server::EngineApi& api = server::find_api(o.api);
  const server::ApiCapabilities& caps = api.caps();
  if (o.prompt_logprobs && !caps.prompt_logprobs_option)
    input_error("compare --server: --prompt-logprobs is a parameter of the OpenAI-compatible API (vLLM); with --api ", o.api, " ",
                caps.forced_shape);
  if (o.sglang_original_logprobs && !caps.states_scaled_logprobs)
    input_error("compare --server: --sglang-logprobs applies to --api sglang only");
  return api;
}

// What the API's requests need, from the run (its base URL, top-K and vocabulary) and the options.
server::ApiContext api_context(const ServerRun& run) {
  server::ApiContext c;
  c.base = run.base;
  c.topk = run.topk;
  c.V = run.V;
  c.served_model = run.o.served_model;
  c.prompt_logprobs = run.o.prompt_logprobs;
  c.original_logprobs = run.o.sglang_original_logprobs;
  c.decode_path = run.o.decode_path;
  c.http = run.o.http;
  c.measure_pieces(run.tok);
  return c;
}

// The teacher-forced top-K at every position of each case's sequence, as the API fetches them.
std::vector<std::vector<TopList>> fetch_forced(const ServerRun& run, const std::vector<GoldenCase>& cases) {
  std::vector<std::vector<int32_t>> seqs;
  for (const GoldenCase& c : cases) seqs.push_back(c.sequence());
  return run.api->forced(run.ctx, seqs);
}

// A running server as the subject of a comparison (judge/subject.h): per case, its teacher-forced
// listings at every golden position, then its free-running generation with the decode path and the
// serving probes. The teacher-forced answers are fetched in groups of the API's forced_batch cases
// (SGLang takes several sequences per request); the vocabulary is checked by text once, before the
// first case's requests.
class ServerSubject : public Subject {
 public:
  explicit ServerSubject(const ServerRun& run) : run_(run) {}

  void describe(CompareResult& r) const override {
    r.config = cat("server ", run_.base, " (api ", run_.o.api, ")");
    r.backend = "another engine (HTTP)";
    r.source = "server";
  }
  SubjectFloors floors() const override {
    const ServerCompareOptions& o = run_.o;
    return {o.measured_class ? o.class_name : floor_class_name(o.fclass), o.fclass, o.measured_class.has_value()};
  }
  std::string limits_note(const CompareResult& r) const override {
    const ServerCompareOptions& o = run_.o;
    return cat("limits: logits: the server's top-", run_.topk, run_.topk == run_.V ? " (every id)" : "", " against the record's top-K, ",
               o.measured_class ? cat("the ", r.floor_class, " class's KLD floor measured now (our engine at ", o.measured_class->str(), "; k = 3)")
               : r.floors       ? cat("the record's ", r.floor_class, " KLD floor (k = 3)")
                                : cat("the record's ", r.floor_class, " KLD floor is absent: fixed 1e-4 nats"),
               "; no layer data through HTTP (compare --dump gives it)");
  }
  void prepare(CompareResult& r) override {
    if (run_.api->caps().checks_served_model && !run_.o.served_model.empty()) r.limits_note += check_served_model(run_);
  }
  void open(const std::vector<size_t>& selected, CompareResult&) override {
    check_answer_bounds(run_, selected);
    selected_ = selected;
  }
  // The case's group loaded (its teacher-forced answers fetched at once for SGLang), the vocabulary
  // checked before the first.
  void begin_case(CaseWork& w) override {
    const size_t group = run_.api->caps().forced_batch;
    if (w.slot % group == 0) {
      cases_.clear();
      for (size_t n = w.slot; n < std::min(selected_.size(), w.slot + group); ++n)
        cases_.push_back(run_.rec.load_case(selected_[n], false));
      if (!checked_vocab_) {
        check_vocabulary(run_, cases_.front().prompt);
        checked_vocab_ = true;
      }
      fetched_ = fetch_forced(run_, cases_);
    }
    at_ = w.slot % group;
    const GoldenCase& g = cases_[at_];
    w.cr.id = g.id;
    w.cr.prompt_tokens = static_cast<int64_t>(g.prompt.size());
    w.cr.positions = static_cast<int64_t>(g.prompt.size() + g.continuation.size());
  }
  void teacher_forced(CaseWork& w) override {
    CaseResult& cr = w.cr;
    double coverage = 1;
    degen::teacher_forced(run_, cases_[at_], cr, coverage, w.bad, fetched_.empty() ? nullptr : &fetched_[at_]);
    const LogitsResult& lr = *cr.logits[0];
    if (lr.nonfinite > 0) w.bad.push_back(cat(lr.nonfinite, " positions with non-finite log-probs"));
    if (!lr.pass)
      w.bad.push_back(cat("teacher-forced mean KLD ", lr.mean_kld, " > ", lr.limit, lr.floor ? " (k x the record's floor)" : " (fixed limit)"));
    const double resolved = lr.resolved.value_or(1.0);
    if (lr.pass && resolved < run_.o.rules.min_resolved)
      w.unjudged.push_back(not_judgeable("teacher-forced", resolved, lr.mean_kld, lr.limit, run_));
    else if (coverage < 1)
      w.warn.push_back(cat("the server's top-", run_.topk, " missed some of the record's top-K ids at ",
                           cat(std::fixed, std::setprecision(1), 100 * (1 - coverage)), "% of positions (",
                           cat(std::setprecision(3), 100 * resolved), "% of the record's stored mass listed): the KLD there is the ",
                           "smallest the listing allows"));
  }
  void generation(CaseWork& w) override {
    if (run_.o.free_running) free_running(run_, cases_[at_], w.cr, w.bad, w.warn);
    const std::optional<DecodePathResult>& dp = w.cr.gen.decode_path;
    if (dp && dp->pass && dp->resolved && *dp->resolved < run_.o.rules.min_resolved)
      w.unjudged.push_back(not_judgeable("decode path", *dp->resolved, dp->max_kld, dp->limit, run_));
  }
  std::string progress(const CaseResult& cr) const override {
    return cat("compare: server case ", cr.id, ": ", metrics::verdict_name(cr.verdict), " (",
               cat(std::fixed, std::setprecision(2), cr.seconds), " s)");
  }
  void finish(CompareResult& r, std::FILE*) override {
    if (!run_.vocab_note.empty()) r.limits_note += "; " + run_.vocab_note;
    r.limits_note += "\n" + logprob_offset_note(r, run_.V, run_.mask, "server");
  }

 private:
  const ServerRun& run_;
  std::vector<size_t> selected_;
  bool checked_vocab_ = false;
  std::vector<GoldenCase> cases_;                 // the group under way
  std::vector<std::vector<TopList>> fetched_;     // the group's teacher-forced answers (empty: fetched per case)
  size_t at_ = 0;                                 // the case under way within the group
};

}  // namespace

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

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress) {
  const server::EngineApi& api = checked_api(o);
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    input_error("compare --server: '", o.url, "' is not an http:// or https:// URL");
  const ModelConfig& cfg = model.config;
  if (o.topk < 0 || o.topk > cfg.vocab_size)
    input_error("compare --server: --topk ", o.topk, ": the model has ", cfg.vocab_size, " logit rows; expected 1 to ", cfg.vocab_size,
                " (0: every id up to ", kServerAllIds, " rows, else 40)");
  const int topk = o.topk > 0 ? o.topk : cfg.vocab_size <= kServerAllIds ? static_cast<int>(cfg.vocab_size) : 40;
  ServerRun run{rec, model, tok, o, cfg.vocab_size, topk, o.url, {}, {}, {}, std::nullopt, {}, {}, {}, {}, {}, {}, std::nullopt, {}, 0, nullptr, {}};
  while (!run.base.empty() && run.base.back() == '/') run.base.pop_back();
  if (tok) {
    run.mask = tok->padding_mask(cfg.vocab_size);
    run.stops = stop_token_ids(model.dir / "generation_config.json", *tok);
    run.ws_ids = whitespace_ids(*tok);
    run.think_end = tok->token_id("</think>");
  } else {
    for (int64_t e : cfg.eos_token_ids) run.stops.push_back(static_cast<int32_t>(e));
  }
  run.V_real = run.mask.empty() ? run.V : static_cast<int64_t>(std::count(run.mask.begin(), run.mask.end(), uint8_t{0}));
  run.api = &api;
  run.ctx = api_context(run);

  ServerSubject subject(run);
  return compare(rec, model, tok, o, subject, progress);
}

}  // namespace degen
