// --api sglang: SGLang's native POST /generate (docs/server.md "SGLang"). The golden ids as input_ids;
// teacher-forced: one request per sequence, several sequences per request (input_ids as a list of
// lists, kSglangBatch at a time), logprob_start_len 0, max_new_tokens 1, temperature 0,
// top_logprobs_num K; meta_info's input rows are shifted by one against the ids (entry j is the
// distribution that predicted input_ids[j]). Output log-probs are taken at the sampling temperature
// unless the server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1; model_steps takes them back. A cold
// request follows POST /flush_cache; meta_info.cached_tokens says what a warm one reused; several
// sequences in one /generate are decoded as one batch.
#include <algorithm>
#include <cmath>
#include <limits>

#include "subjects/server/answer_common.h"
#include "subjects/server/engine_api.h"

namespace degen::server {

namespace {

// SGLang's teacher-forced requests carry this many sequences each (input_ids as a list of lists): a
// few round trips per suite instead of one per case, with each answer (K ids at every position of
// every sequence) kept to a few times one case's.
constexpr size_t kSglangBatch = 4;

// SGLang's meta_info: the log-probs, finish_reason and cached_tokens of a /generate answer.
const json& sglang_meta(const json& r, const std::string& url) {
  const json& m = field(r, "meta_info", url, "SGLang's meta_info (log-probs, finish_reason, cached_tokens)");
  if (!m.is_object()) input_error("malformed response from ", url, ": 'meta_info' is not an object: ", excerpt_of(m));
  return m;
}

// One of SGLang's (logprob, token_id, text|null) triples (a JSON array of three) at `where`.
std::pair<int64_t, double> sglang_triple(const json& e, const std::string& url, const std::string& where) {
  if (!e.is_array() || e.size() != 3)
    input_error("malformed response from ", url, ": ", where, " is ", excerpt_of(e),
                ", expected a (logprob, token_id, text) triple as SGLang writes it");
  if (!e.at(2).is_null() && !e.at(2).is_string())
    input_error("malformed response from ", url, ": ", where, "'s third element (the token's text) is neither null nor a string: ",
                excerpt_of(e.at(2)));
  return {token_id(e.at(1), url), logprob_value(e.at(0), url)};
}

// One position's top-K as SGLang lists it: a list of triples, or null (none stated: an empty list).
server_answer::TopList sglang_top(const json& e, const std::string& url, const std::string& where) {
  if (e.is_null()) return {};
  if (!e.is_array()) input_error("malformed response from ", url, ": ", where, " is not a list of triples: ", excerpt_of(e));
  server_answer::TopList out;
  for (size_t k = 0; k < e.size(); ++k) out.push_back(sglang_triple(e.at(k), url, cat(where, "[", k, "]")));
  if (!out.empty()) check_mass(out, url);
  return out;
}

// A list field of meta_info with exactly `n` entries.
const json& sglang_list(const json& m, const char* key, size_t n, const std::string& url, const char* what) {
  const json& l = field(m, key, url, what);
  if (!l.is_array() || l.size() != n)
    input_error("malformed response from ", url, ": expected ", n, " meta_info.", key, " entries (", what, "), got ",
                l.is_array() ? std::to_string(l.size()) : excerpt_of(l));
  return l;
}

}  // namespace

}  // namespace degen::server

