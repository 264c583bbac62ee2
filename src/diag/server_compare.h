// compare --server: score a running inference server against a golden record, through its HTTP API,
// with the result, table, JSON, JUnit and exit codes of compare (compare.h). docs/server.md.
//
// API "llama" (llama.cpp's llama-server, native POST /completion):
//  - vocabulary: POST /detokenize of the record's first prompt must give our tokenizer's text
//    (another model's vocabulary is an input error, 128), and every id the server returns must lie
//    in the model's vocabulary (else the case is bad);
//  - teacher-forced: the golden token ids sent as ids (no re-tokenisation), one request per position
//    (llama-server gives no prompt log-probs): prompt = the first i+1 tokens, n_predict = 1,
//    n_probs = K (pre-sampling probabilities over the whole vocabulary, padding ids included). With
//    every id asked (small vocabularies, see kServerAllIds) the distribution is complete and scored as
//    a dump's logits are. Otherwise the server's top-K becomes a distribution by spreading its
//    remaining mass evenly over the other real ids, scored by metrics::compare_logits_topk against
//    the record's top-K: its kld_topk is exact whenever the server's top-K holds the record's top-K
//    ids (the coverage is reported) except for the padding ids' mass (see kServerAllIds), an
//    estimate otherwise; top-1 agreement and Δp; judged against the record's KLD floor of the chosen
//    class (k = 3);
//  - free-running: each case's prompt with its sampling (greedy: temperature 0) and budget,
//    return_tokens; repetition metrics, loop onset, first divergence from the golden continuation,
//    and model-or-engine (the golden continuation under the same sampling degenerates too?); the
//    server's sampler is its own, so a sampled case diverges from the golden at once, as expected.
// API "openai" (POST /v1/completions, llama-server's and vLLM's; SGLang's speaks it too): the same
// measurements; the golden ids as a token-id prompt, "logprobs": K, "return_tokens_as_token_ids"; the
// top-K read from llama-server's logprobs.content (ids) or the classic logprobs.top_logprobs with
// "token_id:N" keys (text keys are refused: mapping text back to ids would re-tokenise). With
// prompt_logprobs (vLLM) one request per sequence gives every position. Free-running ids come from
// the generated tokens' log-probs. /detokenize checks the vocabulary where the server has one (a
// 404 is noted in the limits line).
// Errors: the server cannot be reached, times out or refuses (HTTP >= 400): UntestableError (125),
// after bounded retries; a malformed answer (not JSON, missing fields, a log-prob out of range, an
// answer longer than the request can take): InputError (128). Both name the URL and what was expected.
// Judged, not errors (a bad verdict, exit 1, with the reason): an id at or beyond the model's
// vocabulary (its logit rows: no correct server of this model can produce it), a greedy generation
// of an id the tokenizer does not define (a padding row), an empty answer to a case whose golden
// continuation is not empty.
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diag/compare.h"
#include "net/http.h"

namespace degen {

// Up to this vocabulary size a server is asked for every id's log-prob (a 4096-entry answer per
// position). Beyond it, the top-K: the server's probabilities then still include the mass of the
// padding ids the record masks, a KLD of about that mass (1.8e-6 nats per position on the trained
// model, ~1800 x its fp32 floor: measured with --topk 40 against llama-server).
constexpr int kServerAllIds = 4096;

struct ServerCompareOptions {
  std::string url;                    // base URL, e.g. http://127.0.0.1:8080
  std::string api = "llama";            // llama | openai
  bool prompt_logprobs = false;         // openai: one request per sequence with prompt_logprobs (vLLM)
  std::string served_model;             // openai: the request's "model" (vLLM checks it; empty: not sent)
  FloorClass fclass = FloorClass::fp32;
  // An engine class without floors in the record (EngineClass::measured, e.g. q8_0): each case's KLD
  // floor is our engine's under this configuration, run now with `factory`; `class_name` names it.
  std::optional<RunConfig> measured_class;
  std::string class_name;
  BackendFactory factory;
  // The measured floors by case id, shared by the copies of these options (a server sweep's cells
  // judge the same cases against the same known-good run: it runs once per case).
  std::shared_ptr<std::map<std::string, double>> measured_floors = std::make_shared<std::map<std::string, double>>();
  std::vector<std::string> cases;     // only these (empty: all)
  bool allow_model_mismatch = false;
  bool fail_on_model_degeneration = false;
  bool free_running = true;
  // Decode-path scoring of the free-running generation (compare.h DecodePathResult): the server's
  // distribution at each generated step against our reference over the engine's own sequence.
  bool decode_path = true;
  int64_t decode_steps = -1;  // score at most this many generated steps per case (-1: every step)
  // Serving probes run after each case's generation (docs/server.md "Serving probes"): "prefix-cache",
  // "batching".
  std::vector<std::string> probes = {"prefix-cache", "batching"};
  // Log-probs asked per position; 0: every id when the vocabulary has at most kServerAllIds ids (the
  // server's distribution is then complete, and renormalised over the real ids as ours is), else 40.
  int topk = 0;
  net::HttpOptions http;
  CompareRules rules;
};

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
// POST /detokenize: the text ("content"; vLLM's OpenAI server: "prompt").
std::string detokenized(const nlohmann::json& answer, const std::string& url);

}  // namespace server_answer

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress = nullptr);

}  // namespace degen
