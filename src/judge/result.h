// compare: measure one configuration (backend, precision, toggles) against a golden record, per case
// (DESIGN.md §7 steps 1, 2 and 6; metrics.md):
//  1. teacher-forced over the golden sequence (prompt + golden continuation), in prefill mode (one
//     forward call) and in decode mode (one token per call): per-layer drift of l_out-L, per-position
//     KLD / top-1 / Δp against the stored top-K, with the llama.cpp-style summary; MTP drafts too;
//  2. isolated layer errors: the same runs with every layer's input replaced by the golden one
//     (Trace replaces l_in-L), err_L = rel_l2 of l_out-L, floor_ratio = err_L / floor_L and the first
//     layer that breaks the floor rule (the prime suspect);
//  3. free-running generation under the configuration (and the case's sampling): repetition
//     metrics, loop onset, the degenerate verdict, first divergence from the golden continuation,
//     and model-or-engine (the golden run under the same prompt and sampling degenerates too?).
// A case is bad when a value is non-finite, a layer breaks its floor rule, the mean KLD breaks its
// rule (teacher-forced, MTP drafts, or the free-running logits against the teacher-forced ones over
// the same tokens), the generation degenerates where the golden does not, or (mtp > 0, greedy, fp32 class)
// greedy output with MTP differs from the golden output without it (mtp_equiv, exact on the CPU);
// the suite verdict is the worst case.
//
// Thresholds. The configuration picks its floor class (golden.h FloorClass: fp32 for the CPU at
// ref/fp64 without storage or attention toggles, bf16 otherwise). With that class's floors in the
// record: layer L passes when err_L <= k·floor_L + eps (k = 3), and the mean KLD passes when
// kld <= k·kld_floor + eps. A record without floors of that class (made with --no-floors, or before
// the bf16 emulation existed) falls back to FIXED relative limits, printed as such: isolated
// rel_l2 <= kFallbackRelL2 and mean KLD <= kFallbackKld. These suit fp32-class paths only (fp32
// reorderings, fp64): a bf16 path's honest error (~5e-3) fails them.
#pragma once
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/floor_class.h"
#include "judge/forced_run.h"
#include "record/golden_record.h"
#include "judge/metrics.h"
#include "judge/observation.h"
#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "model/model.h"

