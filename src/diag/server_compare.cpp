// compare --server (server_compare.h): the llama-server native API. Per case: one /completion per
// position for the teacher-forced top-K, then one /completion for the free-running generation.
#include "diag/server_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <exception>
#include <limits>
#include <thread>

#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "engine/sampler.h"
#include "judge/compare.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
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
  std::vector<uint64_t> listed_bytes;  // answer_bounds
  uint64_t piece_max = 0;
};

std::string excerpt_of(const json& j) { return json_excerpt(j, 200); }

// A field of a server answer, or InputError naming the URL and what was expected.
const json& field(const json& j, const char* key, const std::string& url, const char* what) {
  if (!j.is_object() || !j.contains(key))
    input_error("malformed response from ", url, ": expected ", what, " under '", key, "', got ", excerpt_of(j));
  return j.at(key);
}

// A token id as the server wrote it: a non-negative integer (one beyond int64 reads as INT64_MAX:
// beyond any vocabulary all the same).
int64_t token_id(const json& v, const std::string& url) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                                          : v.get<int64_t>();
  if (!v.is_number_integer()) input_error("malformed response from ", url, ": a token id that is not an integer: ", excerpt_of(v));
  input_error("malformed response from ", url, ": a negative token id: ", v.get<int64_t>());
}

// A log-probability: a number <= kMaxServerLogprob, or null (-inf).
double logprob_value(const json& l, const std::string& url) {
  using server_answer::kMaxServerLogprob;
  if (l.is_null()) return -std::numeric_limits<double>::infinity();  // llama-server writes -inf as null
  if (!l.is_number()) input_error("malformed response from ", url, ": a log-probability that is not a number: ", excerpt_of(l));
  const double v = l.get<double>();
  if (std::isnan(v) || v > kMaxServerLogprob)
    input_error("malformed response from ", url, ": a log-probability of ", v, ", expected a number <= 0 (", kMaxServerLogprob,
                " allowed for rounding) or null");
  return v;
}

// The listed probabilities (each id once) sum to at most 1 + kMaxServerMassExcess.
void check_mass(const server_answer::TopList& top, const std::string& url) {
  server_answer::TopList by_id = top;
  std::stable_sort(by_id.begin(), by_id.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  double mass = 0;
  size_t distinct = 0;
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (i > 0 && by_id[i].first == by_id[i - 1].first) continue;  // listed twice: the first counts, as in topk_as_logits
    ++distinct;
    mass += std::exp(by_id[i].second);
  }
  if (mass > 1 + server_answer::kMaxServerMassExcess)
    input_error("malformed response from ", url, ": the ", distinct, " listed probabilities sum to ", mass,
                ", expected at most 1: not a probability distribution");
}

// A short string field (stop_type, finish_reason): "?" when absent or null, InputError for another type.
std::string reason_field(const json& j, const char* key, const std::string& url) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return "?";
  const json& v = j.at(key);
  if (!v.is_string()) input_error("malformed response from ", url, ": '", key, "' is not a string: ", excerpt_of(v));
  std::string r = v.get<std::string>();
  if (r.size() > 40) {  // cut on a character boundary: the reason goes into --json, whose dump needs UTF-8
    size_t n = 40;
    while (n > 0 && (static_cast<unsigned char>(r[n]) & 0xC0) == 0x80) --n;
    r.resize(n);
  }
  return r;
}

// [{"id": N, "logprob": x}, ...] (llama-server, both APIs).
server_answer::TopList top_from_id_list(const json& top, const std::string& url) {
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": expected a non-empty list of top log-probs");
  server_answer::TopList out;
  for (const json& e : top)
    out.emplace_back(token_id(field(e, "id", url, "a token id"), url), logprob_value(field(e, "logprob", url, "a log-probability"), url));
  check_mass(out, url);
  return out;
}

// "token_id:N" (vLLM's return_tokens_as_token_ids) as N; InputError for a token given as text.
int64_t id_from_token_key(const std::string& key, const std::string& url) {
  const std::string pre = "token_id:";
  if (key.rfind(pre, 0) != 0)
    input_error("malformed response from ", url, ": a token given as text ('", key.substr(0, 40), "'), expected its id as 'token_id:N' ",
                "(vLLM: return_tokens_as_token_ids) or llama-server's 'content' list with ids; text cannot be mapped back to ids ",
                "without re-tokenising");
  const std::string digits = key.substr(pre.size());
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    input_error("malformed response from ", url, ": '", key.substr(0, 40), "' is not 'token_id:N' with N a token id");
  return std::stoll(digits);
}

