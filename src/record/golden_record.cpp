// The reader of golden records (golden_record.h).
#include "record/golden_record.h"

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "record/forced_mode.h"
#include "engine/run_config.h"
#include "engine/trace.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"

namespace degen {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<int32_t> GoldenCase::sequence() const {
  std::vector<int32_t> s = prompt;
  s.insert(s.end(), continuation.begin(), continuation.end());
  return s;
}

namespace {

// manifest.json of the record folder `dir`, parsed (InputError when there is none or it is not JSON).
json read_manifest_json(const fs::path& dir) {
  const fs::path mpath = dir / "manifest.json";
  if (!fs::is_directory(dir)) input_error("golden record ", dir.string(), ": not a folder");
  if (!fs::exists(mpath)) input_error("golden record ", dir.string(), ": no manifest.json (not a golden record, or an interrupted write)");
  try {
    return parse_json(read_file(mpath, kMaxInputFileBytes), mpath.string());
  } catch (const json::parse_error& e) {
    input_error(mpath.string(), ": not valid JSON (edited or truncated?): ", e.what());
  }
}

// The format and version this tool reads, and the manifest's own checksum (before any of its values
// is used: its noise floors, settings and the data files' checksums are what every verdict rests
// on). Returns whether it had a checksum (records made before it are read unverified).
bool check_manifest_json(const json& m, const fs::path& dir, const std::string& where) {
  if (m.value("format", "") != kGoldenFormat)
    input_error(where, ": expected format \"", kGoldenFormat, "\", found ", m.contains("format") ? m["format"].dump() : "none");
  // Compared as the JSON integer it is (read as int, 2^32 + 1 was version 1)
  const json& version = m.at("format_version");
  if (!version.is_number_unsigned() || version.get<uint64_t>() != static_cast<uint64_t>(kGoldenFormatVersion))
    input_error(where, ": field 'format_version': expected ", kGoldenFormatVersion, " (the version this tool reads), found ",
                json_excerpt(version), " (regenerate the record with `degenbisect golden`)");
  if (!m.contains(kManifestChecksumKey)) return false;
  const json& want = m[kManifestChecksumKey];
  if (!want.is_string())
    input_error(where, ": ", kManifestChecksumKey, " is ", want.dump(), ", expected a SHA-256 as 64 hex digits");
  const std::string got = manifest_checksum(m);
  if (got != want.get<std::string>())
    input_error("golden record ", dir.string(), ": manifest.json does not match its own checksum (", kManifestChecksumKey,
                " ", want.get<std::string>(), ", its content hashes to ", got,
                "): the manifest was edited after it was written (noise floors, settings, cases or file checksums); "
                "refusing it; regenerate the record with `degenbisect golden`");
  return true;
}

// A value whose range depends on another field of the manifest (what from_json cannot see).
[[noreturn]] void inconsistent(const std::string& where, const std::string& field, const std::string& expected,
                               const std::string& found) {
  input_error(where, ": field '", field, "': expected ", expected, ", found ", found,
              " (the manifest contradicts itself: damaged, or edited and its checksum recomputed; regenerate the record)");
}

// The ranges that span fields (record_manifest.cpp checks each field alone): every layer index inside
// the model; one entry per case of the suite, each id, data file and index once; a case's generated
// tokens within its budget and its stored positions within its tokens; the spot checks' case counts
// within the record's cases.
void check_manifest_ranges(const Manifest& m, const std::string& where) {
  const int L = m.model.num_hidden_layers;
  const int64_t n = static_cast<int64_t>(m.cases.size());
  auto layer = [&](int li, const std::string& field, bool none_ok) {
    if (li >= L || li < (none_ok ? -1 : 0))
      inconsistent(where, field, cat("a layer of the ", L, "-layer model (0..", L - 1, none_ok ? ", or -1" : "", ")"), cat(li));
  };
  for (size_t i = 0; i < m.settings.layers.size(); ++i) layer(m.settings.layers[i], cat("settings.layers[", i, "]"), false);
  if (m.suite.cases && *m.suite.cases != n)
    inconsistent(where, "suite.cases", cat(n, " (the record's case entries: one per case of the suite)"), cat(*m.suite.cases));
  if (const auto& v = m.settings.verification; v && v->passed()) {
    for (size_t i = 0; i < v->layers.size(); ++i) layer(v->layers[i], cat("settings.verification.layers[", i, "]"), false);
    if (v->cases > n) inconsistent(where, "settings.verification.cases", cat("at most the record's ", n, " cases"), cat(v->cases));
  }
  for (int fc = 0; fc < 2; ++fc)
    if (const auto& sc = m.noise_floors.classes[fc].spot_check; sc && sc->cases > n)
      inconsistent(where, cat("noise_floors.classes.", floor_class_name(static_cast<FloorClass>(fc)), ".spot_check.cases"),
                   cat("at most the record's ", n, " cases"), cat(sc->cases));
  std::map<std::string, size_t> ids, files;
  std::vector<bool> index_seen(m.cases.size(), false);
  for (size_t i = 0; i < m.cases.size(); ++i) {
    const Manifest::Case& c = m.cases[i];
    const std::string at = cat("cases[", i, "]");
    if (auto [it, fresh] = ids.emplace(c.id, i); !fresh)
      inconsistent(where, at + ".id", cat("an id of its own (the suite's ids are unique)"), cat("'", c.id, "', the id of cases[", it->second, "]"));
    if (auto [it, fresh] = files.emplace(c.file, i); !fresh)
      inconsistent(where, at + ".file", "a data file of its own", cat("'", c.file, "', the file of cases[", it->second, "]"));
    if (c.index >= n || index_seen[static_cast<size_t>(c.index)])
      inconsistent(where, at + ".index", cat("the case's place in the suite, below ", n, " and each once"), cat(c.index));
    index_seen[static_cast<size_t>(c.index)] = true;
    if (c.generated_tokens && *c.generated_tokens > c.max_new_tokens)
      inconsistent(where, at + ".generated_tokens", cat("at most the case's max_new_tokens (", c.max_new_tokens, ")"),
                   cat(*c.generated_tokens));
    if (c.prompt_tokens && c.generated_tokens && c.positions_stored > *c.prompt_tokens + *c.generated_tokens)
      inconsistent(where, at + ".positions_stored", cat("at most the case's ", *c.prompt_tokens + *c.generated_tokens, " tokens"),
                   cat(c.positions_stored));
    if (c.verification) {
      layer(c.verification->worst_layer, at + ".verification.worst_layer", true);
      for (size_t k = 0; k < c.verification->layers.size(); ++k)
        layer(c.verification->layers[k].layer, cat(at, ".verification.layers[", k, "].layer"), false);
    }
    if (c.floor_check) {
      layer(c.floor_check->worst_layer, at + ".floor_check.worst_layer", true);
      for (size_t k = 0; k < c.floor_check->layers.size(); ++k)
        layer(c.floor_check->layers[k].layer, cat(at, ".floor_check.layers[", k, "].layer"), false);
    }
  }
}

// What the parts of a parsed manifest must agree on: stored layers inside the model, each case's
// data file among the checksummed files, floors where the record says they were measured, one
// isolated floor per layer.
void check_manifest_consistency(const Manifest& m, const std::string& where) {
  const int L = m.model.num_hidden_layers;
  check_manifest_ranges(m, where);
  for (const Manifest::Case& c : m.cases) {
    if (!m.files.count(c.file)) input_error(where, ": case '", c.id, "': data file ", c.file, " has no checksum in 'files'");
    for (int fc = 0; fc < 2; ++fc) {
      const char* cn = floor_class_name(static_cast<FloorClass>(fc));
      if (!c.floors[fc]) {
        if (m.noise_floors.classes[fc].measured)
          input_error(where, ": case '", c.id, "' has no ", cn, " floors although the record says they were measured");
        continue;
      }
      for (ForcedMode md : {ForcedMode::prefill, ForcedMode::decode}) {
        const size_t n = c.floors[fc]->iso[static_cast<int>(md)].size();
        if (static_cast<int>(n) != L)
          input_error(where, ": case '", c.id, "': floors.", cn, ".iso_", forced_mode_name(md), " has ", n, " entries, expected ", L);
      }
    }
  }
}

// Every data file: inside the folder, present, same size, same SHA-256.
void check_data_files(const fs::path& dir, const Manifest& m, const std::string& where) {
  for (const auto& [name, info] : m.files) {
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
      input_error(where, ": file name '", name, "' leaves the record folder");
    const fs::path p = dir / name;
    if (!fs::exists(p)) input_error("golden record ", dir.string(), ": data file ", name, " is missing");
    const std::string bytes = read_file(p);
    if (bytes.size() != info.bytes)
      input_error("golden record ", dir.string(), ": ", name, " has ", bytes.size(), " bytes, the manifest says ", info.bytes,
                  " (truncated or replaced; regenerate the record)");
    const std::string h = sha256_hex(bytes);
    if (h != info.sha256)
      input_error("golden record ", dir.string(), ": ", name, " does not match its checksum in manifest.json (SHA-256 ",
                  h, ", expected ", info.sha256, "): the file was edited or corrupted");
  }
}

GoldenCase case_metadata(const Manifest::Case& mc) {
  GoldenCase c;
  c.id = mc.id;
  c.index = mc.index;
  c.input = mc.input;
  c.opened_think = mc.opened_think;
  c.max_new_tokens = mc.max_new_tokens;
  c.ignore_stop = mc.ignore_stop;
  c.sampling = mc.sampling;
  c.sampling_params = parse_run_config(mc.sampling).sampling;  // the manifest checked it (sampling_only)
  c.stop_reason = mc.stop_reason;
  c.nonfinite_logits = mc.nonfinite_logits;
  c.P = mc.positions_stored;
  c.file = mc.file;
  for (int fc = 0; fc < 2; ++fc) c.floors[fc] = mc.floors[fc];
  return c;
}

}  // namespace

GoldenRecord GoldenRecord::open(const fs::path& dir) {
  GoldenRecord g;
  g.dir_ = dir;
  const json m = read_manifest_json(dir);
  const std::string where = (dir / "manifest.json").string();
  try {
    g.manifest_checked_ = check_manifest_json(m, dir, where);
    g.manifest_ = m.get<Manifest>();
    check_manifest_consistency(g.manifest_, where);
    check_data_files(dir, g.manifest_, where);
  } catch (const ManifestValueError& e) {
    input_error(where, ": ", e.what(), "; refusing the record (damaged, or edited and its checksum recomputed; regenerate it "
                "with `degenbisect golden`)");
  } catch (const json::exception& e) {
    input_error(where, ": malformed manifest (edited?): ", e.what());
  } catch (const std::invalid_argument& e) {
    input_error(where, ": malformed manifest (edited?): ", e.what());
  }
  const Manifest& man = g.manifest_;
  g.identity_ = manifest_identity(m);
  g.tok_fp_ = man.tokenizer.fingerprint.value_or("");
  g.stored_.assign(static_cast<size_t>(man.model.num_hidden_layers), false);
  for (int li : man.settings.layers) g.stored_[static_cast<size_t>(li)] = true;
  for (int fc = 0; fc < 2; ++fc)
    if (!man.noise_floors.classes[fc].measured) g.floors_reason_[fc] = man.noise_floors.classes[fc].reason.value_or("");
  for (const Manifest::Case& mc : man.cases) g.cases_.push_back(case_metadata(mc));
  if (g.cases_.empty()) input_error(where, ": the record has no cases");
  return g;
}

const std::string& GoldenRecord::weights_sample() const {
  static const std::string none;
  return manifest_.model.weights_sample ? *manifest_.model.weights_sample : none;
}

const std::map<std::string, std::string>& GoldenRecord::tensor_digests() const {
  static const std::map<std::string, std::string> none;
  return manifest_.model.tensor_digests ? *manifest_.model.tensor_digests : none;
}

namespace {

// Every number of a case's data is checked before use (finiteness and range; issue 40): a record is
// only checksummed, not proven, and the comparisons downstream treat a NaN or a positive log-prob as
// a bug of their own. Per position and rank, a top-K row must be a log-probability: -inf (an id of
// probability 0) or finite and at most kMaxStoredLogprob, with no id twice; lse finite; lse_pad >= 0
// or not finite (NaN: a padding logit was not finite, golden.h); the layer outputs and their norms
// finite (norms >= 0). InputError naming the file, the case, the tensor, the position (and rank).
void check_topk_numbers(const TopKBlock& b, const std::string& where, const char* prefix) {
  const size_t K = static_cast<size_t>(b.K);
  for (size_t r = 0; K > 0 && r < b.logprobs.size() / K; ++r) {
    for (size_t k = 0; k < K; ++k) {
      const float lp = b.logprobs[r * K + k];
      if (std::isnan(lp) || lp > kMaxStoredLogprob)
        input_error(where, ": tensor '", prefix, "topk_logprobs' at position ", r, ", rank ", k, " (id ", b.ids[r * K + k],
                    ") is ", lp, "; expected a log-probability (-inf, or finite and at most ", kMaxStoredLogprob,
                    "): the record is damaged or was not written by degenbisect golden");
      for (size_t j = 0; j < k; ++j)
        if (b.ids[r * K + j] == b.ids[r * K + k])
          input_error(where, ": tensor '", prefix, "topk_ids' at position ", r, " holds id ", b.ids[r * K + k], " twice (ranks ",
                      j, " and ", k, "); expected K different ids");
    }
  }
  for (size_t r = 0; r < b.lse.size(); ++r)
    if (!std::isfinite(b.lse[r]))
      input_error(where, ": tensor '", prefix, "lse' at position ", r, " is ", b.lse[r], "; expected a finite log-sum-exp");
  for (size_t r = 0; r < b.lse_pad.size(); ++r)
    if (b.lse_pad[r] < 0)
      input_error(where, ": tensor '", prefix, "lse_pad' at position ", r, " is ", b.lse_pad[r],
                  "; expected >= 0 (the padding rows' share, log1p(padding mass / real mass)) or NaN");
}

void check_record_numbers(const GoldenCase& c, const std::string& where, int64_t T, int layers) {
  check_topk_numbers(c.topk, where, "");
  check_topk_numbers(c.mtp_topk, where, "mtp_");
  auto finite = [&](const std::vector<float>& v, const std::string& name, int64_t row_len) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        input_error(where, ": tensor '", name, "' at position ", static_cast<int64_t>(i) / row_len, " is ", v[i],
                    "; expected a finite value (the reference's own run was finite)");
  };
  if (c.P > 0 && !c.embed.empty()) finite(c.embed, "embed", static_cast<int64_t>(c.embed.size()) / c.P);
  for (size_t l = 0; l < c.l_out.size(); ++l)
    if (!c.l_out[l].empty()) finite(c.l_out[l], trace_name(Step::l_out, static_cast<int>(l)), static_cast<int64_t>(c.l_out[l].size()) / c.P);
  for (int l = 0; l < layers; ++l)
    for (int64_t t = 0; t < T; ++t) {
      const float v = c.l_out_norm[static_cast<size_t>(l * T + t)];
      if (!std::isfinite(v) || v < 0)
        input_error(where, ": tensor 'l_out_norm' at layer ", l, ", position ", t, " is ", v,
                    "; expected a finite norm >= 0");
    }
}

}  // namespace

