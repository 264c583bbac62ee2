// Localisation without toggles (DESIGN.md §7 steps 2-5 when there is nothing to bisect): a
// configuration is bad against a golden record, but no toggle or fault separates it from a good one,
// so the fault lies in what every configuration shares: the model (a converted, re-sharded or edited
// checkpoint) or the engine build. The golden record itself is the good side:
//  1. layer: with the golden input injected into every layer, the first layer whose output breaks its
//     floor rule (compare's isolated errors; every breaking layer is listed);
//  2. confirmation by patching: the same configuration, teacher-forced, with that layer's output
//     replaced by the record's: the logits must then agree with the record within the KLD rule, and
//     the error reaching the last layer must shrink (the patched run's drift of l_out-(L-1) below the
//     unpatched one's);
//  3. the model or the engine build: the record's own reference configuration (CPU, its precision) on
//     this checkpoint. When it breaks at that layer too, the checkpoint no longer reproduces the
//     record: with per-tensor digests in the record, the changed tensors say it is the model (none
//     changed: our reference build changed); without them, "the model or the engine build". When the
//     reference passes and the tested configuration does not, it is the engine build;
//  4. the operation: for the engine build, the first operation over its noise floor with the golden
//     input injected (subop.h, the tested path against the reference on this checkpoint); for the
//     model, the first operation in forward order that reads a changed tensor: with the golden input
//     injected every operation before it computes what the record's model computed, so it is the first
//     whose output differs (the reference on this checkpoint has nothing else to compare it with).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/result.h"
#include "subjects/engine.h"
#include "diag/subop.h"

namespace degen {

// The trace step (engine/trace.h) that first reads a checkpoint tensor, and its decoder layer (-1
// outside the decoder layers: embedding, final norm, LM head, MTP). nullopt for a name the model does
// not use.
struct TensorUse {
  int layer = -1;
  std::string step;
};
std::optional<TensorUse> tensor_first_use(const std::string& tensor, const ModelConfig& cfg);

struct PatchCheck {
  std::string case_id;
  int layer = -1;
  int64_t positions = 0;
  double kld_unpatched = 0, kld_patched = 0, kld_limit = 0;
  double drift_unpatched = 0, drift_patched = 0;  // rel_l2 of l_out-(L-1) against the record
  bool confirmed = false;
};

struct SharedLocalisation {
  CompareResult tested;                      // the bad configuration against the record
  std::vector<int> broken_layers;            // isolated errors over their rule, forward order
  int layer = -1;                            // the first of them (-1: none)
  std::string mode;                          // prefill | decode: where it broke first
  std::string case_id;
  double err = 0, limit = 0;
  std::optional<PatchCheck> patch;
  std::string reference;                     // the record's reference configuration
  std::optional<bool> reference_breaks;      // the reference on this checkpoint breaks at `layer`
  bool digests = false;                      // the record has per-tensor digests
  std::vector<std::string> changed_tensors;  // every tensor whose bytes differ from the record's model
  std::string cause;                         // "model" | "engine-build" | "model-or-engine-build"
  std::string cause_words;                   // one sentence for the verdict
  std::optional<std::string> op;             // trace step name
  std::string op_how;                        // "first-reader-of-changed-tensor" | "first-over-floor"
  std::optional<std::string> op_tensor;      // the changed tensor the op reads
  std::vector<SubopReport> subop;
  nlohmann::json to_json() const;
};

// Steps 1-4 above for `bad`, with compare options `base` (cases, decode mode, rules). `subop`: run the
// per-operation analysis for the engine-build case.
SharedLocalisation localise_shared(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                   const CompareOptions& base, const RunConfig& bad, const BackendFactory& factory,
                                   bool subop = true, std::FILE* progress = nullptr);

}  // namespace degen
