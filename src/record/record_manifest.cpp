// The golden record's manifest as a type (record_manifest.h): its one (de)serialisation and checksum.
#include "record/record_manifest.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "record/cases.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/run_config.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "util/cpu_isa.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/json_number.h"
#include "util/sha256.h"

namespace degen {

using json = nlohmann::json;

std::string manifest_checksum(const json& manifest) {
  json m = manifest;
  if (m.is_object()) m.erase(kManifestChecksumKey);
  // Through text and back, so that the writer's in-memory numbers (a NaN written as null, an int
  // read back as unsigned) hash as the reader will see them.
  return sha256_hex(json::parse(m.dump()).dump());
}

std::string manifest_identity(const json& manifest) { return sha256_hex(manifest.dump()); }

bool valid_positions_policy(const std::string& p) {
  if (p == "all" || p == "none" || p == "auto") return true;
  return !p.empty() && p.size() < 10 && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
}

namespace {

// The keys of object `j` this type does not model, kept to be written back as they were.
json extra_of(const json& j, std::initializer_list<const char*> known) {
  json e = json::object();
  for (const auto& [k, v] : j.items()) {
    bool is_known = false;
    for (const char* n : known) is_known |= k == n;
    if (!is_known) e[k] = v;
  }
  return e;
}

// An optional field: read when present (of type T, else nlohmann's type_error), written when set.
template <class T>
void read_opt(const json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key)) out = j.at(key).get<T>();
}
template <class T>
void write_opt(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}
// A string field that may be null: null (or absent) is nullopt.
std::optional<std::string> nullable_string(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<std::string>();
}
json nullable(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

// ---- reading: the range of every value ----
//
// Rule: every number and enumerated string of a manifest is checked when it is read, before it is
// narrowed or used, even when the manifest's checksum matches (anyone who edits a record can
// recompute it): 2^32 + 1 is not read as 1, a negative noise floor is not a floor. Each field's range
// is stated where it is read, with where the bound comes from; what spans fields (stored layers
// inside the model, one entry per case, each id once) is GoldenRecord::open's. A value outside its
// range is a ManifestValueError naming the field's path, what was expected and what was found.

[[noreturn]] void bad_value(const std::string& field, const std::string& expected, const json& found) {
  throw ManifestValueError(cat("field '", field, "': expected ", expected, ", found ", json_excerpt(found)));
}

std::string path_of(const std::string& base, const char* key) { return base.empty() ? std::string(key) : cat(base, ".", key); }

// An integer in [lo, hi]: a JSON integer (a fraction, a string or a value beyond int64 is none),
// checked before it is narrowed. `what` says what it counts.
int64_t integer_in(const json& v, const std::string& field, int64_t lo, int64_t hi, const char* what) {
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = hi >= 0 && u <= static_cast<uint64_t>(hi);
    if (ok) x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
    ok = x <= hi;
  }
  if (!ok || x < lo) bad_value(field, cat("an integer in [", lo, ", ", hi, "] (", what, ")"), v);
  return x;
}
int int_in(const json& v, const std::string& field, int64_t lo, int64_t hi, const char* what) {
  static_assert(kMaxTensorDim <= std::numeric_limits<int>::max());  // every int field's bound is at most this
  return static_cast<int>(integer_in(v, field, lo, hi, what));
}

// A plain JSON number (finite: JSON has no other) >= 0, or > 0 where `positive`.
double number_at_least_0(const json& v, const std::string& field, const char* what, bool positive = false) {
  if (!v.is_number() || v.get<double>() < 0 || (positive && v.get<double>() == 0))
    bad_value(field, cat("a number ", positive ? "> 0" : ">= 0", " (", what, ")"), v);
  return v.get<double>();
}

