// eval: what a trained model does on one configuration of our engine (issue 17, DESIGN.md §11):
//   1. task accuracy on the model's held-out questions, greedy;
//   2. free-running degeneration of the long cases of a golden record (each case's own sampling,
//      512+ tokens): loop onset and seq_rep_4 per case, against the record's own continuation;
//   3. MTP: acceptance and tokens per verify step at mtp = 1..k, greedy, over the held-out prompts;
// then, for a configuration other than the reference, the same figures of the reference and the
// difference in points; and the fault table: every catalogue fault (at every layer of its kind and
// at one layer) on the long cases (degenerate? model-intrinsic? compare's verdict) and a subset of
// the questions (does the accuracy drop?).
//
// The held-out set (`heldout.json` in the model folder, tools/tiny_corpus.py writes it):
//   {"format": "degenbisect-heldout-1", "description": "...",
//    "questions": [{"id": "recall-00", "kind": "recall", "prompt": "...", "thinking": true,
//                   "expect": ["Oslo"]}, ...]}
// A question is one user turn rendered with the model's chat template. Its answer is the text after
// </think> (the whole text without thinking), up to the end-of-turn token. It is right when every
// `expect` string occurs in the answer as a whole word sequence (bounded by characters that are not
// letters or digits), and an expected number is also the answer's LAST number (so that "2+2 = 5."
// is wrong although it contains the 2 of the question).
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/golden_record.h"
#include "judge/metrics.h"
#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "model/model.h"

