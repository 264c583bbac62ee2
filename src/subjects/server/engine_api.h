// The engine APIs compare --server speaks (docs/server.md), one table entry each: llama (llama-server's
// native /completion), openai (/v1/completions), sglang (SGLang's native /generate), vllm (vLLM's
// /v1/completions with prompt_logprobs). An entry holds its endpoints, turns the judging code's asks
// (the top-K at every position of a sequence, one position cold, a generation with a case's
// sampling, several sequences decoded together) into requests, reads the answers (answers.h), and
// states what it can do (ApiCapabilities): the judging code and the serving probes ask the entry,
// never the API's name. Adding one: docs/architecture.md "Adding an engine API".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "net/http.h"
#include "subjects/server/answers.h"

namespace degen {
class Tokenizer;
}

namespace degen::server {

using json = nlohmann::json;
using server_answer::Generated;
using server_answer::TopList;

// The most one answer may take (64 MiB of text, at most ~1.3 GB parsed), and the bounds below it:
// api_context.cpp says where each figure comes from.
constexpr uint64_t kMaxAnswerBytes = uint64_t{64} << 20;

// What the requests of one compare --server run need, set once before the first request.
struct ApiContext {
  std::string base;                // the server's base URL, without a trailing '/'
  int topk = 0;                    // log-probs asked per position
  int64_t V = 0;                   // the model's logit rows
  std::string served_model;        // the request's "model" (empty: not sent)
  bool prompt_logprobs = false;    // --prompt-logprobs: one request per sequence (OpenAI API, vLLM)
  bool original_logprobs = false;  // --sglang-logprobs original: output log-probs are the model's own
  bool decode_path = true;         // generations ask the per-step log-probs (the decode path)
  net::HttpOptions http;
  // listed_bytes[k]: the most k listed ids can take (the k longest pieces); piece_max: the longest piece.
  std::vector<uint64_t> listed_bytes;
  uint64_t piece_max = 0;

  // listed_bytes and piece_max from the tokenizer's pieces (without one: a fixed length each).
  void measure_pieces(const Tokenizer* tok);
  // The most bytes a correct answer holding `tokens` tokens (prompt and generated) and `listings`
  // lists of `ids` ids each can take.
  uint64_t answer_bytes(int64_t tokens, int64_t listings, int ids) const;
  // The HTTP options of such a request (its answer capped at answer_bytes); InputError, naming
  // --topk, when that is over kMaxAnswerBytes.
  net::HttpOptions cap(int64_t tokens, int64_t listings, int ids) const;
  // A generation request: the prompt, `budget` generated tokens, each with a list of `ids` log-probs (0: none).
  net::HttpOptions generation_cap(int64_t prompt, int64_t budget, int ids) const;
};

// A generation the judging code asks for: a case's prompt, sampling, budget and stop rule.
struct GenerationAsk {
  const std::vector<int32_t>& prompt;
  const SamplingParams& sp;
  bool greedy;  // sampling fields left out, temperature 0
  int64_t max_new_tokens;
  bool ignore_eos;
  int logprobs;  // per-step log-probs asked (0: none)
};

// The batching probe's distractors beside the case: at most this many.
constexpr int64_t kBatchDistractors = 3;

// How the server decodes several sequences together (the batching probe).
struct BatchShape {
  std::string not_applicable;   // why the API or this server cannot (empty: it can)
  std::optional<int64_t> slots;  // the slots the server states (llama: /props total_slots; none: vLLM's continuous batching)
  int64_t others = 0;            // the distractor sequences to send beside the case
  bool one_request = false;      // all in one request (SGLang: input_ids as a list of lists)
};

// What an API can state and do: the judging code's and the probes' questions, answered once.
struct ApiCapabilities {
  const char* name;     // the --api value
  const char* summary;  // for help and errors: "llama-server's /completion"
  const char* help;     // for --api's help: "llama-server's native /completion"
  const char* endpoint;  // where generations and teacher-forced requests go
  // The teacher-forced shape, for --prompt-logprobs' error: "there is one request per position".
  const char* forced_shape;
  bool prompt_logprobs_option = false;  // --prompt-logprobs applies
  bool prompt_logprobs_always = false;  // teacher-forced by prompt_logprobs without --prompt-logprobs (vLLM)
  bool states_scaled_logprobs = false;  // output log-probs at the sampling temperature (--sglang-logprobs applies)
  bool detokenize_optional = false;     // no /detokenize (404, 405) is noted, not an error
  bool checks_served_model = false;     // --served-model checked against GET /v1/models
  // Per-request cache control: a request can be sent cold, and warm after a primer (the prefix-cache
  // and repeat probes); `no_cache_control` says why not.
  bool cache_control = false;
  const char* no_cache_control = "";
  const char* cached_field = "";    // where an answer states its reused prompt tokens
  const char* no_reuse_hint = "";   // appended when it states 0
  const char* no_field_hint = "";   // appended when an answer does not state it
  size_t forced_batch = 1;          // cases whose teacher-forced answers are fetched together
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  virtual const ApiCapabilities& caps() const = 0;
  std::string url(const ApiContext& c) const { return c.base + caps().endpoint; }