// A measurement as json_number writes it: a number, or "inf" / "nan" where the run that measured it
// was not finite. A rel_l2, a KLD floor (the writer keeps it >= 0: golden.cpp) or a ratio is >= 0:
// a negative value (or "-inf") is none, and would make every limit derived from it negative.
double measurement(const json& v, const std::string& field, const char* what) {
  if (!is_json_number(v) || number_from_json(v) < 0)
    bad_value(field, cat("a ", what, " >= 0 (a number, \"inf\" or \"nan\")"), v);
  return number_from_json(v);
}
std::optional<double> opt_measurement(const json& v, const std::string& field, const char* what) {
  if (v.is_null()) return std::nullopt;  // not measured there
  return measurement(v, field, what);
}

// A string that is one of `allowed` (an enumeration the writer draws from).
std::string one_of(const json& v, const std::string& field, const std::vector<std::string>& allowed) {
  if (v.is_string())
    for (const std::string& a : allowed)
      if (v.get_ref<const std::string&>() == a) return a;
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) list += cat(i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", "\"", allowed[i], "\"");
  bad_value(field, allowed.size() == 1 ? list : cat("one of ", list), v);
}
void read_one_of(const json& j, const char* key, const std::string& base, const std::vector<std::string>& allowed,
                 std::optional<std::string>& out) {
  if (j.contains(key)) out = one_of(j.at(key), path_of(base, key), allowed);
}

// A list of layer indices. Bound: config.json's reader allows at most kMaxModelLayers layers
// (model/config.h); GoldenRecord::open checks each against the record's own num_hidden_layers.
std::vector<int> layer_list(const json& v, const std::string& field) {
  if (!v.is_array()) bad_value(field, "a list of layer indices", v);
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(int_in(v.at(i), cat(field, "[", i, "]"), 0, kMaxModelLayers - 1, "a layer index"));
  return out;
}

// A case's sampling string: a configuration string (engine/run_config.h) that parses, whose values
// are in run_config's ranges (temp in [0, 100], top_p in (0, 1], ...; the sampler's validate) and that
// sets nothing but sampling (golden writes sampling_str of the case's sampling).
bool sampling_only(const std::string& text) {
  try {
    RunConfig rc = parse_run_config(text);
    validate(rc.sampling);
    rc.sampling = SamplingParams{};
    return rc.str() == RunConfig{}.str();
  } catch (const Error&) {
    return false;
  }
}

// The names the writer draws each enumerated field from.
std::vector<std::string> isa_names() {
  std::vector<std::string> n;
  for (cpu::Isa i : {cpu::Isa::baseline, cpu::Isa::avx2, cpu::Isa::avx512}) n.push_back(cpu::isa_name(i));
  return n;
}
std::vector<std::string> gdn_names() {
  std::vector<std::string> n;
  for (GdnAlgo a : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) n.push_back(gdn_algo_name(a));
  return n;
}
std::vector<std::string> input_names() {
  std::vector<std::string> n;
  for (CaseInput k : {CaseInput::prompt, CaseInput::raw, CaseInput::tokens}) n.push_back(case_input_name(k));
  return n;
}
std::vector<std::string> stop_names() {  // golden.cpp: a case without a generation budget stops with "no budget"
  std::vector<std::string> n = {"no budget"};
  for (StopReason r : {StopReason::stop_token, StopReason::max_tokens, StopReason::max_context}) n.push_back(stop_reason_name(r));
  return n;
}

const char* const kClassNames[2] = {"bf16", "fp32"};       // by FloorClass (floor_class_name)
const char* const kModeNames[2] = {"prefill", "decode"};   // by ForcedMode (forced_mode_name)

// ---- parts ----

json model_json(const Manifest::Model& m) {
  json j = m.extra;
  j["fingerprint"] = m.fingerprint;
  write_opt(j, "weights_sample", m.weights_sample);
  write_opt(j, "tensor_digests", m.tensor_digests);
  write_opt(j, "name", m.name);
  write_opt(j, "model_type", m.model_type);
  j["num_hidden_layers"] = m.num_hidden_layers;
  j["hidden_size"] = m.hidden_size;
  j["vocab_size"] = m.vocab_size;
  write_opt(j, "has_mtp", m.has_mtp);
  return j;
}

