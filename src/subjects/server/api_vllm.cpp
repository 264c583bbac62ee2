// --api vllm: vLLM's OpenAI-compatible server, the openai entry with prompt_logprobs always on: the
// teacher-forced top-K of a sequence comes in one request (vLLM states prompt log-probs; the plain
// OpenAI API does not), as --api openai --prompt-logprobs asks it.
#include "subjects/server/engine_api.h"

namespace degen::server {

const EngineApi& vllm_api() {
  static const std::unique_ptr<EngineApi> api = [] {
    ApiCapabilities c = openai_api().caps();  // the openai entry's, but for its names and one detail
    c.name = "vllm";
    c.summary = "vLLM's /v1/completions with prompt_logprobs";
    c.help = "vLLM's /v1/completions, one request per sequence by prompt_logprobs";
    c.prompt_logprobs_always = true;
    return make_openai_api(c);
  }();
  return *api;
}

}  // namespace degen::server
