// The answers of the inference servers' HTTP APIs, parsed without a network (docs/server.md). Each
// parser lives with its API's table entry (api_llama.cpp, api_openai.cpp, api_sglang.cpp); the shared
// pieces in answer_common.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen {

// The answers of each API, parsed without a network: compare_server reads every answer through
// these (after net::parse_answer), and so do the fuzz targets tests/fuzz/fuzz_http_*.cpp. Each takes
// the parsed body and the URL it came from (named in messages) and throws InputError (128) for a
// malformed answer: a missing field, a field of another type, a negative id, a log-prob that is not
// a number or null (null is -inf: llama-server writes -inf so), is not finite, or is positive beyond
// kMaxServerLogprob, listed probabilities summing above 1 + kMaxServerMassExcess. Ids are returned
// as the server wrote them: one at or beyond the model's vocabulary is judged by compare_server (a
// bad verdict with its reason), not here.
namespace server_answer {

// note: the servers compute log-softmax in fp32 (llama-server from its probabilities, vLLM with
// torch.log_softmax): the top token's log-prob can round to a few 1e-7 above 0, never to 1e-4.
constexpr double kMaxServerLogprob = 1e-4;
// note: K listed probabilities, each rounded in fp32 (relative 6e-8) and printed with 6+ digits,
// sum to at most 1 + K * 1e-6: 1e-3 allows K = 1000 with room; more mass is not a distribution.
constexpr double kMaxServerMassExcess = 1e-3;

// (id, log-prob) as listed at one position, in the server's order (prompt_logprobs maps: by
// decreasing log-prob).
using TopList = std::vector<std::pair<int64_t, double>>;

struct Generated {
  std::vector<int64_t> tokens;  // as listed (an id beyond the vocabulary is kept for the verdict)
  std::string stop_reason;      // "?" when the server gives none (null or absent)
  // With per-token log-probs asked: the distribution the server states at each generated step (an
  // empty list: none stated there; llama-server states none for tokens accepted from drafts).
  std::vector<TopList> steps;
  std::optional<int64_t> draft_n, draft_accepted;  // the server's speculative-decoding counts, where stated
  std::optional<int64_t> cached_tokens;            // SGLang: prompt tokens served from its radix cache
  std::string spec_stated;                         // SGLang: its speculative-decoding figures, as a phrase
};

// llama-server /completion, one position (n_predict 1, n_probs K): completion_probabilities[0].top_logprobs.
TopList llama_position(const nlohmann::json& answer, const std::string& url);
// llama-server /completion, free-running (return_tokens): tokens and stop_type; with n_probs > 0
// asked, the per-step distributions too: completion_probabilities must list one entry per generated
// token, each for that token ('id'), or InputError naming the field.
Generated llama_generation(const nlohmann::json& answer, const std::string& url, int n_probs = 0);
// /v1/completions with max_tokens 1: the generated token's top-K (llama-server's logprobs.content
// with ids, or the classic logprobs.top_logprobs with "token_id:N" keys).
TopList openai_position(const nlohmann::json& answer, const std::string& url);
// /v1/completions with prompt_logprobs (vLLM) over a prompt of `positions` tokens: the top-K after
// each prompt token, the last one the generated token's (`positions` lists in all).
std::vector<TopList> openai_prompt_logprobs(const nlohmann::json& answer, int64_t positions, const std::string& url);
// /v1/completions, free-running (logprobs: K): the generated ids and finish_reason; with_steps: the
// top-K at each generated step too (logprobs.content[i].top_logprobs, or logprobs.top_logprobs[i]),
// one per generated token, or InputError naming the field.
Generated openai_generation(const nlohmann::json& answer, const std::string& url, bool with_steps = false);
// SGLang /generate over `seq` with logprob_start_len 0 and max_new_tokens 1: the distribution after
// each seq[0..i] (`seq.size()` lists), from the shifted input rows and output_top_logprobs[0].
std::vector<TopList> sglang_sequence(const nlohmann::json& answer, const std::vector<int32_t>& seq, const std::string& url);
// SGLang /generate, free-running: the generated ids (output_token_logprobs, checked against
// output_ids where given), finish_reason's type, cached_tokens, the speculative figures; with_steps:
// output_top_logprobs, one list per generated token (null: none stated there).
Generated sglang_generation(const nlohmann::json& answer, const std::string& url, bool with_steps = false);
// One step of SGLang's output log-probs taken back to the model's distribution: multiplied by
// `temperature` (the temperature they were taken at; 1: as they are), the presence penalty added
// back to the ids in `before` (the tokens generated before the step), renormalised. nullopt where
// that cannot be done exactly: a listing of fewer than `vocab` ids (its normalisation is unknown), or
// a repetition penalty with tokens before (it scales a logit by its sign, which log-probs do not keep).
std::optional<TopList> sglang_model_step(const TopList& listed, double temperature, double presence_penalty,
                                         double repetition_penalty, const std::vector<int64_t>& before, int64_t vocab);
// POST /detokenize: the text ("content"; vLLM's OpenAI server: "prompt"; SGLang: "text").
std::string detokenized(const nlohmann::json& answer, const std::string& url);
// GET /v1/models: the served model names (data[].id).
std::vector<std::string> served_models(const nlohmann::json& answer, const std::string& url);

}  // namespace server_answer

}  // namespace degen