// In the order GoldenRecord::open has always read them, so a malformed manifest is named the same.
Manifest::Model model_from(const json& j) {
  Manifest::Model m;
  m.fingerprint = j.at("fingerprint").get<std::string>();
  read_opt(j, "weights_sample", m.weights_sample);
  read_opt(j, "tensor_digests", m.tensor_digests);
  // The sizes as config.json's reader bounds them (model/config.h): the record was made from such a config.
  m.num_hidden_layers = int_in(j.at("num_hidden_layers"), "model.num_hidden_layers", 1, kMaxModelLayers, "the model's layers");
  m.hidden_size = integer_in(j.at("hidden_size"), "model.hidden_size", 1, kMaxTensorDim, "a tensor dimension");
  m.vocab_size = integer_in(j.at("vocab_size"), "model.vocab_size", 1, kMaxTensorDim, "token ids are 32-bit");
  read_opt(j, "name", m.name);
  read_opt(j, "model_type", m.model_type);
  read_opt(j, "has_mtp", m.has_mtp);
  m.extra = extra_of(j, {"fingerprint", "weights_sample", "tensor_digests", "name", "model_type", "num_hidden_layers",
                         "hidden_size", "vocab_size", "has_mtp"});
  return m;
}

json verification_json(const Manifest::Verification& v) {
  if (!v.passed()) {
    json j = {{"status", v.status}};
    write_opt(j, "reason", v.reason);
    return j;
  }
  return {{"status", v.status},
          {"by", v.by},
          {"what", v.what},
          {"layers", v.layers},
          {"positions", v.positions},
          {"cases", v.cases},
          {"limit_rel_l2", v.limit_rel_l2},
          {"limit_kld", v.limit_kld},
          {"worst_rel_l2", v.worst_rel_l2},
          {"worst_kld", v.worst_kld},
          {"worst_generation_kld", v.worst_generation_kld},
          {"generation", v.generation}};
}

Manifest::Verification verification_from(const json& j) {
  const std::string at = "settings.verification";
  Manifest::Verification v;
  v.status = one_of(j.at("status"), path_of(at, "status"), {"passed", "not checked"});  // golden.cpp verification_of
  read_opt(j, "reason", v.reason);
  if (!v.passed()) return v;
  v.by = j.at("by").get<std::string>();
  v.what = j.at("what").get<std::string>();
  v.layers = layer_list(j.at("layers"), path_of(at, "layers"));
  // golden --verify-positions' bound; the cases checked are at most the record's (GoldenRecord::open)
  v.positions = int_in(j.at("positions"), path_of(at, "positions"), 0, kMaxVerifyPositions, "golden --verify-positions");
  v.cases = int_in(j.at("cases"), path_of(at, "cases"), 0, kMaxTensorDim, "cases checked");
  // The limits are judge/result.h's fixed fp32 limits (> 0); the worst values are maxima of rel_l2s and
  // KLDs that start at 0 and passed those limits (golden_spot_check.cpp)
  v.limit_rel_l2 = number_at_least_0(j.at("limit_rel_l2"), path_of(at, "limit_rel_l2"), "a rel_l2 limit", true);
  v.limit_kld = number_at_least_0(j.at("limit_kld"), path_of(at, "limit_kld"), "a KLD limit", true);
  v.worst_rel_l2 = number_at_least_0(j.at("worst_rel_l2"), path_of(at, "worst_rel_l2"), "a rel_l2");
  v.worst_kld = number_at_least_0(j.at("worst_kld"), path_of(at, "worst_kld"), "a KLD");
  v.worst_generation_kld = number_at_least_0(j.at("worst_generation_kld"), path_of(at, "worst_generation_kld"), "a KLD");
  v.generation = j.at("generation").get<std::string>();
  return v;
}

