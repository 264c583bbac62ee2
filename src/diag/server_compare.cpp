// compare --server (server_compare.h): the llama-server native API. Per case: one /completion per
// position for the teacher-forced top-K, then one /completion for the free-running generation.
#include "diag/server_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>

#include "engine/run_config.h"
#include "engine/sampler.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "util/error.h"

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
};

// A field of a server answer, or InputError naming the URL and what was expected.
const json& field(const json& j, const char* key, const std::string& url, const char* what) {
  if (!j.is_object() || !j.contains(key))
    input_error("malformed response from ", url, ": expected ", what, " under '", key, "', got ", j.dump().substr(0, 200));
  return j.at(key);
}

int32_t server_id(const json& v, const ServerRun& run, const std::string& url) {
  if (!v.is_number_integer()) input_error("malformed response from ", url, ": a token id that is not an integer: ", v.dump());
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= run.V)
    input_error("the server at ", run.base, " answers with token id ", id, ", outside the model's vocabulary of ", run.V,
                " ids: it serves another model's vocabulary");
  return static_cast<int32_t>(id);
}

// The record's first prompt detokenized by the server must be our tokenizer's text.
void check_vocabulary(const ServerRun& run, const std::vector<int32_t>& ids) {
  if (!run.tok || ids.empty()) return;
  const std::string url = run.base + "/detokenize";
  const json r = net::post_json(url, {{"tokens", ids}}, run.o.http);
  const json& c = field(r, "content", url, "the text of the ids");
  if (!c.is_string()) input_error("malformed response from ", url, ": 'content' is not a string");
  const std::string ours = run.tok->decode(ids);
  if (c.get<std::string>() != ours) {
    size_t i = 0;
    const std::string theirs = c.get<std::string>();
    while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
    input_error("the server at ", run.base, " serves another vocabulary: the record's first prompt (", ids.size(),
                " ids) detokenizes to '", theirs.substr(i, 40), "...' there and '", ours.substr(i, 40),
                "...' with the model's tokenizer (first difference at byte ", i, ")");
  }
}

// The server's top-K at one position, as a full distribution (log-probs per id, masked ids -inf):
// its listed ids keep their log-probs; the rest of its mass is spread evenly over the other real ids.
std::vector<float> topk_as_logits(const json& top, const ServerRun& run, const std::string& url,
                                  std::vector<uint8_t>& listed) {
  std::vector<float> lp(static_cast<size_t>(run.V), std::numeric_limits<float>::quiet_NaN());
  double mass = 0;
  listed.assign(static_cast<size_t>(run.V), 0);
  for (const json& e : top) {
    const int32_t id = server_id(field(e, "id", url, "a token id"), run, url);
    const json& l = field(e, "logprob", url, "a log-probability");
    const double v = l.is_null() ? -std::numeric_limits<double>::infinity() : l.get<double>();
    if (!std::isnan(lp[static_cast<size_t>(id)])) continue;  // listed twice: keep the first
    lp[static_cast<size_t>(id)] = static_cast<float>(v);
    mass += std::exp(v);
    listed[static_cast<size_t>(id)] = 1;
  }
  size_t rest = 0;
  for (size_t i = 0; i < lp.size(); ++i)
    if (std::isnan(lp[i]) && (run.mask.empty() || !run.mask[i])) ++rest;
  const double share = rest ? std::max(1.0 - mass, 0.0) / static_cast<double>(rest) : 0.0;
  const float rest_lp = share > 0 ? static_cast<float>(std::log(share)) : -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < lp.size(); ++i)
    if (std::isnan(lp[i])) lp[i] = (run.mask.empty() || !run.mask[i]) ? rest_lp : -std::numeric_limits<float>::infinity();
  return lp;
}

