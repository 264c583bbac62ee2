// The manifest of a golden record (manifest.json; the record's layout is in golden.h) as a type:
// the writer builds a Manifest and serialises it with to_json, the reader (GoldenRecord) parses it
// with from_json, and nothing else indexes its JSON by string keys.
//
// Presence: the fields that GoldenRecord::open requires are plain members (a record without them is
// malformed); the others are std::optional where older records may lack them, so that a parsed
// manifest serialises back to what it was read from (absent stays absent). Keys this type does not
// model are kept in the `extra` object of their part and written back as they were. Objects are
// std::map-ordered (nlohmann::json's default), so the serialisation's key order does not depend on
// the order fields are set in.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen {

constexpr const char* kGoldenFormat = "degenbisect-golden";
constexpr int kGoldenFormatVersion = 1;
constexpr const char* kManifestChecksumKey = "manifest_sha256";

// Bounds of `golden`'s options that its records carry (settings.topk, the spot checks' positions):
// check_golden_options refuses more, and the manifest's reader refuses a record that holds more.
// --topk: the log-probs kept per position (1000 is far above any use: compare reads 20);
// --verify-positions: the positions the CPU spot check recomputes per case (one prefill of them).
constexpr int kMaxRecordTopK = 1000;
constexpr int kMaxVerifyPositions = 4096;

// `--positions POLICY` of golden, as settings.positions records it: auto, all, none, or N (the first
// N positions of each case, at most 9 digits).
bool valid_positions_policy(const std::string& policy);

// A value of a manifest outside its range, found by from_json: what() names the field (a path such as
// "cases[1].max_new_tokens"), what was expected and what was found. GoldenRecord::open turns it into
// an InputError naming the file.
class ManifestValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The manifest's own checksum (golden.h): SHA-256 hex of its canonical form without kManifestChecksumKey.
std::string manifest_checksum(const nlohmann::json& manifest);

// Noise floors of one case and class (metrics.md §1): isolated rel_l2 of the floor run per layer and
// mode (nullopt where the layer is not stored), and its mean teacher-forced KLD. JSON: iso_prefill,
// iso_decode (numbers, null, or "inf"/"nan"), kld_prefill, kld_decode, mtp_kld.
struct CaseFloors {
  std::vector<std::optional<double>> iso[2];  // by ForcedMode (prefill, decode)
  std::optional<double> kld[2];
  std::optional<double> mtp_kld;
};

// The CPU spot check of one case of a reference made on the GPU (GoldenOptions::verify_layers).
struct CaseVerification {
  struct Layer {
    int layer = 0;
    std::optional<double> rel_l2;  // null: not finite
  };
  std::string by;  // the CPU backend that checked
  int64_t positions = 0;
  double worst_rel_l2 = 0;
  int worst_layer = -1;
  double worst_kld = 0;
  int64_t greedy_tokens_checked = 0;
  int64_t generation_steps_checked = 0;
  double worst_generation_kld = 0;
  std::vector<Layer> layers;
};

// The CPU spot check of one case's bf16 floors made on the GPU (GoldenOptions::bf16_floors).
struct CaseFloorCheck {
  struct Layer {
    int layer = 0;
    double gpu_vs_emulation = 0, emulation_vs_record = 0;
  };
  std::string by;
  int64_t positions = 0;
  double worst_ratio = 0;
  int worst_layer = -1;
  std::vector<Layer> layers;
};