Manifest::Settings settings_from(const json& j) {
  Manifest::Settings s;
  s.layers = layer_list(j.at("layers"), "settings.layers");
  read_one_of(j, "precision", "settings", {"fp32", "fp64"}, s.precision);  // golden --precision ref (fp32) | fp64
  read_opt(j, "reference_config", s.reference_config);
  read_opt(j, "backend", s.backend);
  read_one_of(j, "gdn", "settings", gdn_names(), s.gdn);  // engine/backend.h GdnAlgo
  // golden --gen-tokens' bound (cases.h kMaxNewTokensLimit, as a prompt suite's max_new_tokens)
  if (j.contains("gen_tokens") && !j.at("gen_tokens").is_null())
    s.gen_tokens = int_in(j.at("gen_tokens"), "settings.gen_tokens", 0, kMaxNewTokensLimit, "golden --gen-tokens");
  if (j.contains("positions")) {  // golden --positions
    const json& p = j.at("positions");
    if (!p.is_string() || !valid_positions_policy(p.get<std::string>()))
      bad_value("settings.positions", "auto, all, none or a number N of at most 9 digits (golden --positions)", p);
    s.positions = p.get<std::string>();
  }
  if (j.contains("topk")) s.topk = int_in(j.at("topk"), "settings.topk", 1, kMaxRecordTopK, "golden --topk");
  if (j.contains("verification")) s.verification = verification_from(j.at("verification"));
  read_one_of(j, "batch", "settings", {"all"}, s.batch);  // absent: one case at a time (golden --batch 1)
  read_one_of(j, "cpu_isa", "settings", isa_names(), s.cpu_isa);  // util/cpu_isa.h
  s.extra = extra_of(j, {"precision", "reference_config", "backend", "gdn", "gen_tokens", "layers", "positions", "topk",
                         "verification", "batch", "cpu_isa"});
  return s;
}

json spot_check_json(const Manifest::FloorSpotCheck& c) {
  return {{"status", c.status}, {"by", c.by},   {"cases", c.cases},           {"positions", c.positions},
          {"what", c.what},     {"k", c.k},     {"worst_ratio", c.worst_ratio}};
}

Manifest::FloorSpotCheck spot_check_from(const json& j, const std::string& at) {
  Manifest::FloorSpotCheck c;
  c.status = one_of(j.at("status"), path_of(at, "status"), {"passed"});  // golden.cpp finish_manifest: written when passed
  c.by = j.at("by").get<std::string>();
  // the cases checked are at most the record's (GoldenRecord::open); positions: golden --verify-positions
  c.cases = int_in(j.at("cases"), path_of(at, "cases"), 0, kMaxTensorDim, "cases checked");
  c.positions = int_in(j.at("positions"), path_of(at, "positions"), 0, kMaxVerifyPositions, "golden --verify-positions");
  c.what = j.at("what").get<std::string>();
  c.k = number_at_least_0(j.at("k"), path_of(at, "k"), "the floor rule's multiple, golden.h kFloorCheckK", true);
  c.worst_ratio = number_at_least_0(j.at("worst_ratio"), path_of(at, "worst_ratio"), "the worst finite ratio, from 0");
  return c;
}

json floor_class_json(const Manifest::FloorClassInfo& c) {
  json j = c.extra;
  write_opt(j, "config", c.config);
  j["measured"] = c.measured;
  j["reason"] = nullable(c.reason);
  write_opt(j, "judges", c.judges);
  if (c.spot_check) j["spot_check"] = spot_check_json(*c.spot_check);
  return j;
}

Manifest::FloorClassInfo floor_class_from(const json& j, const std::string& at) {
  Manifest::FloorClassInfo c;
  c.measured = j.at("measured").get<bool>();
  if (!c.measured) c.reason = nullable_string(j.at("reason"));  // required when not measured
  else if (j.contains("reason")) c.reason = nullable_string(j.at("reason"));
  read_opt(j, "config", c.config);
  read_opt(j, "judges", c.judges);
  if (j.contains("spot_check")) c.spot_check = spot_check_from(j.at("spot_check"), path_of(at, "spot_check"));
  c.extra = extra_of(j, {"config", "measured", "reason", "judges", "spot_check"});
  return c;
}

json noise_floors_json(const Manifest::NoiseFloors& n) {
  json j = n.extra;
  write_opt(j, "status", n.status);
  j["reason"] = nullable(n.reason);
  write_opt(j, "metric", n.metric);
  j["classes"] = {{kClassNames[0], floor_class_json(n.classes[0])}, {kClassNames[1], floor_class_json(n.classes[1])}};
  return j;
}