namespace degen {

class Tokenizer;

// Fallback limits for records without noise floors (see above). 1e-4 rel_l2: fp32 reorderings
// measure <= 1e-6 on the tiny models (tests/tolerances.h kFp32Reorder allows 1e-5), bf16 storage
// rounding alone is 2^-9 ≈ 2e-3 per element. 1e-4 nats: fp32 paths give ~1e-10, a 5 % weight change
// in one layer of a tiny model ~1e-3.
constexpr double kFallbackRelL2 = 1e-4;
constexpr double kFallbackKld = 1e-4;

struct CompareRules {
  metrics::FloorRule layer{3.0, 1e-12};  // isolated rel_l2 against floor_L
  metrics::FloorRule kld{3.0, 1e-9};     // mean kld_topk against the record's kld floor (eps: fp32
                                         // round-off of the stored log-probs and decode-path reordering, ~1e-11)
  // compare --dump's step localisation: the floor of a step is the known-good run's error there, but
  // at least this rel_l2. Where the known-good run computes a step exactly as the reference does (the
  // first norm of the fp64 run rounds to the reference's fp32 values), its error is 0, while another
  // fp32 engine that only sums in another order differs by a few fp32 roundings (2^-24 each):
  // llama.cpp's attn_norm-0 on the trained model, 5.3e-8 to 6.1e-8. 2^-22 = 2.4e-7 allows four.
  double step_floor_min = 0x1p-22;
  double fallback_rel_l2 = kFallbackRelL2;
  double fallback_kld = kFallbackKld;
  // compare --server's prefix-cache probe: the largest per-step KLD between a server's warm and cold
  // answers. Measured, not derived (our engine has no prefix cache to measure a floor with yet): a
  // clean llama-server 0.3.36 (f32 caches, flash attention off, trained model, 7 smoke cases) differs
  // from itself warm vs cold by up to 1.2e-7 nats (restoring a context checkpoint and re-evaluating the
  // prompt's last 4 tokens); the prefix bug of tests/llama/serving-state-bugs.patch by 0.04 to 13 nats
  // at step 0. 1e-5 sits 80x above the first and 4000x below the second.
  double probe_kld = 1e-5;
  // The serving-state check's limit on a GDN state's rel_l2 against plain processing of the same
  // tokens, by floor class ([FloorClass::bf16], [FloorClass::fp32]); see ServingCheck. fp32: the
  // mechanisms are fp32 reorderings of the same sums, measured 2.9e-7 to 4.9e-7 on the trained model
  // (chunk, slot, snapshot; 2026-12-07), 200x below; the faults of the mechanisms move a state by 0.9 to
  // 2.2. bf16 (indicative, names the layer only): measured 1.1e-2 to 2.5e-2 on the trained model and
  // tiny-qwen35 (cpu precision=bf16; backend=cuda on the emulator), but up to 0.5 on the random MoE
  // presets with ssm_dtype=bf16, whose routing flips amplify a rounding: there it can name a layer
  // although nothing is wrong.
  double serving_state[2] = {0.1, 1e-4};
  // compare --server with a partial listing: a KLD within its limit is judged only when the server's
  // ids carry at least this share of the record's stored mass (mean over a case's positions or scored
  // steps); below it the check is untestable (125), not good. The listing's KLD is a lower bound that
  // sees about that share of independent logit noise (metrics::compare_listing; test_metrics measures
  // it over flat and peaked distributions), so at one half a deviation of 2k times the floor still shows;
  // a KLD over the limit is bad whatever the share (a lower bound over a limit is over it).
  double min_resolved = 0.5;
  metrics::DegenRules degen;
};

// The options every comparison shares (our engine, a dump, a server): which cases, whether a record of
// another checkpoint may be compared, whether model-intrinsic degeneration fails, and the rules the
// figures are judged by. `degenbisect compare` builds them once (src/cli/cmd_compare.cpp); each
// subject's options extend them (CompareOptions, DumpCompareOptions, ServerCompareOptions).
struct CommonCompareOptions {
  std::vector<std::string> cases;         // only these case ids (empty = all)
  bool allow_model_mismatch = false;      // compare against a record made for another checkpoint
  bool fail_on_model_degeneration = false;  // model-intrinsic degeneration counts as a failure (exit 1)
  CompareRules rules;
};


// One layer of one case. Index [m] is the ForcedMode (0 prefill, 1 decode).
struct LayerRow {
  int layer = 0;
  char kind = 'G';                                // G = Gated DeltaNet, A = attention
  std::optional<metrics::TensorError> drift[2];   // teacher-forced l_out-L vs golden
  std::optional<metrics::TensorError> iso[2];     // golden inputs injected
  std::optional<double> floor[2];                 // floor_L from the record
  std::optional<double> limit[2];                 // the rel_l2 the layer may reach (k·floor + eps, or fallback)
  std::optional<double> floor_ratio[2];
  std::optional<double> drift_norm[2];            // digest: rel error of the per-position output norms
  bool pass[2] = {true, true};
};

struct LogitsResult {
  metrics::LogitSummary summary;
  std::vector<double> kld;             // per position
  std::vector<uint8_t> top1_agree;     // per position
  double mean_kld = 0;
  double limit = 0;                    // the mean KLD may reach
  std::optional<double> floor;
  bool pass = true;
  int64_t nonfinite = 0;               // positions with non-finite test logits
  // Another engine's log-probs (compare --server): mean of (engine log-prob - record log-prob) over
  // the record's top-K ids the engine listed, the record's taken in the engine's normalisation (over
  // all vocab_size rows: topk_logprobs - lse_pad, docs/metrics.md "Two normalisations"); ~0 for an
  // engine that computes what the reference does. logprob_offset_vocab = false: the record has no
  // lse_pad (older records), both taken as they are, so a constant -lse_pad remains in it.
  std::optional<double> logprob_offset;
  bool logprob_offset_vocab = true;
  // Another engine's listings (compare --server): the mean over positions of the share of the record's
  // stored mass at ids the engine listed (metrics::compare_listing); 1 when it listed every stored id.
  std::optional<double> resolved;
};

// compare --server: the engine's decode path, scored where it generates. The server states its
// distribution at each generated step (llama n_probs, OpenAI logprobs); our reference runs
// teacher-forced over the engine's own sequence (its prompt and what it generated) and gives the
// distribution it should have had there. Each step's KLD is judged against a per-step limit:
// k x the largest per-step KLD of the floor class's engine (fp32: the fp64 reference; bf16: the bf16
// emulation; a measured class: its configuration) run over the same sequence the way a server decodes
// it (the prompt in one call, then one token per call), + eps (CompareRules::kld). The first step over
// it is the case's first bad decode step; the engine's own prefill of the same tokens is then asked for
// (one request) to tell the state carried across steps from the layer math. docs/server.md.
struct DecodePathResult {
  int64_t steps = 0;                // tokens generated
  int64_t stated = 0;               // steps the server gave a distribution for
  int64_t scored = 0;               // steps scored (stated, within --decode-steps)
  std::vector<double> kld;          // per generated step, KLD(reference || engine); NaN: not scored
  std::vector<double> floor;        // per scored step, the floor class engine's KLD
  double peak_floor = 0;            // max of floor
  double limit = 0;                 // a step's KLD may reach
  double mean_kld = 0, max_kld = 0;
  std::optional<int64_t> first_bad;      // first step over the limit
  std::optional<double> prefill_kld;     // at first_bad: the engine's prefill of the same tokens vs the reference
  std::optional<double> self_kld;        // at first_bad: the engine's decode vs its own prefill
  std::optional<double> resolved;        // mean over scored steps of the listing's resolved share (compare_listing)
  std::string floor_source;              // which engine gave the per-step floor
  std::string note;                      // why steps were not stated or scored
  bool pass = true;
  nlohmann::json to_json() const;
};

// compare --server: a serving probe, a differential measurement on the server itself (docs/server.md).
struct ProbeResult {
  std::string name;                      // "prefix-cache", "batching"
  std::string verdict;                   // "good", "bad", "not applicable"
  std::string reason;                    // why bad or not applicable; what was measured when good
  std::optional<int64_t> cached;         // prefix-cache: the tokens the server says it reused
  std::optional<int64_t> slots;          // batching: the server's slots (llama: /props total_slots)
  std::optional<int64_t> first_difference;  // the first generated token where the two runs differ
  std::optional<double> max_kld;         // the largest per-step KLD between the two runs' distributions
  std::optional<double> limit;
  nlohmann::json to_json() const;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  std::string stop_reason;
  metrics::Degeneration degen, golden_degen;
  bool golden_rerun = false;                // sampling differs from the record's: reference rerun
  std::vector<int32_t> golden_tokens;       // the continuation it is compared with
  std::optional<int64_t> first_divergence;  // first index (in the generated tokens) that differs
  std::optional<double> golden_margin;      // golden top-1 minus top-2 log-prob at that position
  // compare --server, greedy agreement at first_divergence: the record's log-prob margin between the
  // golden token and the engine's (margin_engine), and the largest margin that noise within the
  // per-step KLD limit could flip (flip_margin, metrics.md "Greedy agreement"); agreement is
  // "same", "within noise", "beyond noise" (bad) or "not judged: <why>".
  std::optional<double> margin_engine, flip_margin;
  std::string agreement;
  std::optional<DecodePathResult> decode_path;
  std::vector<ProbeResult> probes;
  std::string spec_stated;  // compare --server: the server's own speculative-decoding counts, where it states them
  metrics::Verdict verdict = metrics::Verdict::good;  // model or engine (metrics §4)
  std::vector<metrics::VerifyStep> verify_steps;  // mtp > 0: one per verify step
  std::optional<metrics::SpecDecode> spec;  // mtp > 0: accept_rate, accept_len, inside/outside the loop (metrics §5)
  std::optional<metrics::MtpEquiv> mtp_equiv;  // mtp > 0, greedy: output == the golden (MTP off) output
  // Consistency: the generation's own logits (top-K kept) at the positions where it had consumed the
  // record's tokens, against a teacher-forced run over those tokens in the generation's order (the
  // prompt in one forward call, then one token per call), judged like the decode mode's KLD (the
  // prefill mode's under decode_mode = false). Catches state corrupted during generation (e.g. an
  // MTP rollback bug) before it flips a token. One sequence per generate() call only (null in
  // batch=all groups).
  std::map<int64_t, TopK> rows;  // position -> top-K of the generation's logits row
  std::optional<LogitsResult> logits;
  // The checkpoint's weights differ from the record's model (CompareResult::weights_differ): a
  // degeneration the golden run does not show is then not blamed on the engine (cause "changed-model").
  bool model_changed = false;
  double seconds = 0;
};

// MTP draft/verify teacher-forced over the golden sequence (spec_decode.h MtpForcing): every rollback
// depth 0..k occurs whatever the sampling draws, so a rollback bug cannot hide behind an early
// divergence of a sampled generation. The verify passes replay plain decode's one-token calls and a
// rollback restores a copy of the state, so after every round the GDN states (conv window and S of
// every GDN layer) must equal those of plain decode over the same tokens, and the verify rows must
// agree with plain decode's logits there (judged like the generation's consistency check). A continuation too
// short for every depth (a stop token after two tokens) is extended with the prompt's tokens: states
// are checked there too, logits only where the record has them.
// kMtpStateLimit: bit-equal on a deterministic backend (the CPU measures 0); 1e-5 rel_l2 leaves room
// for fp32 reductions in another order on a GPU, while a state that kept a rejected draft differs by
// 1e-2 or more on the tiny models (tests/cli/faults.sh).
constexpr double kMtpStateLimit = 1e-5;
struct MtpForcedResult {
  int rounds = 0, rollbacks = 0;            // rollbacks: rounds with a rejected draft
  std::optional<LogitsResult> logits;       // the verify rows against plain decode's at the same positions
  double state_err = 0;                     // worst rel_l2 of a GDN state against plain decode's
  std::optional<int> state_layer;           // the first GDN layer over kMtpStateLimit (first round it happens)
  std::optional<int64_t> state_position;    // the state's length then
  std::string state_part;                   // "S" or "conv"
  bool pass = true;
  nlohmann::json to_json() const;
};

// compare's serving-state check (engine/serving.h; one per mechanism the configuration turns on): the
// case's golden sequence through the mechanism on the tested engine, against plain processing of the
// same tokens on the same engine (the prompt in one call, then one token per call):
//  - chunk (prefill_chunk=N): the prompt prefilled in chunks; the state after it, then four decode rows;
//  - snapshot (prefix_cache): a cold pass stores snapshots at every block boundary (under mtp > 0
//    through forced MTP rounds, as the MTP check's, so drafts are rejected across boundaries), each
//    snapshot against plain's state there, then a warm pass restores the longest and decodes the rest;
//  - slot (batch=N): the continuation decoded in steps padded to N rows.
// The rows after the mechanism are judged like the generation's consistency check (KLD against the
// record's decode-mode floor); the first GDN layer whose state (conv window, S) differs from plain's by
// more than the class's limit is named. In the fp32 class that state limit also decides (a bad
// state is a bad check); in the bf16 class it only names the layer: a chunk or block boundary is an
// extra bf16 rounding of the state there (ssm_dtype=bf16) and of every activation computed in another
// call shape, which the floors (one-call prefill) do not include, so the logits decide (limits:
// CompareRules::serving_state).
struct ServingCheck {
  std::string mechanism;                   // "chunk", "snapshot", "slot"
  std::string what;                        // what ran, in words
  double state_err = 0;                    // worst rel_l2 of a GDN state against plain's
  double state_limit = 0;
  std::optional<int> state_layer;          // the first GDN layer over the limit (first position it happens)
  std::optional<int64_t> state_position;   // the state's length there
  std::string state_part;                  // "S" or "conv"
  std::optional<LogitsResult> logits;      // the rows after the mechanism against plain's
  bool state_decides = true;               // fp32 class: a state over the limit fails the check
  bool pass = true;
  std::string note;                        // why the mechanism did nothing in this case, where it did not
  nlohmann::json to_json() const;
};

struct CaseResult {
  std::string id;
  int64_t prompt_tokens = 0, positions = 0, stored_positions = 0;
  std::optional<metrics::TensorError> embed[2];
  std::vector<LayerRow> layers;
  std::optional<std::pair<int, int>> first_break;  // (mode, layer) of the first layer breaking its rule
  std::optional<LogitsResult> logits[2];
  std::optional<LogitsResult> mtp;
  std::optional<MtpForcedResult> mtp_forced;  // mtp > 0 on a model with MTP weights
  std::vector<ServingCheck> serving;           // one per serving mechanism the configuration turns on
  // The first case of a run: its logits observed and not, bit for bit (judge/observation.h).
  std::optional<ObservationCheck> observation;
  GenerationResult gen;
  metrics::Verdict verdict = metrics::Verdict::good;
  std::vector<std::string> reasons;   // why bad / warnings, in words
  double seconds = 0;
  nlohmann::json to_json() const;
};

struct CompareResult {
  std::string golden_dir, model_dir, config, suite, backend;
  std::string record_fingerprint, model_fingerprint;
  bool model_mismatch = false;
  bool weights_differ = false;  // same fingerprint, but the weight-value sample differs (a modified copy?)
  std::vector<std::string> changed_tensors;  // records with per-tensor digests: the tensors whose bytes differ
  bool manifest_checked = true;  // false: a record made before the manifest's own checksum (golden.h), unverified
  // The record's tokenizer fingerprint differs from the model folder's tokenizer.json (or the folder
  // has none); compared only with allow_model_mismatch, else refused.
  bool tokenizer_mismatch = false;
  std::string record_tokenizer, model_tokenizer;  // fingerprints ("" none)
  bool decode_skipped = false;  // --no-decode: the one-token-per-call teacher-forced passes were not run
  std::string floor_class;     // "fp32" or "bf16": the floors this configuration is judged with
  bool floors = false;         // the record has floors of that class
  std::string floors_reason;
  std::string source;          // "" for our own engine; "dump" for another engine's dump (subjects/dump_reader.h)
  std::string limits_note;     // replaces the limits line of the table when set
  std::vector<CaseResult> cases;
  metrics::Verdict verdict = metrics::Verdict::good;
  bool fail_on_model_degeneration = false;  // model-intrinsic counts as a failure (exit 1)
  int exit_code = 0;
  double seconds = 0;
  nlohmann::json to_json() const;
};

// Step 0 of every comparison (our engine, a dump, a server): is this record for this model? InputError
// for another model's record or tokenizer (unless allow_model_mismatch), other shapes, or weights
// holding NaN/Inf (named: the model is broken, not the engine; scanned once per loaded model); flags
// r.model_mismatch, r.tokenizer_mismatch, r.weights_differ (same fingerprint, other weight values)
// and r.manifest_checked. `tok`: the model folder's tokenizer (null: none).
void check_record(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, bool allow_model_mismatch,
                  CompareResult& r);
// The record's indices of the cases asked for (all when none); InputError for an unknown id.
std::vector<size_t> select_cases(const GoldenRecord& rec, const std::vector<std::string>& ids);

// The free-running figures every comparison shares: the degeneration of the generation and of its golden
// continuation, and the first index where they differ.
void generation_figures(GenerationResult& gen, const metrics::DegenRules& rules, const metrics::ContentOptions& content,
                        bool nonfinite, bool golden_nonfinite);
// Model or engine (metrics.md §4): sets gen.verdict; engine-induced degeneration into `bad` (with
// gen.model_changed: a degeneration of a changed checkpoint, not blamed on the engine), model-intrinsic
// into `warn`.
void degeneration_reasons(GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn);

// The reason of a layer whose isolated error breaks its rule in mode m: rel_l2 against the limit (and
// the floor ratio), or, when the output holds NaN/Inf where the record's is finite, how many (the
// rel_l2 of the finite part alone would read as a small error).
std::string isolated_break_reason(const LayerRow& row, int m);

// The logits verdict of per-position metrics: mean KLD against k·floor + eps (or the fallback).
LogitsResult logits_result(const std::vector<metrics::LogitPosition>& pos, const std::optional<double>& floor,
                           const metrics::FloorRule& rule, double fallback);

// Another engine's log-probs against the record's (LogitsResult::logprob_offset), from its full
// logits [rows, V] (a dump): the engine's log-probs taken over all V rows, as engines report them.
void set_logprob_offset(LogitsResult& lr, const std::vector<float>& logits, int64_t rows, int64_t V, const TopKBlock& golden);
// One line (two with a note) for the limits block: the log-prob offset over the cases, the
// normalisation it was taken in, and, for a record without lse_pad and a model with padding rows,
// that it includes -lse_pad. `who` names the engine ("server", "dump").
std::string logprob_offset_note(const CompareResult& r, int64_t V, const std::vector<uint8_t>& mask, const std::string& who);

// The noise-floor class another engine (compare --dump / --server) is judged with: fp32 and bf16 are
// the record's classes (golden.h FloorClass); q8_0 has no floors in the record and is measured at
// compare time: the known-good run is our CPU engine at precision=q8_0 (ggml's Q8_0 emulated), whose
// teacher-forced mean KLD over the case's golden sequence is the case's floor.
struct EngineClass {
  std::string name = "fp32";
  FloorClass record_class = FloorClass::fp32;  // the record's class (q8_0: bf16, for what the record has)
  std::optional<RunConfig> measured;           // set: the floor is measured with this configuration
};
EngineClass parse_engine_class(const std::string& name);  // fp32 | bf16 | q8_0; InputError otherwise

// Our engine under `rc`, teacher-forced (prefill) over the case's golden sequence: its mean KLD
// against the record (the measured floor of an EngineClass).
double measured_kld_floor(const GoldenCase& g, const Model& model, const RunConfig& rc, const BackendFactory& factory,
                          const std::vector<uint8_t>* mask);
// The same with an engine already built on `be`.
double teacher_forced_kld(Engine& eng, Backend& be, const GoldenCase& g, int64_t vocab_size, const std::vector<uint8_t>* mask);


// Ids whose bytes are whitespace only: they do not count as answer content (empty_content).
std::vector<int32_t> whitespace_ids(const Tokenizer& tok);

}  // namespace degen
