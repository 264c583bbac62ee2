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
  mutable std::string vocab_note;  // set when the vocabulary could not be checked by text
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
  json body = {{"tokens", ids}};
  if (!run.o.served_model.empty()) body["model"] = run.o.served_model;
  json r;
  try {
    r = net::post_json(url, body, run.o.http);
  } catch (const net::HttpStatusError& e) {
    // The OpenAI-compatible API has no detokenizer of its own; llama-server and vLLM add one.
    if (run.o.api == "openai" && (e.status() == 404 || e.status() == 405)) {
      run.vocab_note = "the server has no /detokenize: its vocabulary is checked by its ids only";
      return;
    }
    throw;
  }
  const char* key = run.o.api == "openai" && r.is_object() && r.contains("prompt") && !r.contains("content") ? "prompt" : "content";
  const json& c = field(r, key, url, "the text of the ids");
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

// One position's answer: (id, log-prob) pairs as the server listed them.
using TopList = std::vector<std::pair<int32_t, double>>;

double logprob_value(const json& l, const std::string& url) {
  if (l.is_null()) return -std::numeric_limits<double>::infinity();  // llama-server writes -inf as null
  if (!l.is_number()) input_error("malformed response from ", url, ": a log-probability that is not a number: ", l.dump());
  return l.get<double>();
}

// [{"id": N, "logprob": x}, ...] (llama-server, both APIs).
TopList top_from_id_list(const json& top, const ServerRun& run, const std::string& url) {
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": expected a non-empty list of top log-probs");
  TopList out;
  for (const json& e : top)
    out.emplace_back(server_id(field(e, "id", url, "a token id"), run, url),
                     logprob_value(field(e, "logprob", url, "a log-probability"), url));
  return out;
}

// "token_id:N" (vLLM's return_tokens_as_token_ids) as N; InputError for a token given as text.
int32_t id_from_token_key(const std::string& key, const ServerRun& run, const std::string& url) {
  const std::string pre = "token_id:";
  if (key.rfind(pre, 0) != 0)
    input_error("malformed response from ", url, ": a token given as text ('", key.substr(0, 40), "'), expected its id as 'token_id:N' ",
                "(vLLM: return_tokens_as_token_ids) or llama-server's 'content' list with ids; text cannot be mapped back to ids ",
                "without re-tokenising");
  try {
    size_t used = 0;
    const long long v = std::stoll(key.substr(pre.size()), &used);
    if (used != key.size() - pre.size()) throw std::invalid_argument("tail");
    return server_id(json(v), run, url);
  } catch (const std::logic_error&) {
    input_error("malformed response from ", url, ": '", key.substr(0, 40), "' is not 'token_id:N'");
  }
}