Manifest::NoiseFloors noise_floors_from(const json& j) {
  Manifest::NoiseFloors n;
  const json& classes = j.at("classes");
  for (int fc = 0; fc < 2; ++fc)
    n.classes[fc] = floor_class_from(classes.at(kClassNames[fc]), cat("noise_floors.classes.", kClassNames[fc]));
  read_one_of(j, "status", "noise_floors", {"measured", "partial", "absent"}, n.status);  // golden.cpp manifest_head
  if (j.contains("reason")) n.reason = nullable_string(j.at("reason"));
  read_opt(j, "metric", n.metric);
  n.extra = extra_of(j, {"status", "reason", "metric", "classes"});
  return n;
}

// ---- a case's spot checks ----

json case_verification_json(const CaseVerification& v) {
  json layers = json::array();
  for (const CaseVerification::Layer& l : v.layers)
    layers.push_back({{"layer", l.layer}, {"rel_l2", l.rel_l2 ? json(*l.rel_l2) : json(nullptr)}});
  return {{"by", v.by},
          {"positions", v.positions},
          {"worst_rel_l2", v.worst_rel_l2},
          {"worst_layer", v.worst_layer},
          {"worst_kld", v.worst_kld},
          {"greedy_tokens_checked", v.greedy_tokens_checked},
          {"generation_steps_checked", v.generation_steps_checked},
          {"worst_generation_kld", v.worst_generation_kld},
          {"layers", std::move(layers)}};
}

// A list field's entries (an array, else ManifestValueError).
const json& list_at(const json& j, const char* key, const std::string& at, const char* what) {
  const json& l = j.at(key);
  if (!l.is_array()) bad_value(path_of(at, key), what, l);
  return l;
}

// A case's CPU spot check (golden_spot_check.cpp): positions at most golden --verify-positions;
// worst_layer -1 when no layer was checked; the worst values are maxima that start at 0; the tokens
// and steps checked are at most the case's generation budget (cases.h kMaxNewTokensLimit).
CaseVerification case_verification_from(const json& j, const std::string& at) {
  CaseVerification v;
  v.by = j.at("by").get<std::string>();
  v.positions = integer_in(j.at("positions"), path_of(at, "positions"), 0, kMaxVerifyPositions, "golden --verify-positions");
  v.worst_rel_l2 = number_at_least_0(j.at("worst_rel_l2"), path_of(at, "worst_rel_l2"), "a rel_l2");
  v.worst_layer = int_in(j.at("worst_layer"), path_of(at, "worst_layer"), -1, kMaxModelLayers - 1, "a layer index, or -1");
  v.worst_kld = number_at_least_0(j.at("worst_kld"), path_of(at, "worst_kld"), "a KLD");
  v.greedy_tokens_checked = integer_in(j.at("greedy_tokens_checked"), path_of(at, "greedy_tokens_checked"), 0,
                                       kMaxNewTokensLimit, "generated tokens checked");
  v.generation_steps_checked = integer_in(j.at("generation_steps_checked"), path_of(at, "generation_steps_checked"), 0,
                                          kMaxNewTokensLimit, "generation steps checked");
  v.worst_generation_kld = number_at_least_0(j.at("worst_generation_kld"), path_of(at, "worst_generation_kld"), "a KLD");
  const json& layers = list_at(j, "layers", at, "a list of checked layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string li = cat(at, ".layers[", i, "]");
    const json& l = layers.at(i);
    const json& r = l.at("rel_l2");  // null: not finite
    v.layers.push_back({int_in(l.at("layer"), path_of(li, "layer"), 0, kMaxModelLayers - 1, "a layer index"),
                        r.is_null() ? std::nullopt : std::optional<double>(number_at_least_0(r, path_of(li, "rel_l2"), "a rel_l2"))});
  }
  return v;
}