namespace degen::server_answer {

using json = nlohmann::json;
using server::check_mass;
using server::excerpt_of;
using server::optional_count;
using server::field;
using server::reason_field;
using server::sglang_list;
using server::sglang_meta;
using server::sglang_top;
using server::sglang_triple;
using server::token_id;

std::vector<TopList> sglang_sequence(const json& r, const std::vector<int32_t>& seq, const std::string& url) {
  // Entry j of the input rows is the distribution that predicted input_ids[j] (entry 0: none), so the
  // distribution after seq[0..i] is input row i+1 and, after the whole sequence, output_top_logprobs[0]
  // (SGLang: scheduler_components/logprob_result_processor.py, docs/server.md).
  const json& m = sglang_meta(r, url);
  const size_t T = seq.size();
  const json& itl = sglang_list(m, "input_token_logprobs", T, url, "one per input id, logprob_start_len 0");
  const json& itop = sglang_list(m, "input_top_logprobs", T, url, "one per input id, logprob_start_len 0");
  std::vector<TopList> out;
  for (size_t j = 0; j < T; ++j) {
    const auto [id, lp] = sglang_triple(itl.at(j), url, cat("meta_info.input_token_logprobs[", j, "]"));
    if (id != seq[j])
      input_error("malformed response from ", url, ": meta_info.input_token_logprobs[", j, "] is for token ", id,
                  " but the request's input_ids[", j, "] is ", seq[j], ": the rows are not the request's ids");
    if (j == 0) {
      if (!itl.at(0).at(0).is_null())
        input_error("malformed response from ", url, ": meta_info.input_token_logprobs[0] states a log-prob (",
                    excerpt_of(itl.at(0).at(0)), "); SGLang states none for the first id (nothing predicts it): the rows are ",
                    "not laid out as SGLang's (entry j: the distribution that predicted input_ids[j])");
      if (!itop.at(0).is_null() && !(itop.at(0).is_array() && itop.at(0).empty()))
        input_error("malformed response from ", url, ": meta_info.input_top_logprobs[0] is not null; SGLang states none for the ",
                    "first id: the rows are not laid out as SGLang's");
      continue;
    }
    TopList top = sglang_top(itop.at(j), url, cat("meta_info.input_top_logprobs[", j, "]"));
    if (top.empty()) input_error("malformed response from ", url, ": meta_info.input_top_logprobs[", j, "] is empty (top_logprobs_num asked)");
    // The row's own token, where its top-K lists it, at the log-prob the token row states: else the
    // two lists are not for the same position (a shift of one row shows here).
    for (const auto& [tid, tlp] : top)
      if (tid == id && std::isfinite(tlp) && std::isfinite(lp) && std::abs(tlp - lp) > 1e-4 * std::max(1.0, std::abs(lp)))
        input_error("malformed response from ", url, ": meta_info.input_top_logprobs[", j, "] lists token ", id, " at ", tlp,
                    " but input_token_logprobs[", j, "] states ", lp, ": the two lists are not for the same position");
    out.push_back(std::move(top));
  }
  const json& otop = field(m, "output_top_logprobs", url, "the generated token's top-K (top_logprobs_num)");
  if (!otop.is_array() || otop.empty())
    input_error("malformed response from ", url, ": meta_info.output_top_logprobs is not a non-empty list (max_new_tokens 1)");
  TopList last = sglang_top(otop.at(0), url, "meta_info.output_top_logprobs[0]");
  if (last.empty()) input_error("malformed response from ", url, ": meta_info.output_top_logprobs[0] is empty (top_logprobs_num asked)");
  out.push_back(std::move(last));
  return out;
}

Generated sglang_generation(const json& r, const std::string& url, bool with_steps) {
  Generated g;
  const json& m = sglang_meta(r, url);
  const json& otl = field(m, "output_token_logprobs", url, "the generated tokens (return_logprob)");
  if (!otl.is_array()) input_error("malformed response from ", url, ": meta_info.output_token_logprobs is not a list");
  for (size_t i = 0; i < otl.size(); ++i) g.tokens.push_back(sglang_triple(otl.at(i), url, cat("meta_info.output_token_logprobs[", i, "]")).first);
  if (r.contains("output_ids") && !r.at("output_ids").is_null()) {
    const json& ids = r.at("output_ids");
    if (!ids.is_array() || ids.size() != g.tokens.size())
      input_error("malformed response from ", url, ": output_ids holds ", ids.is_array() ? std::to_string(ids.size()) : excerpt_of(ids),
                  " ids and meta_info.output_token_logprobs ", g.tokens.size());
    for (size_t i = 0; i < ids.size(); ++i)
      if (token_id(ids.at(i), url) != g.tokens[i])
        input_error("malformed response from ", url, ": output_ids[", i, "] is ", excerpt_of(ids.at(i)), " but meta_info.output_token_logprobs[",
                    i, "] is for token ", g.tokens[i], ": the log-probs are for other tokens than the ones generated");
  }
  if (m.contains("finish_reason") && !m.at("finish_reason").is_null()) {
    const json& f = m.at("finish_reason");
    if (!f.is_object()) input_error("malformed response from ", url, ": meta_info.finish_reason is not an object: ", excerpt_of(f));
    g.stop_reason = reason_field(f, "type", url);
    if (g.stop_reason == "abort")
      throw UntestableError(cat("the server at ", url, " aborted the request: ", excerpt_of(f.contains("message") ? f.at("message") : f)));
  } else {
    g.stop_reason = "?";
  }
  g.cached_tokens = optional_count(r, {"meta_info", "cached_tokens"}, url, true);
  if (m.contains("spec_verify_ct") && m.at("spec_verify_ct").is_number_integer()) {
    g.spec_stated = cat("the server ran ", m.at("spec_verify_ct").get<int64_t>(), " verify steps");
    if (m.contains("spec_accept_length") && m.at("spec_accept_length").is_number())
      g.spec_stated += cat(" (accept length ", m.at("spec_accept_length").get<double>(), ")");
  }
  if (with_steps) {
    const json& otop = sglang_list(m, "output_top_logprobs", g.tokens.size(), url, "one per generated token, top_logprobs_num asked");
    for (size_t i = 0; i < otop.size(); ++i) g.steps.push_back(sglang_top(otop.at(i), url, cat("meta_info.output_top_logprobs[", i, "]")));
  }
  return g;
}

std::optional<TopList> sglang_model_step(const TopList& listed, double temperature, double presence, double repetition,
                                         const std::vector<int64_t>& before, int64_t vocab) {
  const bool pres = presence != 0 && !before.empty();
  if (repetition != 1 && !before.empty()) return std::nullopt;
  if (temperature == 1 && !pres) return listed;
  if (static_cast<int64_t>(listed.size()) < vocab) return std::nullopt;
  TopList out = listed;
  // log(softmax(z / T)) * T = z - const: the logits up to a constant (-inf stays -inf).
  for (auto& e : out) e.second *= temperature;
  if (pres)
    for (auto& e : out)
      if (std::find(before.begin(), before.end(), e.first) != before.end()) e.second += presence;
  double mx = -std::numeric_limits<double>::infinity();
  for (const auto& e : out) mx = std::max(mx, e.second);
  if (!std::isfinite(mx)) return std::nullopt;
  double sum = 0;
  for (const auto& e : out) sum += std::exp(e.second - mx);
  const double lse = mx + std::log(sum);
  for (auto& e : out) e.second -= lse;
  return out;
}

}  // namespace degen::server_answer

