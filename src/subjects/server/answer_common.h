// The pieces of answer parsing that every engine API shares (answers.h): fields, token ids,
// log-probs, the listed mass, stop reasons, id lists and the per-step lists of a generation. Each
// throws InputError naming the URL and what was expected.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "subjects/server/answers.h"
#include "util/error.h"

namespace degen::server {

using json = nlohmann::json;
using server_answer::Generated;
using server_answer::TopList;

std::string excerpt_of(const json& j);
// A field of a server answer, or InputError naming the URL and what was expected.
const json& field(const json& j, const char* key, const std::string& url, const char* what);
// A token id as the server wrote it: a non-negative integer (one beyond int64 reads as INT64_MAX).
int64_t token_id(const json& v, const std::string& url);
// A log-probability: a number <= kMaxServerLogprob, or null (-inf).
double logprob_value(const json& l, const std::string& url);
// The listed probabilities (each id once) sum to at most 1 + kMaxServerMassExcess.
void check_mass(const TopList& top, const std::string& url);
// The count an answer states at the path `keys` (timings.cache_n, meta_info.cached_tokens, ...):
// nullopt where an object on the way, or the last key, is absent (and where the last value is null,
// when null_is_absent); InputError naming the dotted path for anything but a non-negative integer.
std::optional<int64_t> optional_count(const json& j, std::initializer_list<const char*> keys, const std::string& url,
                                      bool null_is_absent);
// A short string field (stop_type, finish_reason): "?" when absent or null, InputError for another type.
std::string reason_field(const json& j, const char* key, const std::string& url);
// [{"id": N, "logprob": x}, ...] (llama-server, both APIs).
TopList top_from_id_list(const json& top, const std::string& url);
// The server's speculative-decoding counts (llama-server: timings.draft_n, timings.draft_n_accepted),
// where stated: non-negative integers, accepted <= drafted, or InputError.
void speculation_counts(const json& r, const std::string& url, Generated& g);

// One distribution per generated token from `entries` (the list under `name`): as many entries as
// tokens, each naming the token it was generated for ('id'), its top-K from `top_of` (an empty list:
// none stated at that step).
template <class TopOf>
std::vector<TopList> step_lists(const json& entries, const std::vector<int64_t>& tokens, const std::string& url, const char* name,
                                TopOf top_of) {
  if (entries.size() != tokens.size())
    input_error("malformed response from ", url, ": '", name, "' has ", entries.size(), " entries for ", tokens.size(),
                " generated tokens (expected one per token)");
  std::vector<TopList> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries.at(i);
    const int64_t id = token_id(field(e, "id", url, "the token the entry is for"), url);
    if (id != tokens[i])
      input_error("malformed response from ", url, ": ", name, "[", i, "] is for token ", id, " but the server generated ", tokens[i],
                  " at that step: the log-probs are for another token than the one generated");
    const json& top = top_of(e);
    if (!top.is_array()) input_error("malformed response from ", url, ": ", name, "[", i, "].top_logprobs is not a list");
    out.push_back(top.empty() ? TopList{} : top_from_id_list(top, url));
  }
  return out;
}

}  // namespace degen::server
