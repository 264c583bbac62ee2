// Golden records (DESIGN.md §6): what the CPU reference does on a prompt suite, kept so that any
// other run (another backend, precision or toggle set) can be measured against it (judge/result.h).
//
// A record is a folder:
//   manifest.json      format and tool version, model and tokenizer fingerprints, the suite (with each
//                      case's settings), the generation and storage settings, per-layer noise floors
//                      (metrics.md §1) of two path classes or the reason they are absent (see
//                      FloorClass), and the SHA-256 and size of
//                      every data file; written last.
//   <case id>.safetensors, one per case (T = prompt + continuation tokens, K = top-K, H = hidden,
//                      P = stored positions, the first P of the sequence):
//     prompt            I32 [Tp]     prompt ids
//     continuation      I32 [Tc]     the reference's continuation (greedy unless the case samples)
//     topk_ids          I32 [T, K]   per position, the K most likely next ids (descending, lowest id on ties)
//     topk_logprobs     F32 [T, K]   their log-probabilities log q_i (fp64 log-softmax, padding masked)
//     lse               F32 [T]      log-sum-exp of the logits over the real vocabulary (the tokenizer's
//                                    ids): topk_logprobs = logit - lse (our comparisons, the sampler)
//     lse_pad           F32 [T]      lse_vocab - lse >= 0, where lse_vocab = the log-sum-exp over ALL
//                                    vocab_size rows of the LM head, padding rows included: what HF
//                                    transformers, llama.cpp and vLLM normalise by. An engine's
//                                    log-prob of id i is logit_i - lse_vocab = topk_logprobs - lse_pad
//                                    (docs/metrics.md, "Two normalisations"). Stored as the difference,
//                                    log1p(padding mass / real mass) in fp64, because it can be far
//                                    below one fp32 step of lse (1e-7 nats on the trained model, whose
//                                    lse ~ 20 has steps of 2e-6). Always written; 0 when every row is a
//                                    real id; NaN when a padding logit is not finite. Records made
//                                    before it lack it (readers: an empty vector).
//     embed             F32 [P, H]   token embeddings = the input of layer 0 (when layer 0 is stored)
//     l_out-L           F32 [P, H]   output of layer L (for every stored layer)
//     l_out_norm        F32 [L, T]   digest: L2 norm of every layer's output row at every position
//     mtp_topk_ids      I32 [T-1, K] models with MTP: the draft for position i+2 made from the hidden
//     mtp_topk_logprobs F32 [T-1, K] state at i and token i+1 (teacher-forced), top-K and log-sum-exp
//     mtp_lse           F32 [T-1]
//     mtp_lse_pad       F32 [T-1]    the MTP head's lse_pad
// The layer outputs come from ONE teacher-forced prefill over the whole sequence; the continuation
// from the generation loop (batch prefill of the prompt, then one decode step per token).
// Records are written into a temporary sibling folder that is renamed into place at the end, so a
// reader never sees a half-written record; every data file's checksum is in the manifest, so a
// truncated or edited file is detected when the record is opened.
// The manifest covers itself too: its field "manifest_sha256" is the SHA-256 (64 lower-case hex
// digits) of the manifest without that field, serialised canonically: nlohmann::json's compact
// dump() (no whitespace, object keys in byte order, numbers in shortest round-trip form, UTF-8 as
// is). Opening a record recomputes it and refuses a manifest whose content changed (an
// edited noise floor, setting, case or file checksum); reformatting alone (indentation) passes. It
// is a check against edits and corruption, not a signature: whoever edits on purpose can recompute
// it. Records written before it (format_version 1 without the field) are still read, unverified:
// GoldenRecord::manifest_checked() is false and compare prints a note.
// The files of a record are written by write_golden (this header, golden.cpp) through the record
// store (record_store.h); the manifest is the type Manifest (record_manifest.h); they are read by
// GoldenRecord (golden_record.h). This header includes those, the teacher-forced driver
// (forced_run.h) and the checkpoint digests (model/digests.h) for the files that use the writer with them.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/cases.h"
#include "record/floor_class.h"
#include "judge/forced_run.h"
#include "record/golden_record.h"
#include "judge/metrics.h"
#include "record/record_manifest.h"
#include "record/record_store.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/run_config.h"
#include "model/digests.h"
#include "model/model.h"

