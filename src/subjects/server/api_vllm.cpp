// --api vllm: vLLM's OpenAI-compatible server. Its requests and answers are the openai entry's with
// prompt_logprobs always on (the teacher-forced top-K of a sequence in one request: vLLM states prompt
// log-probs, the plain OpenAI API does not), and what vLLM adds for the serving probes:
//  - per-request cache control by cache_salt: vLLM's prefix cache reuses a prompt's blocks only for a
//    request with the same salt, so every generation is sent with a salt of its own (cold), the warm
//    request is the cold one again (its own prompt is then in the cache), and the repeat gets a new
//    salt; the reused tokens are stated in usage.prompt_tokens_details.cached_tokens (with
//    --enable-prompt-tokens-details);
//  - continuous batching: the batching probe's requests are sent at the same time.
#include <atomic>
#include <chrono>

#include <unistd.h>

#include "subjects/server/answer_common.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"

namespace degen::server {

namespace {

// A salt no earlier request to this server can have had: this process, the time it started, and a count.
std::string fresh_salt() {
  static const long long started = std::chrono::steady_clock::now().time_since_epoch().count();
  static std::atomic<uint64_t> n{0};
  return cat("degenbisect-", ::getpid(), "-", started, "-", n++);
}

class VllmApi final : public EngineApi {
 public:
  VllmApi(std::unique_ptr<EngineApi> openai, const ApiCapabilities& c) : openai_(std::move(openai)), caps_(c) {}
  const ApiCapabilities& caps() const override { return caps_; }

  // The openai entry's requests and answers.
  std::vector<std::vector<TopList>> forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const override {
    return openai_->forced(c, seqs);
  }
  int64_t forced_listings(const ApiContext& c, int64_t T) const override { return openai_->forced_listings(c, T); }
  TopList position(const ApiContext& c, const std::vector<int32_t>& prefix) const override { return openai_->position(c, prefix); }
  int generation_ids(const ApiContext& c) const override { return openai_->generation_ids(c); }
  Generated read_generation(const ApiContext& c, const json& answer, const std::string& u) const override {
    return openai_->read_generation(c, answer, u);
  }

  // What vLLM adds.
  json generation_request(const ApiContext& c, const GenerationAsk& a) const override {
    json req = openai_->generation_request(c, a);
    req["cache_salt"] = fresh_salt();
    return req;
  }
  json cold_again(const json& cold_req) const override {
    json req = cold_req;
    req["cache_salt"] = fresh_salt();
    return req;
  }
  std::optional<int64_t> cached_tokens(const json& answer, const Generated&, const std::string& u) const override {
    // null where vLLM reused nothing (or was not asked to say: --enable-prompt-tokens-details)
    return optional_count(answer, {"usage", "prompt_tokens_details", "cached_tokens"}, u, true);
  }
  BatchShape batch_shape(const ApiContext&) const override {
    BatchShape s;
    s.others = kBatchDistractors;
    return s;
  }
  Generated together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                     int64_t budget) const override {
    return concurrently(c, case_req, others, prompt, budget);
  }

 private:
  std::unique_ptr<EngineApi> openai_;
  ApiCapabilities caps_;
};

}  // namespace

const EngineApi& vllm_api() {
  static const std::unique_ptr<EngineApi> api = [] {
    ApiCapabilities c = openai_api().caps();  // the openai entry's, but for its names and what vLLM adds
    c.name = "vllm";
    c.summary = "vLLM's /v1/completions with prompt_logprobs";
    c.help = "vLLM's /v1/completions, one request per sequence by prompt_logprobs";
    c.prompt_logprobs_always = true;
    c.cache_control = true;
    c.no_cache_control = "";
    c.cached_field = "usage.prompt_tokens_details.cached_tokens";
    c.no_reuse_hint = "; vLLM reuses a prompt only with prefix caching on: --enable-prefix-caching";
    // vLLM 0.22.1 answers prompt_tokens_details null both without --enable-prompt-tokens-details and
    // when it reused nothing (measured: with the flag, prefix caching on or off, a prompt shorter than
    // one cache block)
    c.no_field_hint = "; vLLM leaves it null without --enable-prompt-tokens-details and where it reused nothing, as with "
                      "prefix caching off (--enable-prefix-caching)";
    return std::make_unique<VllmApi>(make_openai_api(c), c);
  }();
  return *api;
}

}  // namespace degen::server