  // Teacher-forced: the top-K after every prefix seq[0..i] of each sequence.
  virtual std::vector<std::vector<TopList>> forced(const ApiContext& c, const std::vector<std::vector<int32_t>>& seqs) const = 0;
  // The lists one sequence of T positions' teacher-forced answer holds (its answer bound).
  virtual int64_t forced_listings(const ApiContext& c, int64_t T) const = 0;
  // The server's prefill distribution after `prefix`, one request without a cache.
  virtual TopList position(const ApiContext& c, const std::vector<int32_t>& prefix) const = 0;

  // The body of POST /detokenize for `ids`.
  virtual json detokenize_request(const ApiContext& c, const std::vector<int32_t>& ids) const;
  // Before a cold request: empty the server's cache where a request cannot say so itself; what the
  // server answered where it refused (empty: done, or nothing to do).
  virtual std::string make_cold(const ApiContext&) const { return ""; }
  // A generation request (the case's SamplingParams to the API's fields), cold where the API can say so.
  virtual json generation_request(const ApiContext& c, const GenerationAsk& a) const = 0;
  // The ids per step a generation's answer may list (its answer bound).
  virtual int generation_ids(const ApiContext& c) const { return c.decode_path ? c.topk : 0; }
  // A generation's answer read (with the per-step lists where the decode path asked them).
  virtual Generated read_generation(const ApiContext& c, const json& answer, const std::string& url) const = 0;
  // The per-step lists taken to the model's distribution where the API states them otherwise (SGLang:
  // at the sampling temperature); `note` says which steps could not be and why (they are emptied).
  virtual void model_steps(const ApiContext&, const SamplingParams&, bool /*greedy*/, Generated&, std::string& /*note*/) const {}
  // Send a generation request and read its answer (model_steps not applied).
  Generated generate(const ApiContext& c, const json& req, int64_t prompt, int64_t budget) const;
  // The reused prompt tokens an answer states (the prefix-cache probe).
  virtual std::optional<int64_t> cached_tokens(const json&, const Generated& g, const std::string&) const { return g.cached_tokens; }

  // cache_control: a one-token request that puts `prompt` in the server's cache, and `cold_req` sent
  // so that it may reuse it.
  virtual void prime(const ApiContext&, const std::vector<int32_t>&) const {}
  virtual json warm_request(const json& cold_req) const { return cold_req; }
  // The cold request sent again, cold (the repeat probe): as it is, or with what makes it cold anew
  // (vLLM: a new cache_salt).
  virtual json cold_again(const json& cold_req) const { return cold_req; }
  // Batching: how the server decodes sequences together, and the case's request sent beside
  // `others` (generation requests) that way; the case's answer, read.
  virtual BatchShape batch_shape(const ApiContext& c) const;
  virtual Generated together(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                             int64_t budget) const;

 protected:
  // The case's request and `others` sent at the same time, one thread each (a server with continuous
  // batching decodes them in the same batches); the case's answer, read.
  Generated concurrently(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                         int64_t budget) const;
};

// The table: every API, in --api's order.
const std::vector<const EngineApi*>& engine_apis();
// The entry named `name`; InputError listing the table for an unknown one.
const EngineApi& find_api(const std::string& name);
// The names, for --api's check.
std::vector<std::string> api_names();
// --api's help: each entry's name and help, joined.
std::string apis_help();

// The entries (one file each).
const EngineApi& llama_api();
const EngineApi& openai_api();
const EngineApi& sglang_api();
const EngineApi& vllm_api();
// The OpenAI-compatible API (api_openai.cpp) under other capabilities: an entry for a server that
// speaks it with another detail (vllm: prompt_logprobs always on).
std::unique_ptr<EngineApi> make_openai_api(const ApiCapabilities& caps);

}  // namespace degen::server
