// The golden record's manifest as a type (record_manifest.h): its one (de)serialisation and checksum.
#include "diag/record_manifest.h"

#include <initializer_list>

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
std::optional<double> opt_number(const json& j) {
  if (j.is_null()) return std::nullopt;
  return number_from_json(j);
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
  m.num_hidden_layers = j.at("num_hidden_layers").get<int>();
  m.hidden_size = j.at("hidden_size").get<int64_t>();
  m.vocab_size = j.at("vocab_size").get<int64_t>();
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
  Manifest::Verification v;
  v.status = j.at("status").get<std::string>();
  read_opt(j, "reason", v.reason);
  if (!v.passed()) return v;
  v.by = j.at("by").get<std::string>();
  v.what = j.at("what").get<std::string>();
  v.layers = j.at("layers").get<std::vector<int>>();
  v.positions = j.at("positions").get<int>();
  v.cases = j.at("cases").get<int>();
  v.limit_rel_l2 = j.at("limit_rel_l2").get<double>();
  v.limit_kld = j.at("limit_kld").get<double>();
  v.worst_rel_l2 = j.at("worst_rel_l2").get<double>();
  v.worst_kld = j.at("worst_kld").get<double>();
  v.worst_generation_kld = j.at("worst_generation_kld").get<double>();
  v.generation = j.at("generation").get<std::string>();
  return v;
}

Manifest::Settings settings_from(const json& j) {
  Manifest::Settings s;
  s.layers = j.at("layers").get<std::vector<int>>();
  read_opt(j, "precision", s.precision);
  read_opt(j, "reference_config", s.reference_config);
  read_opt(j, "backend", s.backend);
  read_opt(j, "gdn", s.gdn);
  if (j.contains("gen_tokens") && !j.at("gen_tokens").is_null()) s.gen_tokens = j.at("gen_tokens").get<int>();
  read_opt(j, "positions", s.positions);
  read_opt(j, "topk", s.topk);
  if (j.contains("verification")) s.verification = verification_from(j.at("verification"));
  read_opt(j, "batch", s.batch);
  read_opt(j, "cpu_isa", s.cpu_isa);
  s.extra = extra_of(j, {"precision", "reference_config", "backend", "gdn", "gen_tokens", "layers", "positions", "topk",
                         "verification", "batch", "cpu_isa"});
  return s;
}

json spot_check_json(const Manifest::FloorSpotCheck& c) {
  return {{"status", c.status}, {"by", c.by},   {"cases", c.cases},           {"positions", c.positions},
          {"what", c.what},     {"k", c.k},     {"worst_ratio", c.worst_ratio}};
}

