// compare --server: score a running inference server against a golden record, through its HTTP API,
// with the result, table, JSON, JUnit and exit codes of compare (judge/result.h). docs/server.md.
//
// API "llama" (llama.cpp's llama-server, native POST /completion):
//  - vocabulary: POST /detokenize of the record's first prompt must give our tokenizer's text
//    (another model's vocabulary is an input error, 128), and every id the server returns must lie
//    in the model's vocabulary (else the case is bad);
//  - teacher-forced: the golden token ids sent as ids (no re-tokenisation), one request per position
//    (llama-server gives no prompt log-probs): prompt = the first i+1 tokens, n_predict = 1,
//    n_probs = K (pre-sampling probabilities over the whole vocabulary, padding ids included). With
//    every id asked (small vocabularies, see kServerAllIds) the distribution is complete and scored as
//    a dump's logits are. Otherwise the server's top-K is scored by metrics::compare_listing against
//    the record's top-K, in the record's normalisation (the record's lse_pad takes the padding rows'
//    mass out): the smallest KLD the listing allows, exact over the record's cells when the server
//    lists every id the record stores, a lower bound otherwise (the share of the record's mass it
//    resolves is reported, and under CompareRules::min_resolved a KLD within its limit is not
//    judgeable: untestable); top-1 agreement and Δp; judged against the record's KLD floor of the
//    chosen class (k = 3);
//  - free-running: each case's prompt with its sampling (greedy: temperature 0) and budget,
//    return_tokens; repetition metrics, loop onset, first divergence from the golden continuation,
//    and model-or-engine (the golden continuation under the same sampling degenerates too?); the
//    server's sampler is its own, so a sampled case diverges from the golden at once, as expected.
// API "sglang" (SGLang's native POST /generate; docs/server.md "SGLang"): the golden ids as input_ids;
//  - teacher-forced: one request per sequence, several sequences per request (input_ids as a list of
//    lists, kSglangBatch at a time): logprob_start_len 0, max_new_tokens 1, temperature 0,
//    top_logprobs_num K. meta_info's input rows are shifted by one against the ids: entry j is the
//    distribution that predicted input_ids[j] (entry 0 null: nothing predicts the first token), so the
//    distribution after seq[0..i] is input_top_logprobs[i+1], and after the whole sequence it is
//    output_top_logprobs[0]. Each entry is a (logprob, token_id, text|null) triple; the ids of
//    input_token_logprobs must be the request's, and a row's top-K must state the row's token at the
//    log-prob input_token_logprobs states for it (else the rows are not SGLang's: 128);
//  - free-running: the case's sampling, output_token_logprobs (the ids) and output_top_logprobs (the
//    decode path). SGLang's output log-probs are taken after its penalties and at the sampling
//    temperature (layers/sampler.py: log(softmax(logits / T))), the model's own only for greedy
//    requests or with SGLANG_RETURN_ORIGINAL_LOGPROB=1 (sglang_original_logprobs). Where the listing
//    covers the vocabulary the tool takes them back to the model's distribution exactly (T * lp, the
//    presence penalty over the tokens generated before added back, renormalised); a top-K listing
//    cannot be, and such steps are not scored (noted). Step 0 is checked against the server's own
//    teacher-forced distribution after the prompt: a temperature reading that contradicts the server
//    (it scales though told it does not, or the reverse) is InputError (128) naming the setting;
//  - the free-running run is cold: after POST /flush_cache (the teacher-forced requests filled the
//    radix cache; a server that refuses the flush is noted by the prefix-cache probe);
//  - serving probes: prefix-cache through meta_info.cached_tokens,
//    batching as one /generate whose input_ids hold the case and its distractors.
// API "vllm": "openai" with prompt_logprobs always on (vLLM states prompt log-probs).
// Each API is an entry of the engine API table (subjects/server/engine_api.h): the judging asks it.
// API "openai" (POST /v1/completions, llama-server's and vLLM's; SGLang's keys log-probs by text: refused): the same
// measurements; the golden ids as a token-id prompt, "logprobs": K, "return_tokens_as_token_ids"; the
// top-K read from llama-server's logprobs.content (ids) or the classic logprobs.top_logprobs with
// "token_id:N" keys (text keys are refused: mapping text back to ids would re-tokenise). With
// prompt_logprobs (vLLM) one request per sequence gives every position. Free-running ids come from
// the generated tokens' log-probs. /detokenize checks the vocabulary where the server has one (a
// 404 is noted in the limits line). With a served model name (--served-model), GET /v1/models must
// list it (InputError otherwise; a server without /v1/models is noted).
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

#include "judge/result.h"
#include "net/http.h"
#include "subjects/server/answers.h"

namespace degen {

// Up to this vocabulary size a server is asked for every id's log-prob (a 4096-entry answer per
// position): its distribution is then complete. Beyond it, the top 40 (llama-server's and vLLM's
// listings stay small; vLLM serves at most --max-logprobs, 20 by default): scored as a listing
// (metrics::compare_listing, docs/metrics.md "Top-K").
constexpr int kServerAllIds = 4096;

// The serving probes' names, in the probe table's order (all, or those run by default), and a line of
// --probes' help for each ("NAME (what it checks),\n").
std::vector<std::string> serving_probe_names(bool defaults_only = false);
std::string serving_probes_help();

// The common options (judge/result.h: cases, allow_model_mismatch, fail_on_model_degeneration, rules)
// and the server's.
struct ServerCompareOptions : CommonCompareOptions {
  std::string url;                    // base URL, e.g. http://127.0.0.1:8080
  std::string api = "llama";            // an entry of the engine API table (subjects/server/engine_api.h)
  // sglang: the server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1, so its output log-probs are the
  // model's own, not taken at the sampling temperature (SGLang's default)
  bool sglang_original_logprobs = false;
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
  bool free_running = true;
  // Decode-path scoring of the free-running generation (judge/result.h DecodePathResult): the server's
  // distribution at each generated step against our reference over the engine's own sequence.
  bool decode_path = true;
  int64_t decode_steps = -1;  // score at most this many generated steps per case (-1: every step)
  // Serving probes run after each case's generation (docs/server.md "Serving probes"), by name
  // (serving_probe_names); the default: those the probe table runs by default.
  std::vector<std::string> probes = serving_probe_names(true);
  // Log-probs asked per position, at most the model's vocab_size (else InputError); 0: every id when
  // the vocabulary has at most kServerAllIds ids (the server's distribution is then complete, and
  // renormalised over the real ids as ours is), else 40.
  int topk = 0;
  net::HttpOptions http;
};

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress = nullptr);

}  // namespace degen