void teacher_forced(const ServerRun& run, const GoldenCase& g, CaseResult& cr, double& coverage) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  const std::string url = run.base + "/completion";
  std::vector<metrics::LogitPosition> pos;
  int64_t covered = 0;
  for (int64_t i = 0; i < T; ++i) {
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + i + 1);
    const json req = {{"prompt", prefix},      {"n_predict", 1},        {"n_probs", run.topk},
                      {"temperature", 0},      {"cache_prompt", true},  {"post_sampling_probs", false},
                      {"return_tokens", true}, {"ignore_eos", true}};
    const json r = net::post_json(url, req, run.o.http);
    const json& probs = field(r, "completion_probabilities", url, "per-token probabilities (n_probs)");
    if (!probs.is_array() || probs.empty())
      input_error("malformed response from ", url, ": no completion_probabilities for position ", i);
    const json& top = field(probs.at(0), "top_logprobs", url, "the top-K log-probabilities");
    if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": empty top_logprobs at position ", i);
    std::vector<uint8_t> listed;
    const std::vector<float> lp = topk_as_logits(top, run, url, listed);
    const int K = g.topk.K;
    metrics::GoldenTopK gk{std::span<const int32_t>(g.topk.ids.data() + i * K, static_cast<size_t>(K)),
                           std::span<const float>(g.topk.logprobs.data() + i * K, static_cast<size_t>(K)),
                           g.topk.lse[static_cast<size_t>(i)]};
    bool all = true;
    for (int32_t id : gk.ids) all = all && id >= 0 && id < run.V && listed[static_cast<size_t>(id)];
    covered += all ? 1 : 0;
    const int32_t next = i + 1 < T ? seq[static_cast<size_t>(i + 1)] : -1;
    pos.push_back(metrics::compare_logits_topk(lp, gk, next, run.mask));
  }
  coverage = T ? static_cast<double>(covered) / static_cast<double>(T) : 1.0;
  const std::optional<CaseFloors>& floors = g.floors[static_cast<int>(run.o.fclass)];
  cr.logits[0] = logits_result(pos, floors ? floors->kld[0] : std::nullopt, run.o.rules.kld, run.o.rules.fallback_kld);
}