Manifest::FloorSpotCheck spot_check_from(const json& j) {
  Manifest::FloorSpotCheck c;
  c.status = j.at("status").get<std::string>();
  c.by = j.at("by").get<std::string>();
  c.cases = j.at("cases").get<int>();
  c.positions = j.at("positions").get<int>();
  c.what = j.at("what").get<std::string>();
  c.k = j.at("k").get<double>();
  c.worst_ratio = j.at("worst_ratio").get<double>();
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

Manifest::FloorClassInfo floor_class_from(const json& j) {
  Manifest::FloorClassInfo c;
  c.measured = j.at("measured").get<bool>();
  if (!c.measured) c.reason = nullable_string(j.at("reason"));  // required when not measured
  else if (j.contains("reason")) c.reason = nullable_string(j.at("reason"));
  read_opt(j, "config", c.config);
  read_opt(j, "judges", c.judges);
  if (j.contains("spot_check")) c.spot_check = spot_check_from(j.at("spot_check"));
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
  for (int fc = 0; fc < 2; ++fc) n.classes[fc] = floor_class_from(classes.at(kClassNames[fc]));
  read_opt(j, "status", n.status);
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

CaseVerification case_verification_from(const json& j) {
  CaseVerification v;
  v.by = j.at("by").get<std::string>();
  v.positions = j.at("positions").get<int64_t>();
  v.worst_rel_l2 = j.at("worst_rel_l2").get<double>();
  v.worst_layer = j.at("worst_layer").get<int>();
  v.worst_kld = j.at("worst_kld").get<double>();
  v.greedy_tokens_checked = j.at("greedy_tokens_checked").get<int64_t>();
  v.generation_steps_checked = j.at("generation_steps_checked").get<int64_t>();
  v.worst_generation_kld = j.at("worst_generation_kld").get<double>();
  for (const json& l : j.at("layers")) {
    const json& r = l.at("rel_l2");
    v.layers.push_back({l.at("layer").get<int>(), r.is_null() ? std::nullopt : std::optional<double>(r.get<double>())});
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

CaseFloorCheck case_floor_check_from(const json& j) {
  CaseFloorCheck c;
  c.by = j.at("by").get<std::string>();
  c.positions = j.at("positions").get<int64_t>();
  c.worst_ratio = number_from_json(j.at("worst_ratio"));
  c.worst_layer = j.at("worst_layer").get<int>();
  for (const json& l : j.at("layers"))
    c.layers.push_back({l.at("layer").get<int>(), number_from_json(l.at("gpu_vs_emulation")),
                        number_from_json(l.at("emulation_vs_record"))});
  return c;
}

CaseFloors case_floors_from(const json& j) {
  CaseFloors f;
  for (int mi = 0; mi < 2; ++mi) {
    const std::string mn = kModeNames[mi];
    for (const json& v : j.at("iso_" + mn)) f.iso[mi].push_back(opt_number(v));
    f.kld[mi] = opt_number(j.at("kld_" + mn));
  }
  f.mtp_kld = opt_number(j.at("mtp_kld"));
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
void from_json(const json& j, Manifest::Case& c) {
  c = Manifest::Case{};
  c.id = j.at("id").get<std::string>();
  c.index = j.at("index").get<int>();
  c.input = j.at("input").get<std::string>();
  c.opened_think = j.at("opened_think").get<bool>();
  c.max_new_tokens = j.at("max_new_tokens").get<int>();
  c.ignore_stop = j.at("ignore_stop").get<bool>();
  c.sampling = j.at("sampling").get<std::string>();
  c.stop_reason = j.at("stop_reason").get<std::string>();
  c.nonfinite_logits = j.at("nonfinite_logits").get<bool>();
  c.positions_stored = j.at("positions_stored").get<int64_t>();
  c.file = j.at("file").get<std::string>();
  const json& floors = j.at("floors");
  for (int fc = 0; fc < 2; ++fc) {
    const json& fl = floors.at(kClassNames[fc]);
    if (!fl.is_null()) c.floors[fc] = case_floors_from(fl);
  }
  read_opt(j, "prompt_tokens", c.prompt_tokens);
  read_opt(j, "generated_tokens", c.generated_tokens);
  if (j.contains("degeneration")) c.degeneration = j.at("degeneration");
  if (j.contains("verification")) c.verification = case_verification_from(j.at("verification"));
  if (j.contains("floor_check")) c.floor_check = case_floor_check_from(j.at("floor_check"));
  c.extra = extra_of(j, {"id", "index", "input", "opened_think", "max_new_tokens", "ignore_stop", "sampling", "prompt_tokens",
                         "generated_tokens", "stop_reason", "nonfinite_logits", "positions_stored", "file", "degeneration",
                         "floors", "verification", "floor_check"});
}

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
  m.format_version = j.at("format_version").get<int>();
  m.model = model_from(j.at("model"));
  const json& tok = j.at("tokenizer");
  m.tokenizer.fingerprint = nullable_string(tok.at("fingerprint"));
  m.tokenizer.extra = extra_of(tok, {"fingerprint"});
  const json& suite = j.at("suite");
  m.suite.name = suite.at("name").get<std::string>();
  read_opt(suite, "sha256", m.suite.sha256);
  read_opt(suite, "cases", m.suite.cases);
  m.suite.extra = extra_of(suite, {"name", "sha256", "cases"});
  m.settings = settings_from(j.at("settings"));
  m.noise_floors = noise_floors_from(j.at("noise_floors"));
  for (const auto& [name, info] : j.at("files").items())
    m.files[name] = {info.at("bytes").get<uint64_t>(), info.at("sha256").get<std::string>()};
  m.cases = j.at("cases").get<std::vector<Manifest::Case>>();
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