// {"token_id:N": x, ...} (the completions API's classic top_logprobs entry) or {"N": {"logprob": x}}
// (vLLM's prompt_logprobs entry).
server_answer::TopList top_from_map(const json& m, const std::string& url) {
  if (!m.is_object() || m.empty()) input_error("malformed response from ", url, ": expected a non-empty object of top log-probs");
  server_answer::TopList out;
  for (auto& [k, v] : m.items()) {
    if (v.is_object()) {
      if (k.empty() || k.size() > 18 || k.find_first_not_of("0123456789") != std::string::npos)
        input_error("malformed response from ", url, ": prompt_logprobs key '", k.substr(0, 40), "' is not a token id");
      out.emplace_back(std::stoll(k), logprob_value(field(v, "logprob", url, "a log-probability"), url));
    } else {
      out.emplace_back(id_from_token_key(k, url), logprob_value(v, url));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  check_mass(out, url);
  return out;
}

// choices[0] of a completions answer.
const json& first_choice(const json& r, const std::string& url) {
  const json& ch = field(r, "choices", url, "the completion choices");
  if (!ch.is_array() || ch.empty()) input_error("malformed response from ", url, ": 'choices' is not a non-empty list");
  return ch.at(0);
}

// The top-K of the first generated token in a completions choice.
server_answer::TopList openai_generated_top(const json& choice, const std::string& url) {
  const json& lp = field(choice, "logprobs", url, "log-probs (the request's 'logprobs')");
  if (lp.is_object() && lp.contains("content")) {
    const json& c = lp.at("content");
    if (!c.is_array() || c.empty()) input_error("malformed response from ", url, ": empty logprobs.content");
    return top_from_id_list(field(c.at(0), "top_logprobs", url, "the top-K log-probabilities"), url);
  }
  const json& top = field(lp, "top_logprobs", url, "the top-K log-probabilities");
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": empty logprobs.top_logprobs");
  return top_from_map(top.at(0), url);
}

// The server's speculative-decoding counts (llama-server: timings.draft_n, timings.draft_n_accepted),
// where stated: non-negative integers, accepted <= drafted, or InputError.
void speculation_counts(const json& r, const std::string& url, server_answer::Generated& g) {
  if (!r.is_object() || !r.contains("timings") || !r.at("timings").is_object()) return;
  const json& t = r.at("timings");
  auto count = [&](const char* key) -> std::optional<int64_t> {
    if (!t.contains(key) || t.at(key).is_null()) return std::nullopt;
    const json& v = t.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      input_error("malformed response from ", url, ": timings.", key, " is not a count: ", excerpt_of(v));
    return v.get<int64_t>();
  };
  g.draft_n = count("draft_n");
  g.draft_accepted = count("draft_n_accepted");
  if (g.draft_n && g.draft_accepted && *g.draft_accepted > *g.draft_n)
    input_error("malformed response from ", url, ": timings.draft_n_accepted ", *g.draft_accepted, " > timings.draft_n ", *g.draft_n);
}

// One distribution per generated token from `entries` (the list under `name`): as many entries as
// tokens, each naming the token it was generated for ('id'), its top-K from `top_of` (an empty list:
// none stated at that step). A list that covers the whole vocabulary must hold its mass (the
// probabilities sum to 1 within kMaxServerMassExcess), or InputError.
template <class TopOf>
std::vector<server_answer::TopList> step_lists(const json& entries, const std::vector<int64_t>& tokens, const std::string& url,
                                               const char* name, TopOf top_of) {
  if (entries.size() != tokens.size())
    input_error("malformed response from ", url, ": '", name, "' has ", entries.size(), " entries for ", tokens.size(),
                " generated tokens (expected one per token)");
  std::vector<server_answer::TopList> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries.at(i);
    const int64_t id = token_id(field(e, "id", url, "the token the entry is for"), url);
    if (id != tokens[i])
      input_error("malformed response from ", url, ": ", name, "[", i, "] is for token ", id, " but the server generated ", tokens[i],
                  " at that step: the log-probs are for another token than the one generated");
    const json& top = top_of(e);
    if (!top.is_array()) input_error("malformed response from ", url, ": ", name, "[", i, "].top_logprobs is not a list");
    out.push_back(top.empty() ? server_answer::TopList{} : top_from_id_list(top, url));
  }
  return out;
}

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

namespace server_answer {

TopList llama_position(const json& r, const std::string& url) {
  const json& probs = field(r, "completion_probabilities", url, "per-token probabilities (n_probs)");
  if (!probs.is_array() || probs.empty()) input_error("malformed response from ", url, ": no completion_probabilities");
  const json& top = field(probs.at(0), "top_logprobs", url, "the top-K log-probabilities");
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": empty top_logprobs");
  return top_from_id_list(top, url);
}

Generated llama_generation(const json& r, const std::string& url, int n_probs) {
  Generated g;
  const json& toks = field(r, "tokens", url, "the generated token ids (return_tokens)");
  if (!toks.is_array()) input_error("malformed response from ", url, ": 'tokens' is not an array");
  for (const json& t : toks) g.tokens.push_back(token_id(t, url));
  g.stop_reason = reason_field(r, "stop_type", url);
  speculation_counts(r, url, g);
  if (n_probs > 0) {
    const json& probs = field(r, "completion_probabilities", url, cat("the per-token log-probs of the generated tokens (n_probs ", n_probs, ")").c_str());
    if (!probs.is_array()) input_error("malformed response from ", url, ": 'completion_probabilities' is not a list");
    g.steps = step_lists(probs, g.tokens, url, "completion_probabilities", [&](const json& e) -> const json& {
      return field(e, "top_logprobs", url, "the step's top-K log-probabilities (completion_probabilities[i].top_logprobs)");
    });
  }
  return g;
}

TopList openai_position(const json& r, const std::string& url) { return openai_generated_top(first_choice(r, url), url); }

std::vector<TopList> openai_prompt_logprobs(const json& r, int64_t T, const std::string& url) {
  // prompt_logprobs[j] is the distribution that predicted seq[j] (j >= 1; [0] is null); the last
  // position's is the generated token's top-K.
  const json& choice = first_choice(r, url);
  const json& pl = field(choice, "prompt_logprobs", url, "prompt log-probs (prompt_logprobs)");
  if (!pl.is_array() || static_cast<int64_t>(pl.size()) != T)
    input_error("malformed response from ", url, ": expected ", T, " prompt_logprobs entries (one per prompt token), got ",
                pl.is_array() ? std::to_string(pl.size()) : excerpt_of(pl));
  std::vector<TopList> out;
  for (int64_t j = 1; j < T; ++j) out.push_back(top_from_map(pl.at(static_cast<size_t>(j)), url));
  out.push_back(openai_generated_top(choice, url));
  return out;
}