// {"token_id:N": x, ...} (the completions API's classic top_logprobs entry) or {"N": {"logprob": x}}
// (vLLM's prompt_logprobs entry).
TopList top_from_map(const json& m, const ServerRun& run, const std::string& url) {
  if (!m.is_object() || m.empty()) input_error("malformed response from ", url, ": expected a non-empty object of top log-probs");
  TopList out;
  for (auto& [k, v] : m.items()) {
    if (v.is_object()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(k, &used);
        if (used != k.size()) id = -1;
      } catch (const std::logic_error&) {
      }
      if (id < 0) input_error("malformed response from ", url, ": prompt_logprobs key '", k.substr(0, 40), "' is not a token id");
      out.emplace_back(server_id(json(id), run, url), logprob_value(field(v, "logprob", url, "a log-probability"), url));
    } else {
      out.emplace_back(id_from_token_key(k, run, url), logprob_value(v, url));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

// The server's top-K at one position, as a full distribution (log-probs per id, masked ids -inf):
// its listed ids keep their log-probs; the rest of its mass is spread evenly over the other real ids.
std::vector<float> topk_as_logits(const TopList& top, const ServerRun& run, std::vector<uint8_t>& listed) {
  std::vector<float> lp(static_cast<size_t>(run.V), std::numeric_limits<float>::quiet_NaN());
  double mass = 0;
  listed.assign(static_cast<size_t>(run.V), 0);
  for (const auto& [id, v] : top) {
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

// choices[0] of a completions answer.
const json& first_choice(const json& r, const std::string& url) {
  const json& ch = field(r, "choices", url, "the completion choices");
  if (!ch.is_array() || ch.empty()) input_error("malformed response from ", url, ": 'choices' is empty");
  return ch.at(0);
}

// The top-K of the first generated token in a completions answer: llama-server's
// logprobs.content[0].top_logprobs (with ids) or the classic logprobs.top_logprobs[0] ("token_id:N").
TopList openai_generated_top(const json& choice, const ServerRun& run, const std::string& url) {
  const json& lp = field(choice, "logprobs", url, "log-probs (the request's 'logprobs')");
  if (lp.is_object() && lp.contains("content")) {
    const json& c = lp.at("content");
    if (!c.is_array() || c.empty()) input_error("malformed response from ", url, ": empty logprobs.content");
    return top_from_id_list(field(c.at(0), "top_logprobs", url, "the top-K log-probabilities"), run, url);
  }
  const json& top = field(lp, "top_logprobs", url, "the top-K log-probabilities");
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": empty logprobs.top_logprobs");
  return top_from_map(top.at(0), run, url);
}

// A /v1/completions request: a token-id prompt, the ids asked back ("token_id:N" where the server
// writes tokens as text), the served model's name when given.
json openai_request(const ServerRun& run, const std::vector<int32_t>& prompt, int64_t max_tokens, const json& temperature,
                    int logprobs) {
  json req = {{"prompt", prompt},     {"max_tokens", max_tokens}, {"temperature", temperature},
              {"logprobs", logprobs}, {"return_tokens_as_token_ids", true}};
  if (!run.o.served_model.empty()) req["model"] = run.o.served_model;
  return req;
}

// The top-K at every position of `seq` (the distribution after seq[0..i]).
std::vector<TopList> server_topk(const ServerRun& run, const std::vector<int32_t>& seq) {
  const int64_t T = static_cast<int64_t>(seq.size());
  std::vector<TopList> out;
  if (run.o.api == "openai" && run.o.prompt_logprobs) {
    // One request: prompt_logprobs[j] is the distribution that predicted seq[j] (j >= 1); the last
    // position's is the generated token's top-K.
    const std::string url = run.base + "/v1/completions";
    json req = openai_request(run, seq, 1, 0, run.topk);
    req["prompt_logprobs"] = run.topk;
    const json r = net::post_json(url, req, run.o.http);
    const json& choice = first_choice(r, url);
    const json& pl = field(choice, "prompt_logprobs", url, "prompt log-probs (prompt_logprobs)");
    if (!pl.is_array() || static_cast<int64_t>(pl.size()) != T)
      input_error("malformed response from ", url, ": expected ", T, " prompt_logprobs entries (one per prompt token), got ",
                  pl.is_array() ? std::to_string(pl.size()) : pl.dump().substr(0, 80));
    for (int64_t j = 1; j < T; ++j) out.push_back(top_from_map(pl.at(static_cast<size_t>(j)), run, url));
    out.push_back(openai_generated_top(choice, run, url));
    return out;
  }
  for (int64_t i = 0; i < T; ++i) {
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + i + 1);
    if (run.o.api == "openai") {
      const std::string url = run.base + "/v1/completions";
      const json req = openai_request(run, prefix, 1, 0, run.topk);
      out.push_back(openai_generated_top(first_choice(net::post_json(url, req, run.o.http), url), run, url));
      continue;
    }
    const std::string url = run.base + "/completion";
    const json req = {{"prompt", prefix},      {"n_predict", 1},        {"n_probs", run.topk},
                      {"temperature", 0},      {"cache_prompt", true},  {"post_sampling_probs", false},
                      {"return_tokens", true}, {"ignore_eos", true}};
    const json r = net::post_json(url, req, run.o.http);
    const json& probs = field(r, "completion_probabilities", url, "per-token probabilities (n_probs)");
    if (!probs.is_array() || probs.empty())
      input_error("malformed response from ", url, ": no completion_probabilities for position ", i);
    const json& top = field(probs.at(0), "top_logprobs", url, "the top-K log-probabilities");
    if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": empty top_logprobs at position ", i);
    out.push_back(top_from_id_list(top, run, url));
  }
  return out;
}

// The server's log-probs are normalised over all its vocab_size rows (llama.cpp, vLLM and HF
// transformers do not mask padding ids); the record's over the real ids. At position i they differ by
// the record's lse_pad (docs/metrics.md "Two normalisations"). For the KLD the server's values are
// taken to the record's normalisation (log p_real = log p_server + lse_pad: exact for a server computing
// the reference's logits; it matters only when the server lists part of the vocabulary, as a
// complete listing is renormalised over the real ids anyway); logprob_offset compares the server's
// log-probs with the record's in the server's normalisation, where a constant offset would show.
void teacher_forced(const ServerRun& run, const GoldenCase& g, CaseResult& cr, double& coverage) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  const std::vector<TopList> tops = server_topk(run, seq);
  std::vector<metrics::LogitPosition> pos;
  int64_t covered = 0, n_off = 0;
  double sum_off = 0;
  bool vocab_norm = true;
  for (int64_t i = 0; i < T; ++i) {
    const std::optional<double> shift = vocab_shift(g.topk, i);  // record -> server normalisation
    if (!shift) vocab_norm = false;
    TopList top = tops[static_cast<size_t>(i)];
    if (shift)
      for (auto& e : top) e.second -= *shift;
    std::vector<uint8_t> listed;
    const std::vector<float> lp = topk_as_logits(top, run, listed);
    const int K = g.topk.K;
    // note: lse 0: the test values are log-probs, so the golden's are compared as log-probs too.
    metrics::GoldenTopK gk{std::span<const int32_t>(g.topk.ids.data() + i * K, static_cast<size_t>(K)),
                           std::span<const float>(g.topk.logprobs.data() + i * K, static_cast<size_t>(K)), 0.0};
    bool all = true;
    for (size_t j = 0; j < gk.ids.size(); ++j) {
      const int32_t id = gk.ids[j];
      const bool in = id >= 0 && id < run.V && listed[static_cast<size_t>(id)];
      all = all && in;
      if (!in || !std::isfinite(lp[static_cast<size_t>(id)]) || !std::isfinite(gk.logprobs[j])) continue;
      // (server - shift) - record = server - (record + shift): the offset in the server's normalisation
      sum_off += static_cast<double>(lp[static_cast<size_t>(id)]) - static_cast<double>(gk.logprobs[j]);
      ++n_off;
    }
    covered += all ? 1 : 0;
    const int32_t next = i + 1 < T ? seq[static_cast<size_t>(i + 1)] : -1;
    pos.push_back(metrics::compare_logits_topk(lp, gk, next, run.mask));
  }
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
  if (n_off > 0) cr.logits[0]->logprob_offset = sum_off / static_cast<double>(n_off);
  cr.logits[0]->logprob_offset_vocab = vocab_norm;
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
    if (run.o.api == "openai") {
      // The completions API returns text; the ids come from the per-token log-probs (logprobs: 1).
      const std::string ourl = run.base + "/v1/completions";
      json oreq = openai_request(run, g.prompt, g.max_new_tokens, sp.temperature, 1);
      oreq["ignore_eos"] = g.ignore_stop;
      if (sp.temperature > 0) {
        oreq["top_p"] = sp.top_p;
        oreq["top_k"] = sp.top_k;
        oreq["min_p"] = sp.min_p;
        oreq["presence_penalty"] = sp.presence_penalty;
        oreq["repetition_penalty"] = sp.repetition_penalty;  // vLLM's name
        oreq["repeat_penalty"] = sp.repetition_penalty;      // llama-server's
        oreq["seed"] = sp.seed;
      }
      const json r = net::post_json(ourl, oreq, run.o.http);
      gen.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      const json& choice = first_choice(r, ourl);
      const json& lp = field(choice, "logprobs", ourl, "the generated tokens' log-probs (logprobs: 1)");
      if (lp.is_object() && lp.contains("content")) {
        const json& c = lp.at("content");
        if (!c.is_array()) input_error("malformed response from ", ourl, ": logprobs.content is not a list");
        for (const json& e : c) gen.tokens.push_back(server_id(field(e, "id", ourl, "a token id"), run, ourl));
      } else {
        const json& toks = field(lp, "tokens", ourl, "the generated tokens (logprobs.tokens)");
        if (!toks.is_array()) input_error("malformed response from ", ourl, ": logprobs.tokens is not a list");
        for (const json& t : toks) {
          if (!t.is_string()) input_error("malformed response from ", ourl, ": a token that is not a string: ", t.dump());
          gen.tokens.push_back(id_from_token_key(t.get<std::string>(), run, ourl));
        }
      }
      const json fr = choice.value("finish_reason", json("?"));
      gen.stop_reason = fr.is_string() ? fr.get<std::string>() : "?";
    } else {
      const json r = net::post_json(url, req, run.o.http);
      gen.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      const json& toks = field(r, "tokens", url, "the generated token ids (return_tokens)");
      if (!toks.is_array()) input_error("malformed response from ", url, ": 'tokens' is not an array");
      for (const json& t : toks) gen.tokens.push_back(server_id(t, run, url));
      gen.stop_reason = r.value("stop_type", std::string("?"));
    }
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
  if (o.api != "llama" && o.api != "openai")
    input_error("compare --server: API '", o.api, "' is unknown; expected 'llama' (llama-server's /completion) or 'openai' ",
                "(/v1/completions)");
  if (o.prompt_logprobs && o.api != "openai")
    input_error("compare --server: --prompt-logprobs is a parameter of the OpenAI-compatible API (vLLM); with --api llama ",
                "there is one request per position");
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    input_error("compare --server: '", o.url, "' is not an http:// or https:// URL");
  const ModelConfig& cfg = model.config;
  const int topk = o.topk > 0 ? o.topk : cfg.vocab_size <= kServerAllIds ? static_cast<int>(cfg.vocab_size) : 40;
  ServerRun run{rec, model, tok, o, cfg.vocab_size, topk, o.url, {}, {}, {}, std::nullopt, {}};
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
  check_record(rec, model, tok, o.allow_model_mismatch, r);
  r.floor_class = o.measured_class ? o.class_name : floor_class_name(o.fclass);
  r.floors = o.measured_class ? true : rec.floors_present(o.fclass);
  r.floors_reason = o.measured_class ? "" : rec.floors_reason(o.fclass);
  r.fail_on_model_degeneration = o.fail_on_model_degeneration;
  r.limits_note = cat("limits: logits: the server's top-", topk, topk == cfg.vocab_size ? " (every id)" : "", " against the record's top-K, ",
                      o.measured_class ? cat("the ", r.floor_class, " class's KLD floor measured now (our engine at ",
                                             o.measured_class->str(), "; k = 3)")
                      : r.floors       ? cat("the record's ", r.floor_class, " KLD floor (k = 3)")
                                       : cat("the record's ", r.floor_class, " KLD floor is absent: fixed 1e-4 nats"),
                      "; no layer data through HTTP (compare --dump gives it)");
  const std::vector<size_t> selected = select_cases(rec, o.cases);
  bool checked_vocab = false;
  for (size_t i : selected) {
    const GoldenCase g = rec.load_case(i, false);
    if (!checked_vocab) {
      check_vocabulary(run, g.prompt);
      checked_vocab = true;
      if (!run.vocab_note.empty()) r.limits_note += "; " + run.vocab_note;
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
  r.limits_note += "\n" + logprob_offset_note(r, run.V, run.mask, "server");
  r.exit_code = static_cast<int>(metrics::exit_code(r.verdict, o.fail_on_model_degeneration));
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

}  // namespace degen
