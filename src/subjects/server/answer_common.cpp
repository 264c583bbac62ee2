// The answer parsing every engine API shares (answer_common.h), and the answers of the endpoints
// several APIs have: POST /detokenize, GET /v1/models.
#include "subjects/server/answer_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/json_input.h"

namespace degen::server {

std::string excerpt_of(const json& j) { return json_excerpt(j, 200); }

std::optional<int64_t> optional_count(const json& j, std::initializer_list<const char*> keys, const std::string& url,
                                      bool null_is_absent) {
  const json* v = &j;
  std::string path;
  for (const char* key : keys) {
    if (!v->is_object() || !v->contains(key)) return std::nullopt;
    v = &v->at(key);
    path += (path.empty() ? "" : ".") + std::string(key);
  }
  if (v->is_null() && null_is_absent) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() < 0)
    input_error("malformed response from ", url, ": ", path, " is not a count: ", excerpt_of(*v));
  return v->get<int64_t>();
}

// A field of a server answer, or InputError naming the URL and what was expected.
const json& field(const json& j, const char* key, const std::string& url, const char* what) {
  if (!j.is_object() || !j.contains(key))
    input_error("malformed response from ", url, ": expected ", what, " under '", key, "', got ", excerpt_of(j));
  return j.at(key);
}

// A token id as the server wrote it: a non-negative integer (one beyond int64 reads as INT64_MAX:
// beyond any vocabulary all the same).
int64_t token_id(const json& v, const std::string& url) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                                          : v.get<int64_t>();
  if (!v.is_number_integer()) input_error("malformed response from ", url, ": a token id that is not an integer: ", excerpt_of(v));
  input_error("malformed response from ", url, ": a negative token id: ", v.get<int64_t>());
}

// A log-probability: a number <= kMaxServerLogprob, or null (-inf).
double logprob_value(const json& l, const std::string& url) {
  using server_answer::kMaxServerLogprob;
  if (l.is_null()) return -std::numeric_limits<double>::infinity();  // llama-server writes -inf as null
  if (!l.is_number()) input_error("malformed response from ", url, ": a log-probability that is not a number: ", excerpt_of(l));
  const double v = l.get<double>();
  if (std::isnan(v) || v > kMaxServerLogprob)
    input_error("malformed response from ", url, ": a log-probability of ", v, ", expected a number <= 0 (", kMaxServerLogprob,
                " allowed for rounding) or null");
  return v;
}

// The listed probabilities (each id once) sum to at most 1 + kMaxServerMassExcess.
void check_mass(const TopList& top, const std::string& url) {
  TopList by_id = top;
  std::stable_sort(by_id.begin(), by_id.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  double mass = 0;
  size_t distinct = 0;
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (i > 0 && by_id[i].first == by_id[i - 1].first) continue;  // listed twice: the first counts, as in topk_as_logits
    ++distinct;
    mass += std::exp(by_id[i].second);
  }
  if (mass > 1 + server_answer::kMaxServerMassExcess)
    input_error("malformed response from ", url, ": the ", distinct, " listed probabilities sum to ", mass,
                ", expected at most 1: not a probability distribution");
}

// A short string field (stop_type, finish_reason): "?" when absent or null, InputError for another type.
std::string reason_field(const json& j, const char* key, const std::string& url) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return "?";
  const json& v = j.at(key);
  if (!v.is_string()) input_error("malformed response from ", url, ": '", key, "' is not a string: ", excerpt_of(v));
  std::string r = v.get<std::string>();
  if (r.size() > 40) {  // cut on a character boundary: the reason goes into --json, whose dump needs UTF-8
    size_t n = 40;
    while (n > 0 && (static_cast<unsigned char>(r[n]) & 0xC0) == 0x80) --n;
    r.resize(n);
  }
  return r;
}

// [{"id": N, "logprob": x}, ...] (llama-server, both APIs).
TopList top_from_id_list(const json& top, const std::string& url) {
  if (!top.is_array() || top.empty()) input_error("malformed response from ", url, ": expected a non-empty list of top log-probs");
  TopList out;
  for (const json& e : top)
    out.emplace_back(token_id(field(e, "id", url, "a token id"), url), logprob_value(field(e, "logprob", url, "a log-probability"), url));
  check_mass(out, url);
  return out;
}


// The server's speculative-decoding counts (llama-server: timings.draft_n, timings.draft_n_accepted),
// where stated: non-negative integers, accepted <= drafted, or InputError.
void speculation_counts(const json& r, const std::string& url, Generated& g) {
  if (!r.is_object() || !r.contains("timings") || !r.at("timings").is_object()) return;
  const json& t = r.at("timings");
  auto count = [&](const char* key) -> std::optional<int64_t> {
    if (!t.contains(key) || t.at(key).is_null()) return std::nullopt;
    const json& v = t.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      input_error("malformed response from ", url, ": timings.", key, " is not a count: ", excerpt_of(v));
    return v.get<int64_t>();
  };
  g.draft_n = count("draft_n");
  g.draft_accepted = count("draft_n_accepted");
  if (g.draft_n && g.draft_accepted && *g.draft_accepted > *g.draft_n)
    input_error("malformed response from ", url, ": timings.draft_n_accepted ", *g.draft_accepted, " > timings.draft_n ", *g.draft_n);
}

}  // namespace degen::server

namespace degen::server_answer {

using server::excerpt_of;
using json = nlohmann::json;
using server::field;

std::vector<std::string> served_models(const json& r, const std::string& url) {
  const json& d = field(r, "data", url, "the served models (an OpenAI model list)");
  if (!d.is_array()) input_error("malformed response from ", url, ": 'data' is not a list: ", excerpt_of(d));
  std::vector<std::string> out;
  for (const json& e : d) {
    const json& id = field(e, "id", url, "a served model's name");
    if (!id.is_string()) input_error("malformed response from ", url, ": a model id that is not a string: ", excerpt_of(id));
    out.push_back(id.get<std::string>());
  }
  return out;
}

std::string detokenized(const json& r, const std::string& url) {
  const char* key = !r.is_object() || r.contains("content") ? "content" : r.contains("prompt") ? "prompt" : r.contains("text") ? "text" : "content";
  const json& c = field(r, key, url, "the text of the ids");
  if (!c.is_string()) input_error("malformed response from ", url, ": '", key, "' is not a string: ", excerpt_of(c));
  return c.get<std::string>();
}


}  // namespace degen::server_answer