Generated openai_generation(const json& r, const std::string& url, bool with_steps) {
  // The completions API returns text; the ids come from the per-token log-probs (logprobs: K).
  Generated g;
  const json& choice = first_choice(r, url);
  const json& lp = field(choice, "logprobs", url, "the generated tokens' log-probs (logprobs)");
  if (lp.is_object() && lp.contains("content")) {
    const json& c = lp.at("content");
    if (!c.is_array()) input_error("malformed response from ", url, ": logprobs.content is not a list");
    for (const json& e : c) g.tokens.push_back(token_id(field(e, "id", url, "a token id"), url));
    if (with_steps)
      g.steps = step_lists(c, g.tokens, url, "logprobs.content", [&](const json& e) -> const json& {
        return field(e, "top_logprobs", url, "the step's top-K log-probabilities (logprobs.content[i].top_logprobs)");
      });
  } else {
    const json& toks = field(lp, "tokens", url, "the generated tokens (logprobs.tokens)");
    if (!toks.is_array()) input_error("malformed response from ", url, ": logprobs.tokens is not a list");
    for (const json& t : toks) {
      if (!t.is_string()) input_error("malformed response from ", url, ": a token that is not a string: ", excerpt_of(t));
      g.tokens.push_back(id_from_token_key(t.get<std::string>(), url));
    }
    if (with_steps) {
      const json& top = field(lp, "top_logprobs", url, "the generated tokens' top-K log-probs (logprobs.top_logprobs)");
      if (!top.is_array() || top.size() != g.tokens.size())
        input_error("malformed response from ", url, ": expected ", g.tokens.size(), " logprobs.top_logprobs entries (one per generated ",
                    "token), got ", top.is_array() ? std::to_string(top.size()) : excerpt_of(top));
      for (size_t i = 0; i < top.size(); ++i) {
        const json& m = top.at(i);
        g.steps.push_back(m.is_null() || (m.is_object() && m.empty()) ? TopList{} : top_from_map(m, url));
      }
    }
  }
  g.stop_reason = reason_field(choice, "finish_reason", url);
  speculation_counts(r, url, g);
  return g;
}

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
  if (m.contains("cached_tokens") && !m.at("cached_tokens").is_null()) {
    const json& c = m.at("cached_tokens");
    if (!c.is_number_integer() || c.get<int64_t>() < 0)
      input_error("malformed response from ", url, ": meta_info.cached_tokens is not a count: ", excerpt_of(c));
    g.cached_tokens = c.get<int64_t>();
  }
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

std::vector<std::string> served_models(const json& r, const std::string& url) {
  const json& d = field(r, "data", url, "the served models (an OpenAI model list)");
  if (!d.is_array()) input_error("malformed response from ", url, ": 'data' is not a list: ", excerpt_of(d));
  std::vector<std::string> out;
  for (const json& e : d) {
    const json& id = field(e, "id", url, "a served model's name");
    if (!id.is_string()) input_error("malformed response from ", url, ": a model id that is not a string: ", excerpt_of(id));
    out.push_back(id.get<std::string>());
  }
  return out;
}

std::string detokenized(const json& r, const std::string& url) {
  const char* key = !r.is_object() || r.contains("content") ? "content" : r.contains("prompt") ? "prompt" : r.contains("text") ? "text" : "content";
  const json& c = field(r, key, url, "the text of the ids");
  if (!c.is_string()) input_error("malformed response from ", url, ": '", key, "' is not a string: ", excerpt_of(c));
  return c.get<std::string>();
}

}  // namespace server_answer