json case_floor_check_json(const CaseFloorCheck& c) {
  json layers = json::array();
  for (const CaseFloorCheck::Layer& l : c.layers)
    layers.push_back({{"layer", l.layer},
                      {"gpu_vs_emulation", json_number(l.gpu_vs_emulation)},
                      {"emulation_vs_record", json_number(l.emulation_vs_record)}});
  return {{"by", c.by},
          {"positions", c.positions},
          {"worst_ratio", json_number(c.worst_ratio)},
          {"worst_layer", c.worst_layer},
          {"layers", std::move(layers)}};
}

// A case's spot check of bf16 floors made on the GPU (golden_spot_check.cpp): rel_l2s and their
// ratio, each >= 0 or not finite ("inf", "nan": json_number).
CaseFloorCheck case_floor_check_from(const json& j, const std::string& at) {
  CaseFloorCheck c;
  c.by = j.at("by").get<std::string>();
  c.positions = integer_in(j.at("positions"), path_of(at, "positions"), 0, kMaxVerifyPositions, "golden --verify-positions");
  c.worst_ratio = measurement(j.at("worst_ratio"), path_of(at, "worst_ratio"), "ratio");
  c.worst_layer = int_in(j.at("worst_layer"), path_of(at, "worst_layer"), -1, kMaxModelLayers - 1, "a layer index, or -1");
  const json& layers = list_at(j, "layers", at, "a list of checked layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string li = cat(at, ".layers[", i, "]");
    const json& l = layers.at(i);
    c.layers.push_back({int_in(l.at("layer"), path_of(li, "layer"), 0, kMaxModelLayers - 1, "a layer index"),
                        measurement(l.at("gpu_vs_emulation"), path_of(li, "gpu_vs_emulation"), "rel_l2"),
                        measurement(l.at("emulation_vs_record"), path_of(li, "emulation_vs_record"), "rel_l2")});
  }
  return c;
}

// A case's noise floors of one class (metrics.md §1): isolated rel_l2s and mean KLDs, each >= 0
// (a negative floor makes its limit k * floor + eps negative: compare would judge the reference
// itself bad), "inf"/"nan" where the floor run was not finite, null where not measured.
CaseFloors case_floors_from(const json& j, const std::string& at) {
  CaseFloors f;
  for (int mi = 0; mi < 2; ++mi) {
    const std::string mn = kModeNames[mi];
    const std::string iso = "iso_" + mn, kld = "kld_" + mn;
    const json& l = list_at(j, iso.c_str(), at, "a list of per-layer floors");
    for (size_t i = 0; i < l.size(); ++i)
      f.iso[mi].push_back(opt_measurement(l.at(i), cat(path_of(at, iso.c_str()), "[", i, "]"), "rel_l2 noise floor"));
    f.kld[mi] = opt_measurement(j.at(kld), path_of(at, kld.c_str()), "KLD noise floor");
  }
  f.mtp_kld = opt_measurement(j.at("mtp_kld"), path_of(at, "mtp_kld"), "KLD noise floor");
  return f;
}

}  // namespace

// ---- whole parts (public) ----

void to_json(json& j, const CaseFloors& f) {
  j = json::object();
  for (int mi = 0; mi < 2; ++mi) {
    const std::string mn = kModeNames[mi];
    json arr = json::array();
    for (const std::optional<double>& v : f.iso[mi]) arr.push_back(json_number(v));
    j["iso_" + mn] = std::move(arr);
    j["kld_" + mn] = json_number(f.kld[mi]);
  }
  j["mtp_kld"] = json_number(f.mtp_kld);
}

void to_json(json& j, const Manifest::Settings& s) {
  j = s.extra;
  write_opt(j, "precision", s.precision);
  write_opt(j, "reference_config", s.reference_config);
  write_opt(j, "backend", s.backend);
  write_opt(j, "gdn", s.gdn);
  j["gen_tokens"] = s.gen_tokens ? json(*s.gen_tokens) : json(nullptr);
  j["layers"] = s.layers;
  write_opt(j, "positions", s.positions);
  write_opt(j, "topk", s.topk);
  if (s.verification) j["verification"] = verification_json(*s.verification);
  write_opt(j, "batch", s.batch);
  write_opt(j, "cpu_isa", s.cpu_isa);
}