GoldenCase GoldenRecord::load_case(size_t i, bool with_layers) const {
  GoldenCase c = cases_.at(i);
  auto f = SafetensorsFile::open(dir_ / c.file);
  const std::string where = cat("golden record ", dir_.string(), ": ", c.file, " (case '", c.id, "')");
  auto get = [&](const std::string& name, DType dt, std::vector<int64_t> shape, bool required) -> const TensorView* {
    const TensorView* t = f->find(name);
    if (!t) {
      if (required) input_error(where, ": tensor '", name, "' is missing");
      return nullptr;
    }
    if (t->dtype != dt) input_error(where, ": tensor '", name, "' is ", dtype_name(t->dtype), ", expected ", dtype_name(dt));
    for (size_t k = 0; k < shape.size(); ++k)
      if (shape[k] < 0) shape[k] = k < t->shape.size() ? t->shape[k] : -1;
    if (t->shape != shape) input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), ", expected ", shape_str(shape));
    return t;
  };
  // note: an empty tensor has no data (memcpy from or to nullptr is undefined even for 0 bytes)
  auto i32 = [](const TensorView* t) {
    std::vector<int32_t> v(static_cast<size_t>(t->numel()));
    if (t->nbytes > 0) std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  };
  auto f32 = [](const TensorView* t) {
    std::vector<float> v(static_cast<size_t>(t->numel()));
    if (t->nbytes > 0) std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  };
  c.prompt = i32(get("prompt", DType::i32, {-1}, true));
  if (c.prompt.empty()) input_error(where, ": tensor 'prompt' is empty; expected at least one prompt token");
  c.continuation = i32(get("continuation", DType::i32, {-1}, true));
  const int64_t T = static_cast<int64_t>(c.prompt.size() + c.continuation.size());
  const TensorView* ti = get("topk_ids", DType::i32, {T, -1}, true);
  const int K = static_cast<int>(ti->shape[1]);
  if (K < 1) input_error(where, ": topk_ids has no columns");
  c.topk.K = K;
  c.topk.ids = i32(ti);
  c.topk.logprobs = f32(get("topk_logprobs", DType::f32, {T, K}, true));
  c.topk.lse = f32(get("lse", DType::f32, {T}, true));
  if (const TensorView* lv = get("lse_pad", DType::f32, {T}, false)) c.topk.lse_pad = f32(lv);  // absent: older record
  if (const TensorView* m = get("mtp_topk_ids", DType::i32, {T - 1, K}, false)) {
    c.mtp_topk.K = K;
    c.mtp_topk.ids = i32(m);
    c.mtp_topk.logprobs = f32(get("mtp_topk_logprobs", DType::f32, {T - 1, K}, true));
    c.mtp_topk.lse = f32(get("mtp_lse", DType::f32, {T - 1}, true));
    if (const TensorView* lv = get("mtp_lse_pad", DType::f32, {T - 1}, false)) c.mtp_topk.lse_pad = f32(lv);
  }
  if (c.P < 0 || c.P > T) input_error(where, ": positions_stored ", c.P, " outside [0, ", T, "]");
  c.l_out.resize(static_cast<size_t>(num_layers()));
  if (c.P > 0 && with_layers) {
    if (const TensorView* e = get("embed", DType::f32, {c.P, hidden()}, false)) c.embed = f32(e);
    for (int l = 0; l < num_layers(); ++l)
      if (stored_[static_cast<size_t>(l)]) c.l_out[l] = f32(get(trace_name(Step::l_out, l), DType::f32, {c.P, hidden()}, true));
  }
  c.l_out_norm = f32(get("l_out_norm", DType::f32, {num_layers(), T}, true));
  check_record_numbers(c, where, T, num_layers());
  for (int32_t id : c.sequence())
    if (id < 0 || id >= vocab()) input_error(where, ": token id ", id, " outside the record's vocabulary [0, ", vocab(), ")");
  for (int32_t id : c.mtp_topk.ids)
    if (id < 0 || id >= vocab()) input_error(where, ": MTP top-K id ", id, " outside the record's vocabulary [0, ", vocab(), ")");
  for (int32_t id : c.topk.ids)
    if (id < 0 || id >= vocab()) input_error(where, ": top-K id ", id, " outside the record's vocabulary [0, ", vocab(), ")");
  return c;
}

}  // namespace degen
