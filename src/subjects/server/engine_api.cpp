// The engine API table (engine_api.h): answer bounds, the entries' shared defaults, the registry.
#include "subjects/server/engine_api.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>

#include "model/tokenizer.h"
#include "util/error.h"

namespace degen::server {

namespace {
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
// kMaxAnswerBytes (engine_api.h): 64 MiB of text, at most ~1.3 GB parsed at the 20x above. Every id
// of a 248,320-id vocabulary at one position is about 40 MB (the real Qwen3.5 tokenizer's pieces
// average 6.7 bytes); a request that would need more is refused before it is sent (InputError, naming
// --topk), and SGLang's teacher-forced sequences go in requests that each stay within it.
// Without a tokenizer the pieces' lengths are unknown: taken as this many bytes each.
constexpr uint64_t kUnknownPieceBytes = 256;
}  // namespace

void ApiContext::measure_pieces(const Tokenizer* tok) {
  std::vector<uint64_t> piece(static_cast<size_t>(V), kUnknownPieceBytes);
  if (tok)
    for (int64_t id = 0; id < V; ++id)
      piece[static_cast<size_t>(id)] = id < tok->vocab_end() && tok->is_defined(static_cast<int32_t>(id))
                                           ? tok->token_bytes(static_cast<int32_t>(id)).size()
                                           : 16;  // a padding row: the server names it with a short filler
  std::sort(piece.begin(), piece.end(), std::greater<>());
  piece_max = piece.empty() ? 0 : piece.front();
  listed_bytes.assign(piece.size() + 1, 0);
  for (size_t k = 0; k < piece.size(); ++k) listed_bytes[k + 1] = listed_bytes[k] + kListedIdBytes + 10 * piece[k];
}

uint64_t ApiContext::answer_bytes(int64_t tokens, int64_t listings, int ids) const {
  const uint64_t k = static_cast<uint64_t>(std::clamp<int64_t>(ids, 0, static_cast<int64_t>(listed_bytes.size()) - 1));
  return kAnswerFixedBytes + static_cast<uint64_t>(std::max<int64_t>(tokens, 0)) * (kTokenBytes + 18 * piece_max) +
         static_cast<uint64_t>(std::max<int64_t>(listings, 0)) * listed_bytes[k];
}

net::HttpOptions ApiContext::cap(int64_t tokens, int64_t listings, int ids) const {
  const uint64_t bytes = answer_bytes(tokens, listings, ids);
  if (bytes > kMaxAnswerBytes)
    input_error("compare --server: a correct answer to a request for ", ids, " log-probs at each of ", listings, " positions (",
                tokens, " tokens) can take up to ", bytes >> 20, " MiB, more than the ", kMaxAnswerBytes >> 20,
                " MiB one answer may hold; ask for fewer ids (--topk)");
  net::HttpOptions h = http;
  h.max_body_bytes = static_cast<size_t>(bytes);
  return h;
}

net::HttpOptions ApiContext::generation_cap(int64_t prompt, int64_t budget, int ids) const {
  return cap(prompt + budget, ids > 0 ? budget : 0, ids);
}

json EngineApi::detokenize_request(const ApiContext& c, const std::vector<int32_t>& ids) const {
  json body = {{"tokens", ids}};
  if (!c.served_model.empty()) body["model"] = c.served_model;
  return body;
}

Generated EngineApi::generate(const ApiContext& c, const json& req, int64_t prompt, int64_t budget) const {
  const std::string u = url(c);
  return read_generation(c, net::post_json(u, req, c.generation_cap(prompt, budget, generation_ids(c))), u);
}

BatchShape EngineApi::batch_shape(const ApiContext&) const {
  BatchShape s;
  s.not_applicable = cat("with --api ", caps().name, " the server's slots are not known (llama API: /props total_slots)");
  return s;
}

Generated EngineApi::together(const ApiContext&, const json&, const std::vector<json>&, int64_t, int64_t) const {
  throw std::logic_error("EngineApi::together: the API sends no sequences together (batch_shape)");
}

Generated EngineApi::concurrently(const ApiContext& c, const json& case_req, const std::vector<json>& others, int64_t prompt,
                                   int64_t budget) const {
  const std::string u = url(c);
  std::vector<json> reqs{case_req};
  reqs.insert(reqs.end(), others.begin(), others.end());
  std::vector<json> answers(reqs.size());
  std::vector<std::exception_ptr> errors(reqs.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < reqs.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          answers[i] = net::post_json(u, reqs[i], c.generation_cap(prompt, budget, i == 0 ? generation_ids(c) : 0));
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return read_generation(c, answers[0], u);
}

const std::vector<const EngineApi*>& engine_apis() {
  static const std::vector<const EngineApi*> table = {&llama_api(), &openai_api(), &sglang_api(), &vllm_api()};
  return table;
}

const EngineApi& find_api(const std::string& name) {
  const std::vector<const EngineApi*>& t = engine_apis();
  for (const EngineApi* a : t)
    if (name == a->caps().name) return *a;
  std::string expected;
  for (size_t i = 0; i < t.size(); ++i)
    expected += cat(i == 0 ? "" : i + 1 == t.size() ? " or " : ", ", "'", t[i]->caps().name, "' (", t[i]->caps().summary, ")");
  input_error("compare --server: API '", name, "' is unknown; expected ", expected);
}

std::vector<std::string> api_names() {
  std::vector<std::string> out;
  for (const EngineApi* a : engine_apis()) out.emplace_back(a->caps().name);
  return out;
}

std::string apis_help() {
  const std::vector<const EngineApi*>& t = engine_apis();
  std::string out;
  for (size_t i = 0; i < t.size(); ++i)
    out += cat(i == 0 ? "" : i + 1 == t.size() ? "\nor " : ",\n", t[i]->caps().name, " (", t[i]->caps().help, ")");
  return out;
}

}  // namespace degen::server