namespace degen::server {

namespace {

// /generate's sampling_params for a case (only fields SGLang knows: 0.5.23 refuses others with HTTP
// 400): greedy as temperature 0 (SGLang then samples with top_k 1 at temperature 1).
json sampling(const SamplingParams& sp, bool greedy, int64_t max_new_tokens, bool ignore_eos) {
  json p = {{"max_new_tokens", max_new_tokens}, {"temperature", greedy ? 0.0 : sp.temperature}, {"ignore_eos", ignore_eos}};
  if (!greedy) {
    p["top_p"] = sp.top_p;
    p["top_k"] = sp.top_k > 0 ? sp.top_k : -1;  // SGLang: -1 is the whole vocabulary
    p["min_p"] = sp.min_p;
    p["repetition_penalty"] = sp.repetition_penalty;
    p["presence_penalty"] = sp.presence_penalty;
    p["sampling_seed"] = sp.seed;
  }
  return p;
}

// The sampling of a one-token request (a teacher-forced sequence, a prefill, the prefix-cache primer):
// greedy, stops ignored.
json one_token() { return {{"max_new_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}}; }

// A /generate request: the ids as given (one list, or a list of lists for a batch), its log-probs
// (the generated tokens' always: they carry the ids; top_logprobs_num K where asked).
json request(const json& input_ids, const json& sampling_params, int top, int64_t logprob_start_len = -1) {
  json r = {{"input_ids", input_ids},
            {"sampling_params", sampling_params},
            {"return_logprob", true},
            {"logprob_start_len", logprob_start_len},
            {"return_text_in_logprobs", false}};
  if (top > 0) r["top_logprobs_num"] = top;
  return r;
}

class SglangApi final : public EngineApi {
 public:
  const ApiCapabilities& caps() const override {
    static const ApiCapabilities c = [] {
      ApiCapabilities x{"sglang", "SGLang's /generate",
                        "SGLang's native /generate; its /v1/completions\nkeys log-probs by token text, which cannot be scored by id",
                        "/generate", "there is one request per sequence already"};
      x.states_scaled_logprobs = true;
      x.detokenize_optional = true;
      x.cache_control = true;
      x.cached_field = "meta_info.cached_tokens";
      x.no_reuse_hint = "; --disable-radix-cache?";
      x.forced_batch = kSglangBatch;
      return x;
    }();
    return c;
  }

  std::vector<std::vector<TopList>> forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const override;
  int64_t forced_listings(const ApiContext&, int64_t T) const override { return T; }

  TopList position(const ApiContext& c, const std::vector<int32_t>& prefix) const override {
    const std::string u = url(c);
    const Generated a = server_answer::sglang_generation(
        net::post_json(u, request(prefix, one_token(), c.topk), c.generation_cap(static_cast<int64_t>(prefix.size()), 1, c.topk)), u, true);
    if (a.steps.empty() || a.steps[0].empty())
      input_error("malformed response from ", u, ": no top-K for the generated token (top_logprobs_num ", c.topk, ")");
    return a.steps[0];
  }

  json detokenize_request(const ApiContext& c, const std::vector<int32_t>& ids) const override {
    json body = EngineApi::detokenize_request(c, ids);
    body["skip_special_tokens"] = false;  // SGLang skips them by default; our text has them
    return body;
  }
  // The teacher-forced requests put their sequences in SGLang's radix cache, which would serve the
  // prompt: POST /flush_cache empties it.
  std::string make_cold(const ApiContext& c) const override {
    try {
      (void)net::request("POST", c.base + "/flush_cache", "", c.http);
    } catch (const net::HttpStatusError& e) {
      return cat("POST ", c.base, "/flush_cache: HTTP ", e.status());
    }
    return "";
  }
  json generation_request(const ApiContext&, const GenerationAsk& a) const override {
    return request(a.prompt, sampling(a.sp, a.greedy, a.max_new_tokens, a.ignore_eos), a.logprobs);
  }
  Generated read_generation(const ApiContext& c, const json& answer, const std::string& u) const override {
    return server_answer::sglang_generation(answer, u, c.decode_path);
  }
  void model_steps(const ApiContext& c, const SamplingParams& sp, bool greedy, Generated& got, std::string& note) const override;

  void prime(const ApiContext& c, const std::vector<int32_t>& prompt) const override {
    const json primer = {{"input_ids", prompt}, {"sampling_params", one_token()}};
    (void)net::post_json(url(c), primer, c.generation_cap(static_cast<int64_t>(prompt.size()), 1, 0));
  }

  // One /generate whose input_ids hold the case and the distractors: SGLang's scheduler runs them as one batch.
  BatchShape batch_shape(const ApiContext&) const override {
    BatchShape s;
    s.others = kBatchDistractors;
    s.one_request = true;
    return s;
  }
  Generated together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                     int64_t budget) const override;
};

// Several sequences per request (input_ids as a list of lists; the answer a list in the same order):
// as many as one answer may hold (kMaxAnswerBytes), at least one.
std::vector<std::vector<TopList>> SglangApi::forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const {
  const std::string u = url(c);
  std::vector<std::vector<TopList>> out;
  for (size_t k = 0; k < seqs.size();) {
    size_t n = 1;
    int64_t positions = static_cast<int64_t>(seqs[k].size());
    while (k + n < seqs.size()) {
      const int64_t more = positions + static_cast<int64_t>(seqs[k + n].size());
      if (c.answer_bytes(more + static_cast<int64_t>(n + 1), more, c.topk) > kMaxAnswerBytes) break;
      positions = more;
      ++n;
    }
    json ids = json::array();
    for (size_t j = k; j < k + n; ++j) ids.push_back(seqs[j]);
    const json req = request(ids, one_token(), c.topk, 0);
    const json r = net::post_json(u, req, c.cap(positions + static_cast<int64_t>(n), positions, c.topk));
    if (!r.is_array() || r.size() != n)
      input_error("malformed response from ", u, ": a request of ", n, " sequences (input_ids as a list of lists) answered with ",
                  r.is_array() ? cat(r.size(), " answers") : excerpt_of(r), ", expected a list of one answer per sequence");
    for (size_t j = 0; j < n; ++j) out.push_back(server_answer::sglang_sequence(r.at(j), seqs[k + j], u));
    k += n;
  }
  return out;
}

// The output log-probs at each generated step taken back to the model's distribution
// (server_answer::sglang_model_step): at the sampling temperature unless the server returns the
// back exactly is emptied (not scored), and `note` says why.
void SglangApi::model_steps(const ApiContext& run, const SamplingParams& sp, bool greedy, Generated& got, std::string& note) const {
  const double t = greedy || run.original_logprobs ? 1.0 : sp.temperature;
  const double presence = greedy ? 0.0 : sp.presence_penalty, repetition = greedy ? 1.0 : sp.repetition_penalty;
  int64_t dropped = 0;
  std::vector<int64_t> before;
  for (size_t i = 0; i < got.steps.size(); ++i) {
    if (!got.steps[i].empty()) {
      std::optional<TopList> m = server_answer::sglang_model_step(got.steps[i], t, presence, repetition, before, run.V);
      if (m) {
        got.steps[i] = std::move(*m);
      } else {
        got.steps[i].clear();
        ++dropped;
      }
    }
    if (i < got.tokens.size()) before.push_back(got.tokens[i]);
  }
  if (dropped > 0)
    note = cat("SGLang's log-probs at ", dropped, " generated steps are after its ",
               repetition != 1 ? "repetition penalty (which scales each logit by its sign: log-probs do not keep it)"
                               : cat(t != 1 ? cat("temperature ", t) : std::string(), t != 1 && presence != 0 ? " and " : "",
                                     presence != 0 ? "presence penalty" : "", " and list ", run.topk, " of ", run.V,
                                     " ids, so their normalisation is unknown (--topk ", run.V,
                                     ", or a server with SGLANG_RETURN_ORIGINAL_LOGPROB=1 and --sglang-logprobs original)"),
               ": those steps are not scored");
}

Generated SglangApi::together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                              int64_t budget) const {
  const std::string u = url(c);
  const int ids_asked = c.decode_path ? c.topk : 0;
  json ids = json::array({case_req.at("input_ids")}), sampling_list = json::array({case_req.at("sampling_params")});
  json logprob = json::array({true}), top = json::array({ids_asked});
  for (const json& o : others) {
    ids.push_back(o.at("input_ids"));
    sampling_list.push_back(o.at("sampling_params"));
    logprob.push_back(false);
    top.push_back(0);
  }
  json req = case_req;
  req["input_ids"] = ids;
  req["sampling_params"] = sampling_list;
  req["return_logprob"] = logprob;
  req["top_logprobs_num"] = top;
  const size_t n = others.size() + 1;
  const json r = net::post_json(u, req, c.cap((prompt + budget) * static_cast<int64_t>(n), budget, ids_asked));
  if (!r.is_array() || r.size() != n)
    input_error("malformed response from ", u, ": a request of ", n, " sequences answered with ",
                r.is_array() ? cat(r.size(), " answers") : excerpt_of(r), ", expected one per sequence");
  return server_answer::sglang_generation(r.at(0), u, c.decode_path);
}

}  // namespace

const EngineApi& sglang_api() {
  static const SglangApi api;
  return api;
}

}  // namespace degen::server
