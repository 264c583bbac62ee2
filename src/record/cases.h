// Prompt suites (cases/*.json): the fixed prompts golden records and compare runs are made of.
//
// Format (every key is checked; an unknown key is an error, so a typo never silently does nothing):
//   {
//     "suite": "smoke",                         // name, [A-Za-z0-9._-]+
//     "description": "...",                     // optional
//     "defaults": {"max_new_tokens": 16, "thinking": true, "sampling": "temp=0.7,seed=1"},  // optional
//     "cases": [
//       {"id": "two-plus-two", "prompt": "What is 2+2?", "thinking": false, "system": "Be brief."},
//       {"id": "raw-63", "raw": "text sent to the tokenizer as is", "max_new_tokens": 4},
//       {"id": "ids", "tokens": [306, 878, 736]},
//       {"id": "sampled", "prompt": "Tell a story.", "sampling": {"temp": 0.7, "top_p": 0.8, "seed": 3}},
//       {"id": "long", "raw": "Once", "max_new_tokens": 600, "ignore_stop": true}
//     ]
//   }
// Exactly one of `prompt` (one user turn rendered with the model's chat template; `thinking` on by
// default, optional `system`), `raw` (text tokenized as is, special tokens recognised) or `tokens`
// (ids). `max_new_tokens` (default 32, or the suite default) is the generation budget; `ignore_stop`
// keeps generating past stop tokens (for long-decode cases). `sampling` overrides the sampling
// toggles of the tested configuration for this case (RunConfig keys temp, top_p, top_k, min_p,
// rep_pen, presence_pen, seed, as a "k=v,..." string or a JSON object); without it a case is greedy
// unless the configuration samples.
// Errors are InputError naming the file, the case id and the field (invalid UTF-8: also the byte
// offset inside the field).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/config.h"

namespace degen {

class Tokenizer;

enum class CaseInput : uint8_t { prompt, raw, tokens };
const char* case_input_name(CaseInput k);  // "prompt", "raw", "tokens"

struct Case {
  std::string id;                  // [A-Za-z0-9._-]{1,64}, unique in the suite (also a file name)
  std::string description;
  CaseInput input = CaseInput::prompt;
  std::string text;                // prompt: the user message; raw: the text
  std::string system;              // prompt only: system message ("" = none)
  bool thinking = true;            // prompt only: enable_thinking of the chat template
  std::vector<int32_t> tokens;     // tokens only
  int max_new_tokens = 32;
  bool ignore_stop = false;        // generate the whole budget, stop tokens included
  // The case's sampling overrides: the fields that differ from the greedy defaults (SamplingParams{})
  // replace the configuration's (case_sampling); sampling_str prints them ("" = none).
  SamplingParams sampling;
};

struct Suite {
  std::string name;
  std::string description;
  std::vector<Case> cases;
  std::string origin;  // file it was read from (for messages)
  std::string sha256;  // of the file's bytes
};

// Limits the loader enforces.
constexpr int kMaxNewTokensLimit = 1 << 20;
constexpr size_t kMaxCaseIdLength = 64;

// Reads and validates a suite file. InputError naming file, case and field on any problem.
Suite load_suite(const std::filesystem::path& path);
// Same from text; `origin` names the source in messages.
Suite parse_suite(const std::string& text, const std::string& origin);

// A case's prompt for one model.
struct CasePrompt {
  std::vector<int32_t> ids;
  bool opened_think = false;  // the prompt ends inside an open <think> block (qwen35 family, thinking on)
};
// Renders (prompt: chat template of cfg.model_type) and encodes the case, or takes its ids, and checks
// them against the model: not empty, every id < vocab_size, within max_position_embeddings.
// tok may be null only for `tokens` cases. InputError naming the case otherwise.
CasePrompt encode_case(const Case& c, const Tokenizer* tok, const ModelConfig& cfg);

// `base` with the case's sampling overrides applied (engine/toggles.h with_sampling_of).
SamplingParams case_sampling(const Case& c, const SamplingParams& base);
// Canonical "k=v,..." of the sampling fields that differ from greedy defaults ("" when none).
std::string sampling_str(const SamplingParams& s);

}  // namespace degen