void to_json(json& j, const Manifest::Case& c) {
  j = c.extra;
  j["id"] = c.id;
  j["index"] = c.index;
  j["input"] = c.input;
  j["opened_think"] = c.opened_think;
  j["max_new_tokens"] = c.max_new_tokens;
  j["ignore_stop"] = c.ignore_stop;
  j["sampling"] = c.sampling;
  write_opt(j, "prompt_tokens", c.prompt_tokens);
  write_opt(j, "generated_tokens", c.generated_tokens);
  j["stop_reason"] = c.stop_reason;
  j["nonfinite_logits"] = c.nonfinite_logits;
  j["positions_stored"] = c.positions_stored;
  j["file"] = c.file;
  if (!c.degeneration.is_null()) j["degeneration"] = c.degeneration;
  json floors = json::object();
  for (int fc = 0; fc < 2; ++fc) floors[kClassNames[fc]] = c.floors[fc] ? json(*c.floors[fc]) : json(nullptr);
  j["floors"] = std::move(floors);
  if (c.verification) j["verification"] = case_verification_json(*c.verification);
  if (c.floor_check) j["floor_check"] = case_floor_check_json(*c.floor_check);
}

// In the order GoldenRecord::open has always read a case.
Manifest::Case case_from_json(const json& j, const std::string& at) {
  Manifest::Case c;
  c.id = j.at("id").get<std::string>();
  // The case's place in the suite (the sampler's case index); GoldenRecord::open: below the number
  // of cases, each once.
  c.index = int_in(j.at("index"), path_of(at, "index"), 0, kMaxTensorDim, "the case's place in the suite");
  c.input = one_of(j.at("input"), path_of(at, "input"), input_names());  // cases.h CaseInput
  c.opened_think = j.at("opened_think").get<bool>();
  // A prompt suite's bound (cases.h kMaxNewTokensLimit)
  c.max_new_tokens = int_in(j.at("max_new_tokens"), path_of(at, "max_new_tokens"), 0, kMaxNewTokensLimit,
                            "a generation budget, as a prompt suite allows");
  c.ignore_stop = j.at("ignore_stop").get<bool>();
  c.sampling = j.at("sampling").get<std::string>();
  if (!sampling_only(c.sampling))  // compare re-reads it (apply_run_config) to generate as the reference did
    bad_value(path_of(at, "sampling"), "the case's sampling as golden writes it: \"\" (greedy) or temp, top_p, top_k, min_p, "
              "rep_pen, presence_pen and seed in their ranges (such as temp=0.7,seed=3)", j.at("sampling"));
  c.stop_reason = one_of(j.at("stop_reason"), path_of(at, "stop_reason"), stop_names());  // engine/generate.h StopReason
  c.nonfinite_logits = j.at("nonfinite_logits").get<bool>();
  // Positions are 32-bit (token positions of one sequence); load_case checks it against the case's tokens
  c.positions_stored = integer_in(j.at("positions_stored"), path_of(at, "positions_stored"), 0, kMaxTensorDim,
                                  "positions whose layer outputs are stored");
  c.file = j.at("file").get<std::string>();
  const json& floors = j.at("floors");
  for (int fc = 0; fc < 2; ++fc) {
    const json& fl = floors.at(kClassNames[fc]);
    if (!fl.is_null()) c.floors[fc] = case_floors_from(fl, cat(at, ".floors.", kClassNames[fc]));
  }
  // A prompt has at least one token and at most 2^31-1 (positions are 32-bit); the generated tokens are
  // at most the budget (GoldenRecord::open: at most this case's max_new_tokens)
  if (j.contains("prompt_tokens"))
    c.prompt_tokens = integer_in(j.at("prompt_tokens"), path_of(at, "prompt_tokens"), 1, kMaxTensorDim, "prompt tokens");
  if (j.contains("generated_tokens"))
    c.generated_tokens = integer_in(j.at("generated_tokens"), path_of(at, "generated_tokens"), 0, kMaxNewTokensLimit,
                                    "generated tokens, at most the budget");
  if (j.contains("degeneration")) c.degeneration = j.at("degeneration");
  if (j.contains("verification")) c.verification = case_verification_from(j.at("verification"), path_of(at, "verification"));
  if (j.contains("floor_check")) c.floor_check = case_floor_check_from(j.at("floor_check"), path_of(at, "floor_check"));
  c.extra = extra_of(j, {"id", "index", "input", "opened_think", "max_new_tokens", "ignore_stop", "sampling", "prompt_tokens",
                         "generated_tokens", "stop_reason", "nonfinite_logits", "positions_stored", "file", "degeneration",
                         "floors", "verification", "floor_check"});
  return c;
}

