// --api llama: llama-server's native POST /completion (docs/server.md). The golden ids go as ids (no
// re-tokenisation), one request per position for the teacher-forced top-K (llama-server gives no prompt
// log-probs): prompt = the first i+1 tokens, n_predict 1, n_probs K (pre-sampling probabilities over the
// whole vocabulary, padding ids included). cache_prompt makes a request cold or warm; /props states
// the slots that decode together.
#include <algorithm>

#include "subjects/server/answer_common.h"
#include "subjects/server/engine_api.h"

namespace degen::server_answer {

using json = nlohmann::json;
using server::excerpt_of;
using server::field;
using server::reason_field;
using server::speculation_counts;
using server::step_lists;
using server::token_id;
using server::top_from_id_list;

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

}  // namespace degen::server_answer

namespace degen::server {

namespace {

// One llama-server request for the distribution after `prefix`: n_predict 1, n_probs K, the model's
// distribution (post_sampling_probs false); cache_prompt as given.
json position_request(const std::vector<int32_t>& prefix, int topk, bool cache_prompt) {
  return {{"prompt", prefix},      {"n_predict", 1},             {"n_probs", topk},
          {"temperature", 0},      {"cache_prompt", cache_prompt}, {"post_sampling_probs", false},
          {"return_tokens", true}, {"ignore_eos", true}};
}

class LlamaApi final : public EngineApi {
 public:
  const ApiCapabilities& caps() const override {
    static const ApiCapabilities c = [] {
      ApiCapabilities x{"llama", "llama-server's /completion", "llama-server's native /completion", "/completion",
                        "there is one request per position"};
      x.cache_control = true;
      x.cached_field = "timings.cache_n";
      return x;
    }();
    return c;
  }

  // One request per position; the prompt cache on (each prefix extends the last).
  std::vector<std::vector<TopList>> forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const override {
    const std::string u = url(c);
    std::vector<std::vector<TopList>> out;
    for (const std::vector<int32_t>& seq : seqs) {
      std::vector<TopList>& tops = out.emplace_back();
      for (size_t i = 0; i < seq.size(); ++i) {
        const std::vector<int32_t> prefix(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        const json r = net::post_json(u, position_request(prefix, c.topk, true), c.cap(static_cast<int64_t>(i) + 2, 1, c.topk));
        tops.push_back(server_answer::llama_position(r, u));
      }
    }
    return out;
  }
  int64_t forced_listings(const ApiContext&, int64_t) const override { return 1; }

  TopList position(const ApiContext& c, const std::vector<int32_t>& prefix) const override {
    const std::string u = url(c);
    return server_answer::llama_position(
        net::post_json(u, position_request(prefix, c.topk, false), c.generation_cap(static_cast<int64_t>(prefix.size()), 1, c.topk)), u);
  }

  // Cold: cache_prompt false. With per-step log-probs: the model's distribution, before the sampler's
  // cuts (post_sampling_probs false).
  json generation_request(const ApiContext&, const GenerationAsk& a) const override {
    json req = {{"prompt", a.prompt},    {"n_predict", a.max_new_tokens}, {"return_tokens", true},
                {"cache_prompt", false}, {"temperature", a.sp.temperature}, {"ignore_eos", a.ignore_eos}};
    if (a.logprobs > 0) {
      req["n_probs"] = a.logprobs;
      req["post_sampling_probs"] = false;
    }
    if (!a.greedy) {
      req["top_k"] = a.sp.top_k;
      req["top_p"] = a.sp.top_p;
      req["min_p"] = a.sp.min_p;
      req["repeat_penalty"] = a.sp.repetition_penalty;
      req["presence_penalty"] = a.sp.presence_penalty;
      req["seed"] = a.sp.seed;
    }
    return req;
  }
  Generated read_generation(const ApiContext& c, const json& answer, const std::string& u) const override {
    return server_answer::llama_generation(answer, u, generation_ids(c));
  }

  std::optional<int64_t> cached_tokens(const json& answer, const Generated&, const std::string& u) const override {
    return optional_count(answer, {"timings", "cache_n"}, u, false);
  }
  void prime(const ApiContext& c, const std::vector<int32_t>& prompt) const override {
    const json primer = {{"prompt", prompt},   {"n_predict", 1},        {"cache_prompt", true},
                         {"temperature", 0},   {"return_tokens", true}, {"ignore_eos", true}};
    (void)net::post_json(url(c), primer, c.generation_cap(static_cast<int64_t>(prompt.size()), 1, 0));
  }
  json warm_request(const json& cold_req) const override {
    json req = cold_req;
    req["cache_prompt"] = true;
    return req;
  }

  BatchShape batch_shape(const ApiContext& c) const override;
  Generated together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                     int64_t budget) const override;
};

// The slots /props states (total_slots): the distractors are one per other slot, at most kBatchDistractors.
BatchShape LlamaApi::batch_shape(const ApiContext& c) const {
  BatchShape s;
  json props;
  try {
    props = net::get_json(c.base + "/props", c.http);
  } catch (const net::HttpStatusError& e) {
    s.not_applicable = cat("the server does not say how many slots it has (", c.base, "/props: HTTP ", e.status(), ")");
    return s;
  }
  if (!props.is_object() || !props.contains("total_slots")) {
    s.not_applicable = "the server does not say how many slots it has (no total_slots in /props)";
    return s;
  }
  const json& ts = props["total_slots"];
  if (!ts.is_number_integer() || ts.get<int64_t>() < 1)
    input_error("malformed response from ", c.base, "/props: total_slots is not a count of at least 1: ", excerpt_of(ts));
  s.slots = ts.get<int64_t>();
  if (*s.slots < 2) s.not_applicable = "the server has 1 slot: concurrent requests queue, they are not batched (llama-server -np N)";
  s.others = std::min<int64_t>(*s.slots - 1, kBatchDistractors);
  return s;
}

Generated LlamaApi::together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                             int64_t budget) const {
  return concurrently(c, case_req, others, prompt, budget);
}

}  // namespace

const EngineApi& llama_api() {
  static const LlamaApi api;
  return api;
}

}  // namespace degen::server
