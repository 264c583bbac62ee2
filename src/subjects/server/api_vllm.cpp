// --api vllm: vLLM's OpenAI-compatible server, the openai entry with prompt_logprobs always on: the
// teacher-forced top-K of a sequence comes in one request (vLLM states prompt log-probs; the plain
// OpenAI API does not), as --api openai --prompt-logprobs asks it.
#include "subjects/server/engine_api.h"

namespace degen::server {

const EngineApi& vllm_api() {
  static const std::unique_ptr<EngineApi> api = [] {
    ApiCapabilities c{"vllm", "vLLM's /v1/completions with prompt_logprobs",
                      "vLLM's /v1/completions, one request per sequence by prompt_logprobs", "/v1/completions", ""};
    c.prompt_logprobs_option = true;
    c.prompt_logprobs_always = true;
    c.detokenize_optional = true;
    c.checks_served_model = true;
    c.no_cache_control = "the OpenAI-compatible API has no per-request prompt cache control";
    return make_openai_api(c);
  }();
  return *api;
}

}  // namespace degen::server