void from_json(const json& j, Manifest::Case& c) { c = case_from_json(j, "case"); }

void to_json(json& j, const Manifest& m) {
  j = m.extra;
  j["format"] = m.format;
  j["format_version"] = m.format_version;
  write_opt(j, "tool_version", m.tool_version);
  write_opt(j, "command", m.command);
  j["model"] = model_json(m.model);
  json tok = m.tokenizer.extra;
  tok["fingerprint"] = nullable(m.tokenizer.fingerprint);
  j["tokenizer"] = std::move(tok);
  json suite = m.suite.extra;
  suite["name"] = m.suite.name;
  write_opt(suite, "sha256", m.suite.sha256);
  write_opt(suite, "cases", m.suite.cases);
  j["suite"] = std::move(suite);
  j["settings"] = m.settings;
  j["noise_floors"] = noise_floors_json(m.noise_floors);
  j["cases"] = m.cases;
  json files = json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
  j["files"] = std::move(files);
  write_opt(j, kManifestChecksumKey, m.manifest_sha256);
}

// The parts in the order GoldenRecord::open has always read them (format, format_version and the
// checksum are checked on the JSON before this).
void from_json(const json& j, Manifest& m) {
  m = Manifest{};
  m.format = j.value("format", std::string());
  m.format_version = int_in(j.at("format_version"), "format_version", kGoldenFormatVersion, kGoldenFormatVersion,
                            "the version this tool reads");
  m.model = model_from(j.at("model"));
  const json& tok = j.at("tokenizer");
  m.tokenizer.fingerprint = nullable_string(tok.at("fingerprint"));
  m.tokenizer.extra = extra_of(tok, {"fingerprint"});
  const json& suite = j.at("suite");
  m.suite.name = suite.at("name").get<std::string>();
  read_opt(suite, "sha256", m.suite.sha256);
  // the suite's cases: the record holds an entry for each (GoldenRecord::open)
  if (suite.contains("cases")) m.suite.cases = integer_in(suite.at("cases"), "suite.cases", 1, kMaxTensorDim, "the suite's cases");
  m.suite.extra = extra_of(suite, {"name", "sha256", "cases"});
  m.settings = settings_from(j.at("settings"));
  m.noise_floors = noise_floors_from(j.at("noise_floors"));
  for (const auto& [name, info] : j.at("files").items())  // a file's size (std::filesystem's sizes are int64)
    m.files[name] = {static_cast<uint64_t>(integer_in(info.at("bytes"), cat("files.", name, ".bytes"), 0,
                                                      std::numeric_limits<int64_t>::max(), "a file size in bytes")),
                     info.at("sha256").get<std::string>()};
  const json& cases = j.at("cases");
  if (!cases.is_array()) bad_value("cases", "a list of case entries", cases);
  for (size_t i = 0; i < cases.size(); ++i) m.cases.push_back(case_from_json(cases.at(i), cat("cases[", i, "]")));
  read_opt(j, "tool_version", m.tool_version);
  read_opt(j, "command", m.command);
  read_opt(j, kManifestChecksumKey, m.manifest_sha256);
  m.extra = extra_of(j, {"format", "format_version", "tool_version", "command", "model", "tokenizer", "suite", "settings",
                         "noise_floors", "cases", "files", kManifestChecksumKey});
}

json Manifest::sealed_json() const {
  json j = *this;
  j.erase(kManifestChecksumKey);
  j[kManifestChecksumKey] = manifest_checksum(j);
  return j;
}

}  // namespace degen
