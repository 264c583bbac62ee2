// --api openai: POST /v1/completions (llama-server's and vLLM's; SGLang's keys log-probs by text:
// refused). The golden ids as a token-id prompt, "logprobs": K, "return_tokens_as_token_ids"; the top-K
// read from llama-server's logprobs.content (ids) or the classic logprobs.top_logprobs with
// "token_id:N" keys (text keys are refused: mapping text back to ids would re-tokenise). With
// prompt_logprobs (vLLM) one request per sequence gives every position. Free-running ids come from
// the generated tokens' log-probs. No per-request cache control, no slots: the probes that need
// them do not apply.
#include <algorithm>

#include "subjects/server/answer_common.h"
#include "subjects/server/engine_api.h"

namespace degen::server {

namespace {

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

}  // namespace

}  // namespace degen::server

namespace degen::server_answer {

using json = nlohmann::json;
using server::excerpt_of;
using server::field;
using server::first_choice;
using server::id_from_token_key;
using server::openai_generated_top;
using server::reason_field;
using server::speculation_counts;
using server::step_lists;
using server::token_id;
using server::top_from_map;

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

}  // namespace degen::server_answer

namespace degen::server {

namespace {

class OpenAiApi final : public EngineApi {
 public:
  explicit OpenAiApi(const ApiCapabilities& c) : caps_(c) {}
  const ApiCapabilities& caps() const override { return caps_; }

  std::vector<std::vector<TopList>> forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const override {
    const std::string u = url(c);
    std::vector<std::vector<TopList>> out;
    for (const std::vector<int32_t>& seq : seqs) {
      const int64_t T = static_cast<int64_t>(seq.size());
      if (by_prompt_logprobs(c)) {
        json req = request(c, seq, 1, 0, c.topk);
        req["prompt_logprobs"] = c.topk;
        out.push_back(server_answer::openai_prompt_logprobs(net::post_json(u, req, c.cap(T + 1, T, c.topk)), T, u));
        continue;
      }
      std::vector<TopList>& tops = out.emplace_back();
      for (int64_t i = 0; i < T; ++i) {
        const std::vector<int32_t> prefix(seq.begin(), seq.begin() + i + 1);
        tops.push_back(server_answer::openai_position(net::post_json(u, request(c, prefix, 1, 0, c.topk), c.cap(i + 2, 1, c.topk)), u));
      }
    }
    return out;
  }
  int64_t forced_listings(const ApiContext& c, int64_t T) const override { return by_prompt_logprobs(c) ? T : 1; }

  TopList position(const ApiContext& c, const std::vector<int32_t>& prefix) const override {
    const std::string u = url(c);
    return server_answer::openai_position(
        net::post_json(u, request(c, prefix, 1, 0, c.topk), c.generation_cap(static_cast<int64_t>(prefix.size()), 1, c.topk)), u);
  }

  // The generated ids come from the log-probs: at least one per step is asked.
  json generation_request(const ApiContext& c, const GenerationAsk& a) const override {
    json req = request(c, a.prompt, a.max_new_tokens, a.sp.temperature, std::max(a.logprobs, 1));
    req["ignore_eos"] = a.ignore_eos;
    if (!a.greedy) {
      req["top_p"] = a.sp.top_p;
      req["top_k"] = a.sp.top_k;
      req["min_p"] = a.sp.min_p;
      req["presence_penalty"] = a.sp.presence_penalty;
      req["repetition_penalty"] = a.sp.repetition_penalty;  // vLLM's name
      req["repeat_penalty"] = a.sp.repetition_penalty;      // llama-server's
      req["seed"] = a.sp.seed;
    }
    return req;
  }
  int generation_ids(const ApiContext& c) const override { return c.decode_path ? c.topk : 1; }
  Generated read_generation(const ApiContext& c, const json& answer, const std::string& u) const override {
    return server_answer::openai_generation(answer, u, c.decode_path);
  }

 private:
  ApiCapabilities caps_;
  bool by_prompt_logprobs(const ApiContext& c) const { return c.prompt_logprobs || caps_.prompt_logprobs_always; }

  // A /v1/completions request: a token-id prompt, the ids asked back ("token_id:N" where the server
  // writes tokens as text), the served model's name when given.
  static json request(const ApiContext& c, const std::vector<int32_t>& prompt, int64_t max_tokens, const json& temperature, int logprobs) {
    json req = {{"prompt", prompt},     {"max_tokens", max_tokens}, {"temperature", temperature},
                {"logprobs", logprobs}, {"return_tokens_as_token_ids", true}};
    if (!c.served_model.empty()) req["model"] = c.served_model;
    return req;
  }
};

}  // namespace

std::unique_ptr<EngineApi> make_openai_api(const ApiCapabilities& caps) { return std::make_unique<OpenAiApi>(caps); }

const EngineApi& openai_api() {
  static const std::unique_ptr<EngineApi> api = [] {
    ApiCapabilities c{"openai", "/v1/completions", "/v1/completions: llama-server, vLLM", "/v1/completions", ""};
    c.prompt_logprobs_option = true;
    c.detokenize_optional = true;
    c.checks_served_model = true;
    c.no_cache_control = "the OpenAI-compatible API has no per-request prompt cache control";
    return make_openai_api(c);
  }();
  return *api;
}

}  // namespace degen::server
