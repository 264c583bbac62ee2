// Golden records (DESIGN.md §6): what the CPU reference does on a prompt suite, kept so that any
// other run (another backend, precision or toggle set) can be measured against it (compare.h).
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
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/cases.h"
#include "diag/floor_class.h"
#include "diag/metrics.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/run_config.h"
#include "model/model.h"

namespace degen {

class Tokenizer;

constexpr const char* kGoldenFormat = "degenbisect-golden";
constexpr int kGoldenFormatVersion = 1;
constexpr const char* kManifestChecksumKey = "manifest_sha256";

// The manifest's own checksum (see above): SHA-256 hex of its canonical form without kManifestChecksumKey.
std::string manifest_checksum(const nlohmann::json& manifest);

// ---- teacher-forced runs (shared by golden and compare) ----

// prefill: the whole sequence in one forward call (chunked GDN unless the config says otherwise);
// decode: one token per call through the decode path (recurrent GDN, KV cache appends). A decode run
// can start with a prefill of the first tokens (ForcedOptions::prefill_positions): the order
// generation takes (the prompt in one call, then one token per call).
enum class ForcedMode : uint8_t { prefill, decode };
const char* forced_mode_name(ForcedMode m);

// Golden layer inputs to inject (metrics.md §3): in[L] = the input of layer L over positions
// [0, P) (row-major [P, H]): the embedding for L = 0, else the golden output of layer L-1; an empty
// vector leaves layer L's input alone.
struct LayerInputs {
  int64_t positions = 0;  // P
  int64_t hidden = 0;     // H
  std::vector<std::vector<float>> in;  // [L] of [P * H] or empty
};

struct ForcedOptions {
  ForcedMode mode = ForcedMode::prefill;
  int64_t run_positions = -1;              // tokens to run (-1: all); injection needs <= inject->positions
  int64_t capture_positions = 0;           // P: layer outputs kept for positions [0, P)
  std::vector<bool> capture_layers;        // [L]; empty = none
  const LayerInputs* inject = nullptr;     // golden inputs (isolated run), or null
  bool logits = true;                      // keep the logits of every position
  bool mtp = false;                        // prefill only: MTP draft logits for every position but the last
  bool mtp_prenorm_hidden = false;         // fault mtp-prenorm-hidden: feed the MTP head l_out-(L-1), not the post-norm hidden
  const std::vector<uint8_t>* vocab_mask = nullptr;
  // decode only: the first N tokens in ONE forward call that keeps only its last logits row (as
  // generate() prefills a prompt), then one token per call; logits then start at position N - 1
  // (ForcedRun::logits_pos0). 0: every token through the decode path. No injection with it.
  int64_t prefill_positions = 0;
  // Confirmation by patching (localise.h): the output of layer patch_layer replaced by patch_out
  // (row-major [P, H], the record's l_out) at positions [0, P); run_positions must not exceed P.
  int patch_layer = -1;
  const std::vector<float>* patch_out = nullptr;
};

struct ForcedRun {
  int64_t T = 0;                          // positions run
  int64_t P = 0;                          // positions captured
  std::vector<float> logits;              // [T - logits_pos0, V] (padding ids -inf)
  int64_t logits_pos0 = 0;                // position of the first logits row (prefill_positions - 1, else 0)
  std::vector<float> embed;               // [P, H] the model's own embedding output
  std::vector<std::vector<float>> l_out;  // [L] of [P, H] for captured layers (else empty)
  std::vector<float> l_out_norm;          // [L, T] row L2 norms of every layer output
  std::vector<float> mtp_logits;          // [T-1, V] when asked and the model has MTP
  double seconds = 0;
};

// Runs `tokens` teacher-forced through `eng` from a fresh state.
ForcedRun forced_run(Engine& eng, const std::vector<int32_t>& tokens, const ForcedOptions& opt);

// Top-K of one logits row under the golden rules: log-softmax in fp64 over the real ids, K most likely
// (descending, lowest id on ties), the log-sum-exp over the real ids (lse) and lse_pad = the
// log-sum-exp over all V rows minus lse (meaningful only when the row's padding logits are really
// there, not masked to -inf).
struct TopK {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  double lse = 0;
  double lse_pad = 0;  // >= 0; NaN when a padding logit is not finite
};
TopK topk_of_row(const float* logits, int64_t V, const std::vector<uint8_t>* mask, int k);

// Top-K of `rows` logits rows [rows, V]. undefined_row >= 0: that row is not a distribution.
struct TopKBlock {
  int K = 0;
  std::vector<int32_t> ids;      // [rows, K]
  std::vector<float> logprobs;   // [rows, K]
  std::vector<float> lse;        // [rows] over the real ids
  std::vector<float> lse_pad;    // [rows] log-sum-exp over all V rows minus lse; empty in older records
  int64_t undefined_row = -1;
};
TopKBlock topk_block(const std::vector<float>& logits, int64_t rows, int64_t V, const std::vector<uint8_t>* mask, int K);
// From the record's normalisation to an engine's that normalises over all vocab_size rows, at `row`:
// log p_engine(i) = topk_logprobs(i) + vocab_shift, vocab_shift = lse - lse_vocab = -lse_pad (<= 0;
// exactly 0 when there are no padding rows). nullopt when the block has no (finite) lse_pad: an
// older record.
std::optional<double> vocab_shift(const TopKBlock& b, int64_t row);

// The golden layer inputs of a record's data: in[0] = embed, in[L] = l_out[L-1].
LayerInputs make_layer_inputs(const std::vector<float>& embed, const std::vector<std::vector<float>>& l_out, int64_t P,
                              int64_t H);
// Per-layer tensor errors of test against golden outputs (nullopt where either is absent, or, with
// `inputs`, where the layer's input was not injected).
std::vector<std::optional<metrics::TensorError>> layer_errors(const std::vector<std::vector<float>>& test,
                                                              const std::vector<std::vector<float>>& golden,
                                                              const LayerInputs* inputs);
// metrics::compare_logits_topk for every row of test logits [rows, V] against a golden top-K block;
// next[i] = the golden next token at row i (-1: none).
std::vector<metrics::LogitPosition> logit_positions(const std::vector<float>& logits, int64_t rows, int64_t V,
                                                    const TopKBlock& golden, const std::vector<int32_t>& next,
                                                    const std::vector<uint8_t>* mask);
double mean_kld(const std::vector<metrics::LogitPosition>& pos);

// ---- writing ----

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
  // fixed fp32-class limits (compare.h kFallbackRelL2 for each layer's rel_l2, kFallbackKld for the
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
// rule's k, compare.h CompareRules), plus kFloorCheckEps for layers the record holds exactly.
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

// Writes the record of `suite` for `model` into `out` (atomically). `factory` builds the reference
// backend and, for the floors, the precision=bf16 and the other high-precision ones; a class whose
// backend is untestable is recorded as absent with the reason. InputError on bad options, cases or
// an existing `out` without `force`.
GoldenSummary write_golden(const Model& model, const Tokenizer* tok, const Suite& suite, const std::filesystem::path& out,
                           const GoldenOptions& opt, const BackendFactory& factory, std::FILE* progress = nullptr);

// The resume state of an interrupted `golden --out out` run: the folders .NAME.partial (the finished
// cases' data files) and .NAME.resume (resume.json: the key; <case id>.case.json: each finished
// case's manifest entry; gen-<first case id>.json: a --batch all group's continuations) beside
// `out`. Read as a run with `key` (the settings that make a resume valid) over `suite` would:
// discarded when made with other settings, incomplete or `restart`; else checked whole (golden.cpp,
// "resume state"): every file sealed with its own checksum and the key's, each entry bound to its
// case, each data file to its entry, nothing else in either folder. InputError (128) naming the file
// and what to remove otherwise; a damaged resume.json is rewritten with a warning. Made empty when
// absent.
struct GoldenResume {
  std::filesystem::path partial, resume;
  std::string key_sha;                                     // SHA-256 of the key
  std::map<size_t, nlohmann::json> cases;                  // finished cases by suite index: their entries
  std::map<size_t, std::vector<GenerateResult>> generations;  // --batch all: group's first case -> continuations
};
GoldenResume open_golden_resume(const std::filesystem::path& out, const nlohmann::json& key, const Suite& suite,
                                const std::vector<std::pair<size_t, size_t>>& groups, int64_t vocab, bool restart,
                                std::FILE* progress);

// ---- reading ----

// Noise floors of one case and class (metrics.md §1): isolated rel_l2 of the floor run per layer and
// mode (nullopt where the layer is not stored), and its mean teacher-forced KLD.
struct CaseFloors {
  std::vector<std::optional<double>> iso[2];  // by ForcedMode
  std::optional<double> kld[2];
  std::optional<double> mtp_kld;
};

struct GoldenCase {
  std::string id;
  int index = 0;                    // position in the suite (the sampler's case index)
  std::string input;                // prompt | raw | tokens
  bool opened_think = false;
  int max_new_tokens = 0;
  bool ignore_stop = false;
  std::string sampling;             // canonical sampling string the continuation was made with ("" greedy)
  std::string stop_reason;
  bool nonfinite_logits = false;    // the reference's own generation saw non-finite logits
  std::string file;                 // data file name
  std::optional<CaseFloors> floors[2];  // by FloorClass
  // data (load_case)
  std::vector<int32_t> prompt, continuation;
  TopKBlock topk;                   // [T, K] per position of the sequence
  TopKBlock mtp_topk;               // [T-1, K] MTP drafts (empty when the model has none)
  int64_t P = 0;
  std::vector<float> embed;                  // [P, H] or empty
  std::vector<std::vector<float>> l_out;     // [L] of [P, H] or empty
  std::vector<float> l_out_norm;             // [L, T]
  std::vector<int32_t> sequence() const;     // prompt + continuation
};

class GoldenRecord {
 public:
  // Reads manifest.json, checks the format version, the manifest's own checksum when it has one
  // (InputError when its content was edited) and every data file against its size and SHA-256
  // (InputError naming the file when it is missing, truncated or edited).
  static GoldenRecord open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  // The manifest carried its checksum and it matched; false for records made before it (unverified).
  bool manifest_checked() const { return manifest_checked_; }
  const std::string& model_fingerprint() const { return model_fp_; }
  const std::string& weights_sample() const { return weights_sample_; }  // "" in records without one
  // Per-tensor digests (tensor_digests) of the recorded model; empty in records made before them.
  const std::map<std::string, std::string>& tensor_digests() const { return tensor_digests_; }
  const std::string& tokenizer_fingerprint() const { return tok_fp_; }
  const std::string& suite() const { return suite_; }
  int num_layers() const { return layers_; }
  int64_t hidden() const { return hidden_; }
  int64_t vocab() const { return vocab_; }
  std::vector<bool> stored_layers() const { return stored_; }
  // Floors of a class were measured (default: the bf16 floors of metrics.md §1), or why not.
  bool floors_present(FloorClass c = FloorClass::bf16) const { return floors_[static_cast<int>(c)]; }
  const std::string& floors_reason(FloorClass c = FloorClass::bf16) const { return floors_reason_[static_cast<int>(c)]; }
  const std::vector<GoldenCase>& cases() const { return cases_; }  // metadata only
  // The case with its data (reads and validates the safetensors file); with_layers = false skips the
  // layer outputs (embed, l_out-L), the bulk of a large record.
  GoldenCase load_case(size_t i, bool with_layers = true) const;

