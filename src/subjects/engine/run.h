// Our engine under test (subjects/engine.h), the parts it is made of: the run every part shares
// (EngineRun), the free-running generations (generation.cpp), the teacher-forced, isolated, consistency
// and MTP draft/verify passes (forced.cpp), the serving-state checks (serving.cpp), and their reasons
// (reasons.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "judge/result.h"
#include "subjects/engine.h"
#include "engine/generate.h"
#include "engine/serving.h"
#include "engine/spec_decode.h"

namespace degen::engine_subject {

constexpr int kModes = 2;

// What every step of one comparison of our engine shares: the record, the model, the tested engine,
// the tokenizer's masks and stop ids, the floor class, and the reference engine (made on first use).
struct EngineRun {
  const GoldenRecord& rec;
  const Model& model;
  const ModelConfig& cfg;
  const CompareOptions& opt;
  const BackendFactory& factory;
  int L;
  int64_t H, V;
  FloorClass fclass;
  int fc;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Engine> eng;
  MtpOptions mtp;
  ServingOptions so;                     // the serving mechanisms (engine/serving.h)
  std::unique_ptr<PrefixCache> cache;    // prefix_cache: shared by the run's generations
  bool observation_check = true;  // the next case runs the observed-equals-unobserved check
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::vector<int32_t> stops, ws_ids;
  std::optional<int32_t> think_end;
  std::unique_ptr<Backend> ref_be;
  std::unique_ptr<Engine> ref_eng;

  // Builds the tested engine (UntestableError: the factory cannot build the configuration, or MTP
  // drafts asked of a checkpoint without MTP weights) and reads the tokenizer's masks and stop ids.
  EngineRun(const GoldenRecord& rec_, const Model& model_, const Tokenizer* tok, const CompareOptions& opt_,
            const BackendFactory& factory_);

  // The reference, for golden continuations under a sampling the record does not hold.
  Engine& reference();

  GenerateOptions generate_options(const SamplingParams& sp, int max_new_tokens, bool ignore_stop, uint32_t first_case) const {
    GenerateOptions go;
    go.max_new_tokens = max_new_tokens;
    if (!ignore_stop) go.stop_ids = stops;
    go.sampling = sp;
    go.vocab_mask = maskp;
    go.first_case = first_case;
    return go;
  }
};


// Step 3 (run first, so batch=all can batch it): free-running generation of every selected case,
// one job per call, or with batch=all, runs of consecutive cases with equal settings.
void run_generations(EngineRun& run, const std::vector<size_t>& selected, std::vector<GenerationResult>& gens,
                     std::vector<bool>& gen_nonfinite);
// Steps 1 and 2 of each mode: teacher-forced (drift of every layer, logits and MTP logits against
// the record) and isolated (golden inputs injected).
void forced_and_isolated(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                         const std::vector<int32_t>& next, CaseResult& cr);
// Step 3b: the generation's own logits against a teacher-forced run over the same tokens.
void generation_consistency(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                            const std::vector<int32_t>& next, const CaseResult& cr, GenerationResult& gen);
// MTP draft/verify teacher-forced over the golden sequence (judge/result.h MtpForcedResult).
void mtp_forced_check(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr);
// The serving mechanisms the configuration turns on, each against plain processing (judge/result.h ServingCheck).
void serving_checks(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr);

// The GDN states (every rank's) of two states of the tested engine: the worst rel_l2 and the first
// layer (then part) over `limit`.
struct StateDiff {
  double err = 0;
  std::optional<int> layer;
  std::string part;
};
StateDiff gdn_state_diff(Backend& be, const ModelConfig& cfg, const SeqState& a, const SeqState& b, double limit);

// The first layer that breaks its rule (mode, layer) into cr.first_break.
void first_break(CaseResult& cr);
// The reasons of the teacher-forced and isolated steps, the consistency check, the MTP and serving
// checks into `bad`; a serving mechanism that did nothing in the case into `warn`.
void forced_reasons(const CaseResult& cr, const GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn);
// The free-running figures of a case: degeneration of both texts, first divergence and the golden's
// margin there, MTP acceptance.
void free_running_figures(const EngineRun& run, const GoldenCase& g, const CaseResult& cr, bool nonfinite, GenerationResult& gen);
// Their reasons (MTP equivalence, acceptance, model or engine) into `bad` and `warn`.
void free_running_reasons(const EngineRun& run, GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn);

}  // namespace degen::engine_subject