namespace degen {

class Tokenizer;

constexpr const char* kHeldoutFormat = "degenbisect-heldout-1";

struct HeldoutQuestion {
  std::string id;                   // [A-Za-z0-9._-]{1,64}, unique
  std::string kind;                 // free-form group name ("recall", "arith", ...)
  std::string prompt;               // the user turn
  std::string system;               // optional system message
  bool thinking = true;             // enable_thinking of the chat template
  std::vector<std::string> expect;  // non-empty strings
};

struct HeldoutSet {
  std::string description, origin, sha256;
  std::vector<HeldoutQuestion> questions;
};

// InputError naming the file, the question and the field on any problem (unknown keys included).
HeldoutSet load_heldout(const std::filesystem::path& path);
HeldoutSet parse_heldout(const std::string& text, const std::string& origin);

// The answer rule above. `answer` is the text after </think>, end-of-turn removed.
bool answer_matches(const std::string& answer, const std::vector<std::string>& expect);
// The answer of a generation: text after "</think>" (or all of it when the prompt closed the think
// block), cut at the first "<|im_end|>" / "<|endoftext|>", trimmed.
std::string answer_of(const std::string& generated, bool prompt_opened_think);

struct QuestionResult {
  std::string id, kind, answer, stop_reason;
  bool correct = false;
  int64_t tokens = 0;
  std::vector<int32_t> ids;
};

struct AccuracyResult {
  int64_t n = 0, correct = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_kind;  // kind -> (correct, n)
  std::vector<QuestionResult> rows;
  double accuracy() const { return n ? double(correct) / double(n) : 0.0; }
  nlohmann::json to_json(bool with_rows) const;
};

struct MtpFigure {
  int drafts = 0;
  metrics::SpecDecode spec;     // accumulated over the questions
  int64_t differ = 0;           // questions whose output differs from mtp = 0 (0 on the CPU reference)
  nlohmann::json to_json() const;
};

struct LongCaseResult {
  std::string id, sampling;         // sampling "" = greedy
  metrics::Degeneration degen, golden_degen;
  bool ok = false;              // no loop onset and seq_rep_4 <= the limit
  nlohmann::json to_json() const;
};

// n and ok count the sampled cases only (the criterion is about output under the model
// card's sampling); greedy cases are listed and counted apart: a model this small may loop greedily
// by itself, which compare calls model-intrinsic.
struct LongResult {
  std::string golden;
  double max_seq_rep_4 = 0.1;
  int64_t n = 0, ok = 0, degenerate = 0, golden_degenerate = 0;  // sampled cases
  int64_t greedy = 0, greedy_degenerate = 0, greedy_golden_degenerate = 0;
  std::vector<LongCaseResult> rows;
  double ok_fraction() const { return n ? double(ok) / double(n) : 0.0; }
  nlohmann::json to_json() const;
};

struct EvalFigures {
  std::string config;
  AccuracyResult accuracy;
  std::vector<MtpFigure> mtp;          // drafts 1..k (empty when the model has no MTP head)
  std::optional<LongResult> long_cases;
  double seconds = 0;
  nlohmann::json to_json(bool with_rows) const;
};

struct EvalOptions {
  RunConfig config;                  // the tested configuration (sampling toggles are not allowed)
  size_t limit = 0;                  // held-out questions: 0 = all, else select_questions(set, limit)
  int max_new_tokens = 256;          // per question (a 41-number count with its thinking takes ~200)
  int mtp_max = 3;                   // MTP figures at 1..mtp_max drafts (0: none)
  double max_seq_rep_4 = 0.1;        // long-case criterion (issue 17)
  std::vector<std::string> cases;    // long cases: only these ids (empty: all of the record)
};

// The questions eval runs: all, or with limit = N the first ceil(N * share) of each kind in file
// order (every kind kept, shares as in the file), N in total at most.
std::vector<HeldoutQuestion> select_questions(const HeldoutSet& set, size_t limit);

// Figures 1-3 for one configuration. `rec` (long cases) may be null. UntestableError (exit 125)
// when the factory cannot build the configuration; InputError for a record of another model.
EvalFigures evaluate_model(const Model& model, const Tokenizer& tok, const std::vector<HeldoutQuestion>& questions,
                           const GoldenRecord* rec, const EvalOptions& opt, const BackendFactory& factory,
                           std::FILE* progress = nullptr);

// ---- the fault table ----
struct FaultRow {
  std::string fault, scope, config;  // scope: "all GDN layers", "layer 4", "model", ...
  bool applicable = true;
  std::string reason;                // why not applicable / untestable
  // long cases (compare's free-running runs)
  int64_t cases = 0, degenerate = 0, golden_degenerate = 0, empty = 0, looping = 0;
  double mean_seq_rep_4 = 0;
  std::optional<int64_t> first_loop_onset;
  std::string rules;                 // rules that fired, e.g. "tail_loop,seq_rep_4"
  // questions
  int64_t questions = 0, correct = 0;
  // compare
  std::string verdict;               // good / bad / model-intrinsic / untestable
  int exit_code = 0;
  std::optional<int> first_layer;    // compare's first layer over its floor
  std::string example;               // the start of one degenerate tested text (or of the first case)
  nlohmann::json to_json() const;
};

struct FaultTableOptions {
  RunConfig base;                    // every row is base + the fault (tp faults add tp=2, MTP faults mtp=2)
  size_t questions = 40;             // held-out subset per row (select_questions)
  std::vector<std::string> cases;    // long cases of the record (empty: all)
  std::vector<std::string> only;     // only these faults (empty: the whole catalogue)
  int max_new_tokens = 256;
};

// The rows for every catalogue fault: "every layer of its kind" and "one layer" (a GDN layer after
// the first attention layer, the last attention layer, the middle layer) for layer faults, one
// row for model-level faults; faults the model cannot host are rows with applicable = false.
std::vector<FaultRow> fault_table(const Model& model, const Tokenizer& tok, const HeldoutSet& set,
                                  const GoldenRecord& rec, const FaultTableOptions& opt, const BackendFactory& factory,
                                  std::FILE* progress = nullptr);

// Text for the CLI.
std::string format_eval(const EvalFigures& f, const EvalFigures* reference);
std::string format_fault_table(const std::vector<FaultRow>& rows, double reference_accuracy);

}  // namespace degen