 private:
  std::filesystem::path dir_;
  nlohmann::json manifest_;
  std::string model_fp_, tok_fp_, suite_, weights_sample_;
  std::map<std::string, std::string> tensor_digests_;
  std::string floors_reason_[2];
  int layers_ = 0;
  int64_t hidden_ = 0, vocab_ = 0;
  std::vector<bool> stored_;
  bool floors_[2] = {false, false};
  bool manifest_checked_ = false;
  std::vector<GoldenCase> cases_;
};

// The largest top-K log-prob a record may hold (GoldenRecord::load_case refuses more, and NaN):
// the writer's log-probs are fp64 log-softmax values rounded to fp32, above 0 by at most the fp64
// rounding of logit - lse (~1e-14 for |logits| < 1e3); 1e-4 is the bound metrics::
// compare_logits_topk applies to what it is given, so every record the reader passes it accepts.
constexpr float kMaxStoredLogprob = 1e-4f;

// A cheap digest of the weight VALUES: SHA-256 over, for every tensor sorted by name, its name and
// its first and last 64 bytes. The model fingerprint covers config and tensor headers only, so two
// checkpoints of one architecture (another seed, a fine-tune, a modified copy) share it; this sample
// tells them apart without reading the whole checkpoint (compare warns, it does not refuse).
std::string weights_sample_digest(const Checkpoint& ckpt);

// Every tensor's digest over ALL its bytes (name -> 16 hex digits): the sample above misses an edit
// inside a tensor. A 64-bit hash of our own (64-bit words through a multiply-xorshift mix in four
// lanes, then the length): it detects changes, it is not a cryptographic checksum. Tensors are
// hashed in parallel; it reads the whole checkpoint once (bandwidth-bound: see README for the cost
// on a 27B checkpoint).
std::map<std::string, std::string> tensor_digests(const Checkpoint& ckpt);
uint64_t content_hash64(const uint8_t* data, size_t n);

// "all" | "none" | LIST -> [L] flags. InputError naming the option.
std::vector<bool> parse_layer_list(const std::string& text, const ModelConfig& cfg);

}  // namespace degen
