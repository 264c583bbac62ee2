// The reader of golden records (the record's layout is in golden.h, its manifest in
// record_manifest.h): GoldenRecord::open checks a record whole (format, the manifest's own checksum,
// every data file's size and SHA-256) and load_case reads one case's data, every number checked.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "record/floor_class.h"
#include "record/record_manifest.h"
#include "record/topk.h"
#include "engine/sampler.h"

namespace degen {

struct GoldenCase {
  std::string id;
  int index = 0;                    // position in the suite (the sampler's case index)
  std::string input;                // prompt | raw | tokens
  bool opened_think = false;
  int max_new_tokens = 0;
  bool ignore_stop = false;
  std::string sampling;             // canonical sampling string the continuation was made with ("" greedy)
  SamplingParams sampling_params;   // the same, parsed once when the record is read
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
  const Manifest& manifest() const { return manifest_; }
  // The identity of the manifest as read (manifest_identity: SHA-256 of its compact serialisation),
  // what a sweep records as the record it measured against.
  const std::string& identity() const { return identity_; }
  // The manifest carried its checksum and it matched; false for records made before it (unverified).
  bool manifest_checked() const { return manifest_checked_; }
  const std::string& model_fingerprint() const { return manifest_.model.fingerprint; }
  const std::string& weights_sample() const;  // "" in records without one
  // Per-tensor digests (tensor_digests) of the recorded model; empty in records made before them.
  const std::map<std::string, std::string>& tensor_digests() const;
  const std::string& tokenizer_fingerprint() const { return tok_fp_; }
  const std::string& suite() const { return manifest_.suite.name; }
  int num_layers() const { return manifest_.model.num_hidden_layers; }
  int64_t hidden() const { return manifest_.model.hidden_size; }
  int64_t vocab() const { return manifest_.model.vocab_size; }
  std::vector<bool> stored_layers() const { return stored_; }
  // Floors of a class were measured (default: the bf16 floors of metrics.md §1), or why not.
  bool floors_present(FloorClass c = FloorClass::bf16) const { return floor_class(c).measured; }
  const std::string& floors_reason(FloorClass c = FloorClass::bf16) const { return floors_reason_[static_cast<int>(c)]; }
  const std::vector<GoldenCase>& cases() const { return cases_; }  // metadata only
  // The case with its data (reads and validates the safetensors file); with_layers = false skips the
  // layer outputs (embed, l_out-L), the bulk of a large record.
  GoldenCase load_case(size_t i, bool with_layers = true) const;

 private:
  const Manifest::FloorClassInfo& floor_class(FloorClass c) const {
    return manifest_.noise_floors.classes[static_cast<int>(c)];
  }
  std::filesystem::path dir_;
  Manifest manifest_;
  std::string identity_, tok_fp_;
  std::string floors_reason_[2];  // "" where measured or null
  std::vector<bool> stored_;
  bool manifest_checked_ = false;
  std::vector<GoldenCase> cases_;
};

// The largest top-K log-prob a record may hold (GoldenRecord::load_case refuses more, and NaN):
// the writer's log-probs are fp64 log-softmax values rounded to fp32, above 0 by at most the fp64
// rounding of logit - lse (~1e-14 for |logits| < 1e3); 1e-4 is the bound metrics::
// compare_logits_topk applies to what it is given, so every record the reader passes it accepts.
constexpr float kMaxStoredLogprob = 1e-4f;

}  // namespace degen