struct Manifest {
  struct Model {
    std::string fingerprint;                  // model_fingerprint(): config and tensor headers
    std::optional<std::string> weights_sample;  // weights_sample_digest; absent in records before it
    std::optional<std::map<std::string, std::string>> tensor_digests;  // absent in records before them
    std::optional<std::string> name;          // the model folder's name
    std::optional<std::string> model_type;
    int num_hidden_layers = 0;
    int64_t hidden_size = 0, vocab_size = 0;
    std::optional<bool> has_mtp;
    nlohmann::json extra = nlohmann::json::object();
  };
  struct Tokenizer {
    std::optional<std::string> fingerprint;  // null: the record was made without a tokenizer
    nlohmann::json extra = nlohmann::json::object();
  };
  struct Suite {
    std::string name;
    std::optional<std::string> sha256;
    std::optional<int64_t> cases;
    nlohmann::json extra = nlohmann::json::object();
  };
  // A reference made on the GPU: what the CPU spot check checked and the worst it found, or why not.
  struct Verification {
    std::string status;                  // "passed" | "not checked"
    std::optional<std::string> reason;   // not checked: the options that turned it off
    // passed:
    std::string by, what, generation;
    std::vector<int> layers;
    int positions = 0, cases = 0;
    double limit_rel_l2 = 0, limit_kld = 0, worst_rel_l2 = 0, worst_kld = 0, worst_generation_kld = 0;
    bool passed() const { return status == "passed"; }
  };
  struct Settings {
    std::optional<std::string> precision;         // "fp32" | "fp64" (absent: fp32)
    std::optional<std::string> reference_config;  // RunConfig::str() of the reference
    std::optional<std::string> backend;
    std::optional<std::string> gdn;
    std::optional<int> gen_tokens;                // null: each case's own max_new_tokens (always written)
    std::vector<int> layers;                      // the stored layers
    std::optional<std::string> positions;         // the --positions policy
    std::optional<int> topk;
    std::optional<Verification> verification;     // a reference made on the GPU
    std::optional<std::string> batch;             // "all" with --batch all; absent: one case at a time
    std::optional<std::string> cpu_isa;           // the ISA of the CPU reference's products (util/cpu_isa.h);
                                                  // absent: a reference not made on the CPU, or older
    nlohmann::json extra = nlohmann::json::object();
    bool fp64() const { return precision.value_or("fp32") == "fp64"; }
  };
  // The spot check of bf16 floors made on the GPU (noise_floors.classes.bf16.spot_check).
  struct FloorSpotCheck {
    std::string status, by, what;
    int cases = 0, positions = 0;
    double k = 0, worst_ratio = 0;
  };
  struct FloorClassInfo {
    std::optional<std::string> config;   // the floor engine's RunConfig::str()
    bool measured = false;
    std::optional<std::string> reason;   // null when measured; required when not
    std::optional<std::string> judges;
    std::optional<FloorSpotCheck> spot_check;
    nlohmann::json extra = nlohmann::json::object();
  };
  struct NoiseFloors {
    std::optional<std::string> status;  // measured | partial | absent
    std::optional<std::string> reason;  // the bf16 class's reason (null when measured)
    std::optional<std::string> metric;
    FloorClassInfo classes[2];          // by FloorClass
    nlohmann::json extra = nlohmann::json::object();
  };
  struct Case {
    std::string id;
    int index = 0;
    std::string input;
    bool opened_think = false;
    int max_new_tokens = 0;
    bool ignore_stop = false;
    std::string sampling;
    std::optional<int64_t> prompt_tokens, generated_tokens;
    std::string stop_reason;
    bool nonfinite_logits = false;
    int64_t positions_stored = 0;
    std::string file;
    nlohmann::json degeneration;          // metrics::Degeneration::to_json(); null when absent
    std::optional<CaseFloors> floors[2];  // by FloorClass; nullopt: not measured (null)
    std::optional<CaseVerification> verification;
    std::optional<CaseFloorCheck> floor_check;
    nlohmann::json extra = nlohmann::json::object();
  };
  struct File {
    uint64_t bytes = 0;
    std::string sha256;
  };

  std::string format;  // kGoldenFormat
  int format_version = 0;
  std::optional<std::string> tool_version;
  std::optional<std::string> command;
  Model model;
  Tokenizer tokenizer;
  Suite suite;
  Settings settings;
  NoiseFloors noise_floors;
  std::vector<Case> cases;
  std::map<std::string, File> files;
  std::optional<std::string> manifest_sha256;  // absent in records made before it
  nlohmann::json extra = nlohmann::json::object();

  // The JSON the record holds, with its own checksum computed and set (the writer's last step).
  nlohmann::json sealed_json() const;
};

// The only (de)serialisation of the manifest and its parts. from_json throws nlohmann::json's
// exceptions on a malformed manifest (a required field missing, an object where a string belongs),
// and ManifestValueError for a number or an enumerated string outside its range: every number it
// reads is checked before it is narrowed or used, even in a manifest whose checksum matches (an
// editor can recompute it; record_manifest.cpp "reading" lists each field's range and where it comes
// from). The record's consistency across fields (stored layers inside the model, one entry per case,
// each id once) is GoldenRecord::open's.
void to_json(nlohmann::json& j, const Manifest& m);
void from_json(const nlohmann::json& j, Manifest& m);
void to_json(nlohmann::json& j, const Manifest::Settings& s);
void to_json(nlohmann::json& j, const Manifest::Case& c);
void from_json(const nlohmann::json& j, Manifest::Case& c);
// A case entry read as from_json(Case) reads it, `path` naming it in ManifestValueError's messages
// ("cases[3]", or "entry" for an entry of an interrupted run's resume state).
Manifest::Case case_from_json(const nlohmann::json& j, const std::string& path);
void to_json(nlohmann::json& j, const CaseFloors& f);

// The identity of a record's manifest as a sweep records it (sweep.cpp evaluation_identity):
// SHA-256 hex of the compact serialisation of the manifest as read.
std::string manifest_identity(const nlohmann::json& manifest);

}  // namespace degen