namespace degen {

class Tokenizer;

struct GoldenOptions {
  Precision precision = Precision::ref;  // ref (fp32) or fp64
  std::optional<int> gen_tokens;         // overrides every case's max_new_tokens
  std::string layers = "all";            // all | none | LIST of layers ("0,3,5-7", "linear", "full")
  std::string positions = "auto";        // auto | all | none | N (the first N positions of each case)
  int topk = 20;
  bool floors = true;                    // measure the noise floors (both classes)
  bool force = false;                    // replace an existing record
  bool restart = false;                  // discard the finished cases of an interrupted run instead of keeping them
  // Generate the continuations of consecutive cases with equal generation settings together (one
  // pass over the weights per step for all; as compare's batch=all). The rows of one matmul then
  // hold several sequences, which changes the last bits of the reference's sums (kFp32Reorder), so
  // a token at a near-tie can differ from one-at-a-time generation; recorded in the manifest.
  bool batch_all = false;
  std::string command;                   // how it was made, recorded in the manifest
  // The engine that makes the record (golden --config): the CPU at `precision` (default), or the
  // reference on the GPU, backend=cuda,precision=ref (fp32 activations, caches and state, weights as
  // stored; tp, gemm and graphs allowed). Faults only to show that the spot check refuses them: a
  // record is never written from a faulty reference.
  RunConfig reference;
  // The CPU spot check of a reference made on the GPU: for every case, the CPU reference recomputes
  // the first verify_positions positions with the record's own input injected into each of
  // verify_layers (isolated layer outputs) and the logits that follow; each must agree within the
  // fixed fp32-class limits (judge/result.h kFallbackRelL2 for each layer's rel_l2, kFallbackKld for the
  // largest KLD of a position); the logits the continuation was generated from must agree with the
  // record's teacher-forced ones (top-kSpotCheckTopK KLD within kFallbackKld) and a greedy
  // continuation must be their top-1 (kGreedyTieNats); else no record is written (exit 1). The result is
  // in the manifest (settings.verification). "none": not checked (recorded so).
  std::string verify_layers = "all";
  int verify_positions = 4;
  // The engine of the bf16 noise floors (golden --floors-config): the CPU's emulation of GPU storage
  // (precision=bf16, default), or the bf16 GPU path itself (backend=cuda; tp, gemm, graphs allowed),
  // whose layers the CPU's emulation then spot-checks at the verify layers and positions
  // (kFloorCheckK). floor_classes: both (default), bf16 or fp32 (the fp32 class runs the CPU at fp64,
  // the cost that dominates at 27B).
  RunConfig bf16_floors = [] {
    RunConfig r;
    r.precision = Precision::bf16;
    return r;
  }();
  std::string floor_classes = "both";
};

// The spot check of bf16 floors made on the GPU: the GPU's bf16 layer output may be at most
// kFloorCheckK times as far from the CPU's emulation as the emulation is from the record (the floor
// rule's k, judge/result.h CompareRules), plus kFloorCheckEps for layers the record holds exactly.
constexpr double kFloorCheckK = 3.0;
constexpr double kFloorCheckEps = 1e-12;

// The spot check's near-tie allowance for a greedy continuation: a generated token whose logit is
// within this many nats of the top-1 of the record's own logits passes. fp32 reorderings move a
// logit by ~1e-5 (1e-6 relative of |logit| <= 30 on the shipped models); 1e-3 allows 100 times that,
// while a decode-path fault (kv-off-by-one, conv-window-stuck) moves logits by far more.
constexpr double kGreedyTieNats = 1e-3;
// The ids per generation step the spot check compares (the record's default --topk). A KLD over the
// top-K alone is first order in the logit differences: a good GPU reference measures up to 1e-6
// nats on the shipped models (the decode kernels sum in other orders than the prefill ones), the
// decode-path faults 0.02 nats and more.
constexpr int kSpotCheckTopK = 20;


// The batch groups [begin, end) of the suite's cases: one per case, or with batch_all runs of
// consecutive cases with equal sampling, max_new_tokens and ignore_stop.
std::vector<std::pair<size_t, size_t>> golden_batch_groups(const Suite& suite, const GoldenOptions& opt);

// auto: all positions while a case's layer data stays under this many bytes, else the longest prefix that fits.
constexpr int64_t kAutoLayerBytesPerCase = 64ll << 20;
// The positions whose layer outputs a case of T tokens stores under --positions `policy` (validated).
int64_t golden_positions(const std::string& policy, int64_t T, int64_t per_position_bytes);

struct GoldenSummary {
  std::filesystem::path dir;
  int64_t bytes = 0;           // all files
  double seconds = 0;
  bool floors[2] = {false, false};  // measured, by FloorClass
  std::string floors_reason[2];     // why not
  std::vector<std::string> lines;   // one line per case for the CLI
  std::string verification;         // a GPU reference: what the CPU spot check found (one line), else empty
};

// The options `golden` refuses, each an InputError naming the option, what it takes and what was
// found: --precision, --topk, --gen-tokens, --positions, --config, --floors-config, --floor-classes,
// --verify-layers, --verify-positions, and the layer lists against the model. The one validation of
// the options: write_golden and plan_golden (`golden --plan`) both call it first.
void check_golden_options(const GoldenOptions& opt, const ModelConfig& cfg);

// Writes the record of `suite` for `model` into `out` (atomically). `factory` builds the reference
// backend and, for the floors, the precision=bf16 and the other high-precision ones; a class whose
// backend is untestable is recorded as absent with the reason. InputError on bad options, cases or
// an existing `out` without `force`.
GoldenSummary write_golden(const Model& model, const Tokenizer* tok, const Suite& suite, const std::filesystem::path& out,
                           const GoldenOptions& opt, const BackendFactory& factory, std::FILE* progress = nullptr);



// "all" | "none" | LIST -> [L] flags. InputError naming the option.
std::vector<bool> parse_layer_list(const std::string& text, const ModelConfig& cfg);

}  // namespace degen