namespace {

using server_answer::TopList;

// The most bytes a correct answer can take, so that a longer one is refused as it arrives (net/http.h)
// and parsing it stays bounded (nlohmann's document takes about 4x the text for SGLang's (logprob, id,
// null) triples, up to ~20x where the server adds text; measured in docs/server.md). A listed id costs at
// most kListedIdBytes + 10 bytes per byte of its piece: llama-server's {"id":N,"token":"<piece>","bytes":[...],
// "logprob":x} is 60 bytes of keys and numbers plus the piece JSON-escaped (at most 6 bytes per byte,
// \u00XX) and its byte list (at most 4 per byte, "255,"); SGLang's triple and vLLM's "token_id:N" or
// {"N": {"logprob": x, "rank": r, "decoded_token": "<piece>"}} are smaller. A token of the prompt or of
// the generation costs at most kTokenBytes + 3 x 6 bytes per byte of the longest piece (its text in
// content / prompt / tokens, its id and its log-prob). Then kAnswerFixedBytes for the rest (timings,
// settings, usage).
constexpr uint64_t kListedIdBytes = 72;
constexpr uint64_t kTokenBytes = 192;
constexpr uint64_t kAnswerFixedBytes = uint64_t{1} << 20;
// One answer may take at most this much: 64 MiB of text, at most ~1.3 GB parsed at the 20x above.
// Every id of a 248,320-id vocabulary at one position is about 40 MB (the real Qwen3.5 tokenizer's
// pieces average 6.7 bytes); a request that would need more is refused before it is sent (InputError,
// naming --topk), and SGLang's teacher-forced sequences go in requests that each stay within it.
constexpr uint64_t kMaxAnswerBytes = uint64_t{64} << 20;
// Without a tokenizer the pieces' lengths are unknown: taken as this many bytes each.
constexpr uint64_t kUnknownPieceBytes = 256;

// The answer bound of a request whose answer holds `tokens` tokens (prompt and generated) and
// `listings` lists of `ids` ids each; InputError when it is over kMaxAnswerBytes.
uint64_t answer_bytes(const ServerRun& run, int64_t tokens, int64_t listings, int ids) {
  const uint64_t k = static_cast<uint64_t>(std::clamp<int64_t>(ids, 0, static_cast<int64_t>(run.listed_bytes.size()) - 1));
  return kAnswerFixedBytes + static_cast<uint64_t>(std::max<int64_t>(tokens, 0)) * (kTokenBytes + 18 * run.piece_max) +
         static_cast<uint64_t>(std::max<int64_t>(listings, 0)) * run.listed_bytes[k];
}

net::HttpOptions answer_cap(const ServerRun& run, int64_t tokens, int64_t listings, int ids) {
  const uint64_t bytes = answer_bytes(run, tokens, listings, ids);
  if (bytes > kMaxAnswerBytes)
    input_error("compare --server: a correct answer to a request for ", ids, " log-probs at each of ", listings, " positions (",
                tokens, " tokens) can take up to ", bytes >> 20, " MiB, more than the ", kMaxAnswerBytes >> 20,
                " MiB one answer may hold; ask for fewer ids (--topk)");
  net::HttpOptions h = run.o.http;
  h.max_body_bytes = static_cast<size_t>(bytes);
  return h;
}

// The bound of a generation request: the prompt, `budget` generated tokens, each with a list of `ids`
// log-probs (0: none asked).
net::HttpOptions generation_cap(const ServerRun& run, int64_t prompt, int64_t budget, int ids) {
  return answer_cap(run, prompt + budget, ids > 0 ? budget : 0, ids);
}

// listed_bytes[k]: the most k listed ids can take (the k longest pieces); piece_max: the longest piece.
void answer_bounds(ServerRun& run) {
  std::vector<uint64_t> piece(static_cast<size_t>(run.V), kUnknownPieceBytes);
  if (run.tok)
    for (int64_t id = 0; id < run.V; ++id)
      piece[static_cast<size_t>(id)] = id < run.tok->vocab_end() && run.tok->is_defined(static_cast<int32_t>(id))
                                           ? run.tok->token_bytes(static_cast<int32_t>(id)).size()
                                           : 16;  // a padding row: the server names it with a short filler
  std::sort(piece.begin(), piece.end(), std::greater<>());
  run.piece_max = piece.empty() ? 0 : piece.front();
  run.listed_bytes.assign(piece.size() + 1, 0);
  for (size_t k = 0; k < piece.size(); ++k) run.listed_bytes[k + 1] = run.listed_bytes[k] + kListedIdBytes + 10 * piece[k];
}

// Before any request: every request the run will make must fit one answer (answer_cap), so that a
// --topk too large for a case's generation is refused now, not after its teacher-forced part.
void check_answer_bounds(const ServerRun& run, const std::vector<size_t>& selected) {
  for (size_t i : selected) {
    const GoldenCase g = run.rec.load_case(i, false);
    const int64_t P = static_cast<int64_t>(g.prompt.size()), T = P + static_cast<int64_t>(g.continuation.size());
    (void)answer_cap(run, T + 1, run.o.api == "openai" && run.o.prompt_logprobs ? T : run.o.api == "sglang" ? T : 1, run.topk);
    if (run.o.free_running && g.max_new_tokens > 0) (void)generation_cap(run, P, g.max_new_tokens, run.o.decode_path ? run.topk : 0);
  }
}

// The record's first prompt detokenized by the server must be our tokenizer's text.
void check_vocabulary(const ServerRun& run, const std::vector<int32_t>& ids) {
  if (!run.tok || ids.empty()) return;
  const std::string url = run.base + "/detokenize";
  json body = {{"tokens", ids}};
  if (!run.o.served_model.empty()) body["model"] = run.o.served_model;
  if (run.o.api == "sglang") body["skip_special_tokens"] = false;  // SGLang skips them by default; our text has them
  json r;
  try {
    r = net::post_json(url, body, run.o.http);
  } catch (const net::HttpStatusError& e) {
    // The OpenAI-compatible API has no detokenizer of its own; llama-server and vLLM add one.
    if (run.o.api != "llama" && (e.status() == 404 || e.status() == 405)) {
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

// A /v1/completions request: a token-id prompt, the ids asked back ("token_id:N" where the server
// writes tokens as text), the served model's name when given.
json openai_request(const ServerRun& run, const std::vector<int32_t>& prompt, int64_t max_tokens, const json& temperature,
                    int logprobs) {
  json req = {{"prompt", prompt},     {"max_tokens", max_tokens}, {"temperature", temperature},
              {"logprobs", logprobs}, {"return_tokens_as_token_ids", true}};
  if (!run.o.served_model.empty()) req["model"] = run.o.served_model;
  return req;
}

// SGLang /generate's sampling_params for a case (only fields SGLang knows: 0.5.23 refuses others with
// HTTP 400): greedy as temperature 0 (SGLang then samples with top_k 1 at temperature 1).
json sglang_sampling(const SamplingParams& sp, bool greedy, int64_t max_new_tokens, bool ignore_eos) {
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
json sglang_one_token() { return {{"max_new_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}}; }

// A /generate request: the ids as given (one list, or a list of lists for a batch), its log-probs
// (the generated tokens' always: they carry the ids; top_logprobs_num K where asked).
json sglang_request(const json& input_ids, const json& sampling, int top, int64_t logprob_start_len = -1) {
  json r = {{"input_ids", input_ids},
            {"sampling_params", sampling},
            {"return_logprob", true},
            {"logprob_start_len", logprob_start_len},
            {"return_text_in_logprobs", false}};
  if (top > 0) r["top_logprobs_num"] = top;
  return r;
}

// SGLang: the teacher-forced top-K at every position of each of `seqs`, several sequences per request
// (input_ids as a list of lists; the answer a list in the same order): as many as one answer may hold
// (kMaxAnswerBytes), at least one.
std::vector<std::vector<TopList>> sglang_topk(const ServerRun& run, const std::vector<std::vector<int32_t>>& seqs) {
  const std::string url = run.base + "/generate";
  std::vector<std::vector<TopList>> out;
  for (size_t k = 0; k < seqs.size();) {
    size_t n = 1;
    int64_t positions = static_cast<int64_t>(seqs[k].size());
    while (k + n < seqs.size()) {
      const int64_t more = positions + static_cast<int64_t>(seqs[k + n].size());
      if (answer_bytes(run, more + static_cast<int64_t>(n + 1), more, run.topk) > kMaxAnswerBytes) break;
      positions = more;
      ++n;
    }
    json ids = json::array();
    for (size_t j = k; j < k + n; ++j) ids.push_back(seqs[j]);
    const json req = sglang_request(ids, sglang_one_token(), run.topk, 0);
    const json r = net::post_json(url, req, answer_cap(run, positions + static_cast<int64_t>(n), positions, run.topk));
    if (!r.is_array() || r.size() != n)
      input_error("malformed response from ", url, ": a request of ", n, " sequences (input_ids as a list of lists) answered with ",
                  r.is_array() ? cat(r.size(), " answers") : excerpt_of(r), ", expected a list of one answer per sequence");
    for (size_t j = 0; j < n; ++j) out.push_back(server_answer::sglang_sequence(r.at(j), seqs[k + j], url));
    k += n;
  }
  return out;
}

// The top-K at every position of `seq` (the distribution after seq[0..i]).
std::vector<TopList> server_topk(const ServerRun& run, const std::vector<int32_t>& seq) {
  if (run.o.api == "sglang") return sglang_topk(run, {seq}).at(0);
  const int64_t T = static_cast<int64_t>(seq.size());
  std::vector<TopList> out;
  if (run.o.api == "openai" && run.o.prompt_logprobs) {
    const std::string url = run.base + "/v1/completions";
    json req = openai_request(run, seq, 1, 0, run.topk);
    req["prompt_logprobs"] = run.topk;
    return server_answer::openai_prompt_logprobs(net::post_json(url, req, answer_cap(run, T + 1, T, run.topk)), T, url);
  }
  for (int64_t i = 0; i < T; ++i) {
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + i + 1);
    if (run.o.api == "openai") {
      const std::string url = run.base + "/v1/completions";
      const json req = openai_request(run, prefix, 1, 0, run.topk);
      out.push_back(server_answer::openai_position(net::post_json(url, req, answer_cap(run, i + 2, 1, run.topk)), url));
      continue;
    }
    const std::string url = run.base + "/completion";
    const json req = {{"prompt", prefix},      {"n_predict", 1},        {"n_probs", run.topk},
                      {"temperature", 0},      {"cache_prompt", true},  {"post_sampling_probs", false},
                      {"return_tokens", true}, {"ignore_eos", true}};
    out.push_back(server_answer::llama_position(net::post_json(url, req, answer_cap(run, i + 2, 1, run.topk)), url));
  }
  return out;
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
  const std::vector<TopList> tops = fetched ? *fetched : server_topk(run, seq);
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

// One request for the engine's own prefill distribution after `prefix` (its teacher-forced path).
TopList server_position(const ServerRun& run, const std::vector<int32_t>& prefix) {
  if (run.o.api == "sglang") {
    const std::string url = run.base + "/generate";
    const json req = sglang_request(prefix, sglang_one_token(), run.topk);
    const server_answer::Generated a =
        server_answer::sglang_generation(net::post_json(url, req, generation_cap(run, static_cast<int64_t>(prefix.size()), 1, run.topk)), url, true);
    if (a.steps.empty() || a.steps[0].empty())
      input_error("malformed response from ", url, ": no top-K for the generated token (top_logprobs_num ", run.topk, ")");
    return a.steps[0];
  }
  if (run.o.api == "openai") {
    const std::string url = run.base + "/v1/completions";
    return server_answer::openai_position(
        net::post_json(url, openai_request(run, prefix, 1, 0, run.topk), generation_cap(run, static_cast<int64_t>(prefix.size()), 1, run.topk)), url);
  }
  const std::string url = run.base + "/completion";
  const json req = {{"prompt", prefix},      {"n_predict", 1},        {"n_probs", run.topk},
                    {"temperature", 0},      {"cache_prompt", false}, {"post_sampling_probs", false},
                    {"return_tokens", true}, {"ignore_eos", true}};
  return server_answer::llama_position(net::post_json(url, req, generation_cap(run, static_cast<int64_t>(prefix.size()), 1, run.topk)), url);
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
    const TopList pre = server_position(run, prefix);
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

// The per-step log-probs a llama free-running request asks for (n_probs; 0: none), which its answer
// must then carry: the case's own request and the probes' repeats of it.
int asked_n_probs(const ServerRun& run) { return run.o.decode_path ? run.topk : 0; }

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

// The prefix-cache probe: the case's prompt sent once with cache_prompt (n_predict 1, a request that
// shares its prefix), then the case itself again with cache_prompt, warm; judged against the cold run
// (cache_prompt false) that free_running made. Not applicable where the server says it reused no
// tokens (timings.cache_n absent or 0) or the API has no cache control (openai).
ProbeResult prefix_cache_probe(const ServerRun& run, const GoldenCase& g, bool greedy, const server_answer::Generated& cold,
                               const json& cold_req, double limit) {
  ProbeResult p;
  p.name = "prefix-cache";
  if (run.o.api != "llama" || cold_req.is_null()) {
    return not_applicable(p, "the OpenAI-compatible API has no per-request prompt cache control");
  }
  const std::string url = run.base + "/completion";
  const json primer = {{"prompt", g.prompt}, {"n_predict", 1},        {"cache_prompt", true},
                       {"temperature", 0},   {"return_tokens", true}, {"ignore_eos", true}};
  (void)net::post_json(url, primer, generation_cap(run, static_cast<int64_t>(g.prompt.size()), 1, 0));
  json req = cold_req;
  req["cache_prompt"] = true;
  const json answer = net::post_json(url, req, generation_cap(run, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens, asked_n_probs(run)));
  const server_answer::Generated warm =
      server_answer::llama_generation(answer, url, asked_n_probs(run));
  if (answer.is_object() && answer.contains("timings") && answer["timings"].is_object() && answer["timings"].contains("cache_n")) {
    const json& c = answer["timings"]["cache_n"];
    if (!c.is_number_integer() || c.get<int64_t>() < 0)
      input_error("malformed response from ", url, ": timings.cache_n is not a count: ", excerpt_of(c));
    p.cached = c.get<int64_t>();
  }
  if (!p.cached || *p.cached == 0) {
    return not_applicable(p, p.cached ? "the server reused no cached tokens (timings.cache_n 0)"
                                      : "the server does not say what it reused (no timings.cache_n)");
  }
  judge_against_cold(p, run, greedy, cold, warm, cat("warm (", *p.cached, " cached tokens)"), "cold",
                     cat(*p.cached, " cached tokens; warm equals cold"), limit);
  return p;
}

// The batching probe: the case sent again at the same time as distractor requests, one per other slot
// of the server (at most kBatchDistractors), so that a server with continuous batching decodes them in
// the same batches; judged against the case's solo run. A distractor is the case's own prompt rotated
// (another text of the same length: the prompts also fit one prefill batch), generating as many tokens
// as the case with stops ignored, so that it is live through every step of the case. Not applicable
// where the server has one slot or does not say (llama: /props total_slots), or with --api openai.
constexpr int64_t kBatchDistractors = 3;
// The k-th distractor of a prompt: the prompt rotated by k * (T / 2 + 1), another text of its length.
std::vector<int32_t> distractor(const std::vector<int32_t>& prompt, int64_t k) {
  std::vector<int32_t> rotated(prompt.begin(), prompt.end());
  const size_t T = prompt.size();
  if (T > 1) std::rotate(rotated.begin(), rotated.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(k) * (T / 2 + 1)) % T), rotated.end());
  return rotated;
}
ProbeResult batching_probe(const ServerRun& run, const GoldenCase& g, bool greedy, const server_answer::Generated& cold,
                           const json& cold_req, double limit) {
  ProbeResult p;
  p.name = "batching";
  if (run.o.api != "llama" || cold_req.is_null()) {
    return not_applicable(p, "with --api openai the server's slots are not known (llama API: /props total_slots)");
  }
  json props;
  try {
    props = net::get_json(run.base + "/props", run.o.http);
  } catch (const net::HttpStatusError& e) {
    return not_applicable(p, cat("the server does not say how many slots it has (", run.base, "/props: HTTP ", e.status(), ")"));
  }
  if (!props.is_object() || !props.contains("total_slots")) {
    return not_applicable(p, "the server does not say how many slots it has (no total_slots in /props)");
  }
  const json& ts = props["total_slots"];
  if (!ts.is_number_integer() || ts.get<int64_t>() < 1)
    input_error("malformed response from ", run.base, "/props: total_slots is not a count of at least 1: ", excerpt_of(ts));
  const int64_t slots = ts.get<int64_t>();
  p.slots = slots;
  if (slots < 2) {
    return not_applicable(p, "the server has 1 slot: concurrent requests queue, they are not batched (llama-server -np N)");
  }
  const int64_t others = std::min<int64_t>(slots - 1, kBatchDistractors);
  const std::string url = run.base + "/completion";
  std::vector<json> reqs{cold_req};
  for (int64_t k = 1; k <= others; ++k) {
    reqs.push_back({{"prompt", distractor(g.prompt, k)}, {"n_predict", g.max_new_tokens}, {"return_tokens", true},
                    {"cache_prompt", false}, {"temperature", 0},            {"ignore_eos", true}});
  }
  std::vector<json> answers(reqs.size());
  std::vector<std::exception_ptr> errors(reqs.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          answers[i] = net::post_json(url, reqs[i], generation_cap(run, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens, i == 0 ? asked_n_probs(run) : 0));
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  const server_answer::Generated batched =
      server_answer::llama_generation(answers[0], url, asked_n_probs(run));
  judge_against_cold(p, run, greedy, cold, batched,
                     cat("batched (beside ", others, others == 1 ? " other request, " : " other requests, ", slots, " slots)"), "solo",
                     cat("beside ", others, others == 1 ? " other request on " : " other requests on ", slots, " slots; batched equals solo"), limit);
  return p;
}

// SGLang's output log-probs at each generated step taken back to the model's distribution
// (server_answer::sglang_model_step): at the sampling temperature unless the server returns the
// original ones, the presence penalty over the tokens generated before. A step that cannot be taken
// back exactly is emptied (not scored), and `note` says why.
void sglang_model_steps(const ServerRun& run, const SamplingParams& sp, bool greedy, server_answer::Generated& got, std::string& note) {
  const double t = greedy || run.o.sglang_original_logprobs ? 1.0 : sp.temperature;
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

// One SGLang generation request, its answer read and taken back to the model's distribution.
server_answer::Generated sglang_generate(const ServerRun& run, const json& req, const SamplingParams& sp, bool greedy, int64_t prompt,
                                         int64_t budget) {
  const std::string url = run.base + "/generate";
  server_answer::Generated got = server_answer::sglang_generation(
      net::post_json(url, req, generation_cap(run, prompt, budget, run.o.decode_path ? run.topk : 0)), url, run.o.decode_path);
  std::string note;  // the case's own run says it
  sglang_model_steps(run, sp, greedy, got, note);
  return got;
}

// SGLang's prefix-cache probe: the cold run came after POST /flush_cache; the case's prompt is sent
// once (max_new_tokens 1), then the case again, warm; meta_info.cached_tokens says what was reused.
ProbeResult sglang_prefix_probe(const ServerRun& run, const GoldenCase& g, bool greedy, const SamplingParams& sp,
                                const server_answer::Generated& cold, const json& cold_req, double limit) {
  ProbeResult p;
  p.name = "prefix-cache";
  if (cold.cached_tokens && *cold.cached_tokens > 0)
    return not_applicable(p, cat("the cold run reused ", *cold.cached_tokens, " cached tokens itself",
                                 run.flush_note.empty() ? "" : cat(" (", run.flush_note, ")")));
  const std::string url = run.base + "/generate";
  const json primer = {{"input_ids", g.prompt}, {"sampling_params", sglang_one_token()}};
  (void)net::post_json(url, primer, generation_cap(run, static_cast<int64_t>(g.prompt.size()), 1, 0));
  const server_answer::Generated warm = sglang_generate(run, cold_req, sp, greedy, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens);
  p.cached = warm.cached_tokens;
  if (!p.cached || *p.cached == 0)
    return not_applicable(p, p.cached ? "the server reused no cached tokens (meta_info.cached_tokens 0; --disable-radix-cache?)"
                                      : "the server does not say what it reused (no meta_info.cached_tokens)");
  judge_against_cold(p, run, greedy, cold, warm, cat("warm (", *p.cached, " cached tokens)"), "cold",
                     cat(*p.cached, " cached tokens; warm equals cold"), limit);
  return p;
}

// SGLang's batching probe: one /generate whose input_ids hold the case and kBatchDistractors
// distractors (the case's prompt rotated, generating as long as the case with stops ignored), which
// SGLang's scheduler runs as one batch; judged against the case's solo run.
ProbeResult sglang_batching_probe(const ServerRun& run, const GoldenCase& g, bool greedy, const SamplingParams& sp,
                                  const server_answer::Generated& cold, const json& cold_req, double limit) {
  ProbeResult p;
  p.name = "batching";
  const std::string url = run.base + "/generate";
  json ids = json::array({g.prompt}), sampling = json::array({cold_req.at("sampling_params")});
  json logprob = json::array({true}), top = json::array({run.o.decode_path ? run.topk : 0});
  for (int64_t k = 1; k <= kBatchDistractors; ++k) {
    ids.push_back(distractor(g.prompt, k));
    sampling.push_back({{"max_new_tokens", g.max_new_tokens}, {"temperature", 0}, {"ignore_eos", true}});
    logprob.push_back(false);
    top.push_back(0);
  }
  json req = cold_req;
  req["input_ids"] = ids;
  req["sampling_params"] = sampling;
  req["return_logprob"] = logprob;
  req["top_logprobs_num"] = top;
  const int64_t n = kBatchDistractors + 1;
  const json r = net::post_json(url, req, answer_cap(run, (static_cast<int64_t>(g.prompt.size()) + g.max_new_tokens) * n,
                                                     g.max_new_tokens, run.o.decode_path ? run.topk : 0));
  if (!r.is_array() || r.size() != static_cast<size_t>(kBatchDistractors + 1))
    input_error("malformed response from ", url, ": a request of ", kBatchDistractors + 1, " sequences answered with ",
                r.is_array() ? cat(r.size(), " answers") : excerpt_of(r), ", expected one per sequence");
  server_answer::Generated batched = server_answer::sglang_generation(r.at(0), url, run.o.decode_path);
  std::string note;
  sglang_model_steps(run, sp, greedy, batched, note);
  judge_against_cold(p, run, greedy, cold, batched, cat("batched (one request of ", kBatchDistractors + 1, " sequences)"), "solo",
                     cat("in one request beside ", kBatchDistractors, " other sequences; batched equals solo"), limit);
  return p;
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

void free_running(const ServerRun& run, const GoldenCase& g, CaseResult& cr, std::vector<std::string>& bad,
                  std::vector<std::string>& warn) {
  GenerationResult& gen = cr.gen;
  gen.golden_tokens = g.continuation;
  if (g.max_new_tokens > 0) {
    RunConfig base;
    const SamplingParams sp = apply_run_config(base, g.sampling).sampling;
    const bool greedy = !(sp.temperature > 0);
    server_answer::Generated got;
    json cold_req;  // llama, sglang: the free-running request, sent cold (llama: cache_prompt false; sglang: after /flush_cache)
    const auto t0 = clock_type::now();
    const auto wanted = [&](const char* name) { return std::find(run.o.probes.begin(), run.o.probes.end(), name) != run.o.probes.end(); };
    if (run.o.api == "sglang") {
      // The cold run, as llama's (cache_prompt false): the teacher-forced request put this sequence in
      // SGLang's radix cache, which would serve the prompt; POST /flush_cache empties it first.
      run.flush_note.clear();
      try {
        (void)net::request("POST", run.base + "/flush_cache", "", run.o.http);
      } catch (const net::HttpStatusError& e) {
        run.flush_note = cat("POST ", run.base, "/flush_cache: HTTP ", e.status());
      }
      cold_req = sglang_request(g.prompt, sglang_sampling(sp, greedy, g.max_new_tokens, g.ignore_stop), run.o.decode_path ? run.topk : 0);
      const std::string url = run.base + "/generate";
      got = server_answer::sglang_generation(
          net::post_json(url, cold_req, generation_cap(run, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens, run.o.decode_path ? run.topk : 0)), url, run.o.decode_path);
      sglang_check_temperature(run, sp, greedy, got, url);
      std::string note;
      sglang_model_steps(run, sp, greedy, got, note);
      if (!note.empty()) warn.push_back("decode path: " + note);
      if (!got.spec_stated.empty()) gen.spec_stated = got.spec_stated;
    } else if (run.o.api == "openai") {
      const std::string url = run.base + "/v1/completions";
      json req = openai_request(run, g.prompt, g.max_new_tokens, sp.temperature, run.o.decode_path ? run.topk : 1);
      req["ignore_eos"] = g.ignore_stop;
      if (!greedy) {
        req["top_p"] = sp.top_p;
        req["top_k"] = sp.top_k;
        req["min_p"] = sp.min_p;
        req["presence_penalty"] = sp.presence_penalty;
        req["repetition_penalty"] = sp.repetition_penalty;  // vLLM's name
        req["repeat_penalty"] = sp.repetition_penalty;      // llama-server's
        req["seed"] = sp.seed;
      }
      got = server_answer::openai_generation(net::post_json(url, req, generation_cap(run, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens, run.o.decode_path ? run.topk : 1)), url,
                                             run.o.decode_path);
    } else {
      const std::string url = run.base + "/completion";
      json& req = cold_req;
      req = {{"prompt", g.prompt},    {"n_predict", g.max_new_tokens}, {"return_tokens", true},
                  {"cache_prompt", false}, {"temperature", sp.temperature}, {"ignore_eos", g.ignore_stop}};
      if (run.o.decode_path) {
        req["n_probs"] = asked_n_probs(run);
        req["post_sampling_probs"] = false;  // the model's distribution, before the sampler's cuts
      }
      if (!greedy) {
        req["top_k"] = sp.top_k;
        req["top_p"] = sp.top_p;
        req["min_p"] = sp.min_p;
        req["repeat_penalty"] = sp.repetition_penalty;
        req["presence_penalty"] = sp.presence_penalty;
        req["seed"] = sp.seed;
      }
      got = server_answer::llama_generation(net::post_json(url, req, generation_cap(run, static_cast<int64_t>(g.prompt.size()), g.max_new_tokens, asked_n_probs(run))), url,
                                            asked_n_probs(run));
    }
    const std::string url = run.base + (run.o.api == "openai" ? "/v1/completions" : run.o.api == "sglang" ? "/generate" : "/completion");
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
    if (run.o.api == "sglang") {
      if (wanted("prefix-cache")) gen.probes.push_back(sglang_prefix_probe(run, g, greedy, sp, got, cold_req, run.o.rules.probe_kld));
      if (wanted("batching")) gen.probes.push_back(sglang_batching_probe(run, g, greedy, sp, got, cold_req, run.o.rules.probe_kld));
    } else {
      if (wanted("prefix-cache")) gen.probes.push_back(prefix_cache_probe(run, g, greedy, got, cold_req, run.o.rules.probe_kld));
      if (wanted("batching")) gen.probes.push_back(batching_probe(run, g, greedy, got, cold_req, run.o.rules.probe_kld));
    }
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

// A running server as the subject of a comparison (judge/subject.h): per case, its teacher-forced
// listings at every golden position, then its free-running generation with the decode path and the
// serving probes. SGLang's teacher-forced answers are fetched kSglangBatch cases at a time; the
// vocabulary is checked by text once, before the first case's requests.
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
    if (run_.o.api == "openai" && !run_.o.served_model.empty()) r.limits_note += check_served_model(run_);
  }
  void open(const std::vector<size_t>& selected, CompareResult&) override {
    check_answer_bounds(run_, selected);
    selected_ = selected;
  }
  // The case's group loaded (its teacher-forced answers fetched at once for SGLang), the vocabulary
  // checked before the first.
  void begin_case(CaseWork& w) override {
    const size_t group = run_.o.api == "sglang" ? kSglangBatch : 1;
    if (w.slot % group == 0) {
      cases_.clear();
      fetched_.clear();
      for (size_t n = w.slot; n < std::min(selected_.size(), w.slot + group); ++n)
        cases_.push_back(run_.rec.load_case(selected_[n], false));
      if (!checked_vocab_) {
        check_vocabulary(run_, cases_.front().prompt);
        checked_vocab_ = true;
      }
      if (run_.o.api == "sglang") {
        std::vector<std::vector<int32_t>> seqs;
        for (const GoldenCase& c : cases_) seqs.push_back(c.sequence());
        fetched_ = sglang_topk(run_, seqs);
      }
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
  std::vector<std::vector<TopList>> fetched_;     // sglang: its teacher-forced answers
  size_t at_ = 0;                                 // the case under way within the group
};

}  // namespace

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress) {
  if (o.api != "llama" && o.api != "openai" && o.api != "sglang")
    input_error("compare --server: API '", o.api, "' is unknown; expected 'llama' (llama-server's /completion), 'openai' ",
                "(/v1/completions) or 'sglang' (SGLang's /generate)");
  if (o.prompt_logprobs && o.api != "openai")
    input_error("compare --server: --prompt-logprobs is a parameter of the OpenAI-compatible API (vLLM); with --api ", o.api,
                o.api == "sglang" ? " there is one request per sequence already" : " there is one request per position");
  if (o.sglang_original_logprobs && o.api != "sglang")
    input_error("compare --server: --sglang-logprobs applies to --api sglang only");
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    input_error("compare --server: '", o.url, "' is not an http:// or https:// URL");
  const ModelConfig& cfg = model.config;
  if (o.topk < 0 || o.topk > cfg.vocab_size)
    input_error("compare --server: --topk ", o.topk, ": the model has ", cfg.vocab_size, " logit rows; expected 1 to ", cfg.vocab_size,
                " (0: every id up to ", kServerAllIds, " rows, else 40)");
  const int topk = o.topk > 0 ? o.topk : cfg.vocab_size <= kServerAllIds ? static_cast<int>(cfg.vocab_size) : 40;
  ServerRun run{rec, model, tok, o, cfg.vocab_size, topk, o.url, {}, {}, {}, std::nullopt, {}, {}, {}, {}, {}, {}, std::nullopt, {}, 0, {}, 0};
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
  answer_bounds(run);

  ServerSubject subject(run);
  return compare(rec, model, tok, o, subject, progress);
}

}  // namespace degen