void free_running(const ServerRun& run, const GoldenCase& g, CaseResult& cr, std::vector<std::string>& bad,
                  std::vector<std::string>& warn) {
  GenerationResult& gen = cr.gen;
  gen.golden_tokens = g.continuation;
  if (g.max_new_tokens > 0) {
    RunConfig base;
    const SamplingParams sp = apply_run_config(base, g.sampling).sampling;
    const std::string url = run.base + "/completion";
    json req = {{"prompt", g.prompt},    {"n_predict", g.max_new_tokens}, {"return_tokens", true},
                {"cache_prompt", false}, {"temperature", sp.temperature}, {"ignore_eos", g.ignore_stop}};
    if (sp.temperature > 0) {
      req["top_k"] = sp.top_k;
      req["top_p"] = sp.top_p;
      req["min_p"] = sp.min_p;
      req["repeat_penalty"] = sp.repetition_penalty;
      req["presence_penalty"] = sp.presence_penalty;
      req["seed"] = sp.seed;
    }
    const auto t0 = clock_type::now();
    const json r = net::post_json(url, req, run.o.http);
    gen.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    const json& toks = field(r, "tokens", url, "the generated token ids (return_tokens)");
    if (!toks.is_array()) input_error("malformed response from ", url, ": 'tokens' is not an array");
    for (const json& t : toks) gen.tokens.push_back(server_id(t, run, url));
    gen.stop_reason = r.value("stop_type", std::string("?"));
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

}  // namespace

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress) {
  const auto t0 = clock_type::now();
  if (o.api != "llama")
    input_error("compare --server: API '", o.api, "' is not spoken yet; expected 'llama' (llama-server's /completion)");
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    input_error("compare --server: '", o.url, "' is not an http:// or https:// URL");
  const ModelConfig& cfg = model.config;
  const int topk = o.topk > 0 ? o.topk : cfg.vocab_size <= kServerAllIds ? static_cast<int>(cfg.vocab_size) : 40;
  ServerRun run{rec, model, tok, o, cfg.vocab_size, topk, o.url, {}, {}, {}, std::nullopt};
  while (!run.base.empty() && run.base.back() == '/') run.base.pop_back();
  if (tok) {
    run.mask = tok->padding_mask(cfg.vocab_size);
    run.stops = stop_token_ids(model.dir / "generation_config.json", *tok);
    run.ws_ids = whitespace_ids(*tok);
    run.think_end = tok->token_id("</think>");
  } else {
    for (int64_t e : cfg.eos_token_ids) run.stops.push_back(static_cast<int32_t>(e));
  }

  CompareResult r;
  r.golden_dir = rec.dir().string();
  r.model_dir = model.dir.string();
  r.suite = rec.suite();
  r.config = cat("server ", run.base, " (api ", o.api, ")");
  r.backend = "another engine (HTTP)";
  r.source = "server";
  r.record_fingerprint = rec.model_fingerprint();
  r.model_fingerprint = model.fingerprint;
  check_record(rec, model, o.allow_model_mismatch, r);
  r.floor_class = floor_class_name(o.fclass);
  r.floors = rec.floors_present(o.fclass);
  r.floors_reason = rec.floors_reason(o.fclass);
  r.fail_on_model_degeneration = o.fail_on_model_degeneration;
  r.limits_note = cat("limits: logits: the server's top-", topk, topk == cfg.vocab_size ? " (every id)" : "", " against the record's top-K, the record's ", r.floor_class,
                      r.floors ? " KLD floor (k = 3)" : " KLD floor is absent: fixed 1e-4 nats",
                      "; no layer data through HTTP (compare --dump gives it)");
  const std::vector<size_t> selected = select_cases(rec, o.cases);
  bool checked_vocab = false;
  for (size_t i : selected) {
    const GoldenCase g = rec.load_case(i, false);
    if (!checked_vocab) {
      check_vocabulary(run, g.prompt);
      checked_vocab = true;
    }
    const auto c0 = clock_type::now();
    CaseResult cr;
    cr.id = g.id;
    cr.prompt_tokens = static_cast<int64_t>(g.prompt.size());
    cr.positions = static_cast<int64_t>(g.prompt.size() + g.continuation.size());
    double coverage = 1;
    teacher_forced(run, g, cr, coverage);
    std::vector<std::string> bad, warn;
    if (cr.logits[0]->nonfinite > 0) bad.push_back(cat(cr.logits[0]->nonfinite, " positions with non-finite log-probs"));
    if (!cr.logits[0]->pass)
      bad.push_back(cat("teacher-forced mean KLD ", cr.logits[0]->mean_kld, " > ", cr.logits[0]->limit,
                        cr.logits[0]->floor ? " (k x the record's floor)" : " (fixed limit)"));
    if (coverage < 1)
      warn.push_back(cat("the server's top-", topk, " missed some of the record's top-K ids at ",
                         cat(std::fixed, std::setprecision(1), 100 * (1 - coverage)), "% of positions: KLD there is an estimate"));
    if (o.free_running) free_running(run, g, cr, bad, warn);
    cr.verdict = !bad.empty() ? metrics::Verdict::bad
                 : cr.gen.verdict == metrics::Verdict::model_intrinsic ? metrics::Verdict::model_intrinsic
                                                                       : metrics::Verdict::good;
    cr.reasons = bad;
    cr.reasons.insert(cr.reasons.end(), warn.begin(), warn.end());
    cr.seconds = std::chrono::duration<double>(clock_type::now() - c0).count();
    r.verdict = metrics::worst(r.verdict, cr.verdict);
    if (progress)
      std::fprintf(progress, "compare: server case %s: %s (%.2f s)\n", cr.id.c_str(), metrics::verdict_name(cr.verdict),
                   cr.seconds);
    r.cases.push_back(std::move(cr));
  }
  r.exit_code = static_cast<int>(metrics::exit_code(r.verdict, o.fail_on_model_degeneration));
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

}  // namespace degen
