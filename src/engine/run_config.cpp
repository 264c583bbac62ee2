// RunConfig parsing, canonical printing and validation (see run_config.h).
#include "engine/run_config.h"

#include "model/shard.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "engine/faults.h"
#include "util/error.h"

namespace degen {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) { out.push_back(cur); cur.clear(); }
    else cur += c;
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\n");
  return s.substr(a, b - a + 1);
}

int parse_int(const std::string& key, const std::string& v, int lo, int hi) {
  int x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    input_error("config: ", key, "=", v, ": expected an integer in [", lo, ", ", hi, "]");
  return x;
}

double parse_num(const std::string& key, const std::string& v, double lo, double hi) {
  double x = 0;
  std::istringstream is(v);
  is >> x;
  if (v.empty() || !is.eof() || is.fail() || !(x >= lo && x <= hi))
    input_error("config: ", key, "=", v, ": expected a number in [", lo, ", ", hi, "]");
  return x;
}

uint64_t parse_u64(const std::string& key, const std::string& v) {
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty())
    input_error("config: ", key, "=", v, ": expected a non-negative integer");
  return x;
}

template <typename E>
E parse_enum(const std::string& key, const std::string& v, const std::vector<std::pair<const char*, E>>& table) {
  std::string allowed;
  for (const auto& [n, e] : table) {
    if (v == n) return e;
    allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  }
  input_error("config: ", key, "=", v, ": unknown value; expected one of ", allowed);
}

const std::vector<std::pair<const char*, AttnAlgo>> kAttn = {
    {"naive", AttnAlgo::naive}, {"flash", AttnAlgo::flash}, {"splitkv", AttnAlgo::splitkv},
    {"grouped", AttnAlgo::grouped}};
const std::vector<std::pair<const char*, GdnAlgo>> kGdn = {{"chunked", GdnAlgo::chunked}, {"recurrent", GdnAlgo::recurrent}, {"fla", GdnAlgo::fla}};
const std::vector<std::pair<const char*, DType>> kSsm = {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
const std::vector<std::pair<const char*, DType>> kConv = {{"fp32", DType::f32}, {"bf16", DType::bf16}};
const std::vector<std::pair<const char*, DType>> kKv = {{"bf16", DType::bf16}, {"fp8", DType::f8_e4m3}};
const std::vector<std::pair<const char*, BackendKind>> kBackend = {{"cpu", BackendKind::cpu}, {"cuda", BackendKind::cuda}};
const std::vector<std::pair<const char*, Precision>> kPrecision = {
    {"ref", Precision::ref}, {"fp64", Precision::fp64}, {"bf16", Precision::bf16}, {"q8_0", Precision::q8_0}};

template <typename E>
const char* enum_name(E e, const std::vector<std::pair<const char*, E>>& table) {
  for (const auto& [n, v] : table)
    if (v == e) return n;
  return "?";
}

template <typename T>
void scoped_str(std::vector<std::string>& out, const char* key, const Scoped<T>& s, const T& def, bool force_base,
                const std::vector<std::pair<const char*, T>>& table) {
  if (force_base || !(s.base == def)) out.push_back(cat(key, "=", enum_name(s.base, table)));
  for (const auto& e : s.overrides) out.push_back(cat(key, "=", enum_name(e.value, table), e.scope.str()));
}

std::string num_str(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

}  // namespace

// ---- LayerScope ----

bool LayerScope::contains(int layer, const ModelConfig* cfg) const {
  if (all) return true;
  if ((linear || full) && cfg && layer >= 0 && layer < cfg->num_layers) {
    LayerKind k = cfg->layer_types[static_cast<size_t>(layer)];
    if (linear && k == LayerKind::linear) return true;
    if (full && k == LayerKind::full) return true;
  }
  for (const auto& r : ranges)
    if (layer >= r.a && layer <= r.b) return true;
  return false;
}

std::string LayerScope::str() const {
  if (all) return "";
  std::vector<std::string> parts;
  if (linear) parts.push_back("linear");
  if (full) parts.push_back("full");
  std::vector<Range> rs = ranges;
  std::sort(rs.begin(), rs.end(), [](const Range& x, const Range& y) { return x.a < y.a || (x.a == y.a && x.b < y.b); });
  std::vector<Range> merged;
  for (const auto& r : rs) {
    if (!merged.empty() && r.a <= merged.back().b + 1) merged.back().b = std::max(merged.back().b, r.b);
    else merged.push_back(r);
  }
  for (const auto& r : merged) parts.push_back(r.a == r.b ? std::to_string(r.a) : cat(r.a, "-", r.b));
  std::string s = "@";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "+" : "") + parts[i];
  return s;
}

LayerScope LayerScope::parse(const std::string& text, const std::string& key) {
  LayerScope s;
  s.all = false;
  if (text.empty()) input_error("config: ", key, ": empty layer scope after '@'; expected e.g. @17, @12-19, @linear, @full");
  for (const std::string& part : split(text, '+')) {
    if (part == "linear") { s.linear = true; continue; }
    if (part == "full") { s.full = true; continue; }
    auto dash = part.find('-');
    std::string a = part.substr(0, dash), b = dash == std::string::npos ? a : part.substr(dash + 1);
    int ia = 0, ib = 0;
    auto r1 = std::from_chars(a.data(), a.data() + a.size(), ia);
    auto r2 = std::from_chars(b.data(), b.data() + b.size(), ib);
    if (a.empty() || b.empty() || r1.ec != std::errc() || r1.ptr != a.data() + a.size() || r2.ec != std::errc() ||
        r2.ptr != b.data() + b.size() || ia < 0 || ib < ia)
      input_error("config: ", key, ": bad layer scope '@", text, "' at '", part,
                  "'; expected layer numbers or ranges (17, 12-19), 'linear' or 'full', joined with '+'");
    s.ranges.push_back({ia, ib});
  }
  return s;
}

LayerScope LayerScope::of_layers(const std::vector<int>& layers) {
  LayerScope s;
  s.all = false;
  for (int l : layers) s.ranges.push_back({l, l});
  return s;
}

std::vector<int> LayerScope::layers(int n, const ModelConfig* cfg) const {
  std::vector<int> out;
  for (int l = 0; l < n; ++l)
    if (contains(l, cfg)) out.push_back(l);
  return out;
}

// ---- RunConfig ----

const std::vector<ToggleInfo>& toggle_table() {
  static const std::vector<ToggleInfo> t = {
      {"backend", "cpu|cuda", "where the path runs", false},
      {"precision", "ref|fp64|bf16|q8_0", "cpu: golden fp32, fp64, GPU storage emulation, or ggml Q8_0 weights; cuda: ref = the fp32 reference on the GPU", false},
      {"attn", "naive|flash|splitkv|grouped", "attention algorithm", true},
      {"gdn", "chunked|recurrent|fla", "GDN prefill algorithm (fla: chunked with flash-linear-attention's bf16 storage points; tensor cores on cuda)", true},
      {"ssm_dtype", "fp32|bf16|fp16", "recurrent state storage (default: the checkpoint's mamba_ssm_dtype, else fp32)", true},
      {"conv_dtype", "fp32|bf16", "conv window storage", true},
      {"kv_dtype", "bf16|fp8", "KV cache storage", true},
      {"mtp", "0..4", "MTP draft tokens per step (0 = off)", false},
      {"graphs", "on|off", "CUDA graphs for decode steps (cuda only; default on at tp=1 on the bf16 path)", false},
      {"gemm", "auto|cublas|simple", "matrix products (cuda only; auto: a matrix-vector kernel up to 8 rows, cuBLAS above)", false},
      {"tp", "1..64", "tensor-parallel ranks", false},
      {"batch", "1|all", "prompts one at a time or batched", false},
      {"temp", ">=0", "sampling temperature (0 = greedy)", false},
      {"top_p", "(0,1]", "nucleus sampling", false},
      {"top_k", ">=0", "top-k sampling (0 = off)", false},
      {"min_p", "[0,1]", "min-p sampling", false},
      {"rep_pen", ">0", "repetition penalty (multiplicative, as HF)", false},
      {"presence_pen", "any", "presence penalty (additive, as OpenAI)", false},
      {"seed", ">=0", "sampling seed", false},
      {"fault", "name", "inject a known bug class (see `degenbisect faults`)", true},
  };
  return t;
}

RunConfig apply_run_config(RunConfig rc, const std::string& text) {
  std::string t = trim(text);
  if (t.empty() || t == "default") return rc;
  // A key given twice in one text would silently keep the last: refused, except for fault (several
  // faults) and layer-scoped entries (attn=flash,attn=naive@3: the base, then layer 3), which may
  // repeat a key for other layers but not for the same scope (the same layers twice). An unscoped
  // entry after scoped ones replaces them (documented: the later entry wins on the layers it covers).
  std::map<std::string, std::vector<std::string>> seen;  // key -> scopes given ("" unscoped), in order
  for (std::string item : split(t, ',')) {
    item = trim(item);
    if (item.empty()) input_error("config: empty entry in '", text, "' (two commas in a row?)");
    auto eq = item.find('=');
    if (eq == std::string::npos) input_error("config: '", item, "': expected key=value");
    std::string key = trim(item.substr(0, eq)), val = trim(item.substr(eq + 1));
    std::optional<LayerScope> scope;
    auto at = val.find('@');
    if (at != std::string::npos) {
      scope = LayerScope::parse(val.substr(at + 1), key);
      val = val.substr(0, at);
    }
    const ToggleInfo* info = nullptr;
    for (const auto& ti : toggle_table())
      if (key == ti.key) info = &ti;
    if (!info) {
      std::string keys;
      for (const auto& ti : toggle_table()) keys += (keys.empty() ? "" : ", ") + std::string(ti.key);
      input_error("config: unknown key '", key, "'; expected one of ", keys);
    }
    if (scope && !info->scoped) input_error("config: ", key, " cannot be scoped to layers ('@' in '", item, "')");
    if (key != "fault") {
      std::vector<std::string>& given = seen[key];
      const std::string sc = scope ? scope->str() : "";
      const bool clash = std::find(given.begin(), given.end(), sc) != given.end();
      if (clash)
        input_error("config: key '", key, "' is given twice in '", text, "' (", key, "=", val, sc, " after an earlier ", key,
                    "=...", sc, "); expected each key once (a scoped toggle may repeat for other layers: "
                    "attn=flash,attn=naive@3)");
      given.push_back(sc);
    }
    auto set_scoped = [&](auto& field, auto value) {
      if (scope) field.overrides.push_back({value, *scope});
      else { field.base = value; field.overrides.clear(); }
    };
    if (key == "backend") rc.backend = parse_enum(key, val, kBackend);
    else if (key == "precision") { rc.precision = parse_enum(key, val, kPrecision); rc.precision_set = true; }
    else if (key == "attn") set_scoped(rc.attn, parse_enum(key, val, kAttn));
    else if (key == "gdn") set_scoped(rc.gdn, parse_enum(key, val, kGdn));
    else if (key == "ssm_dtype") { set_scoped(rc.ssm_dtype, parse_enum(key, val, kSsm)); if (!scope) rc.ssm_dtype_set = true; }
    else if (key == "conv_dtype") { set_scoped(rc.conv_dtype, parse_enum(key, val, kConv)); if (!scope) rc.conv_dtype_set = true; }
    else if (key == "kv_dtype") set_scoped(rc.kv_dtype, parse_enum(key, val, kKv));
    else if (key == "mtp") rc.mtp = parse_int(key, val, 0, 4);
    else if (key == "graphs") rc.graphs = parse_enum<bool>(key, val, {{"on", true}, {"off", false}});
    else if (key == "gemm") {
      if (val != "auto" && val != "cublas" && val != "simple")
        input_error("config: gemm=", val, ": unknown value; expected one of auto, cublas, simple");
      rc.gemm = val;
    }
    else if (key == "tp") rc.tp = parse_int(key, val, 1, 64);
    else if (key == "batch") rc.batch = parse_enum<BatchMode>(key, val, {{"1", BatchMode::one}, {"all", BatchMode::all}});
    else if (key == "temp") rc.sampling.temperature = parse_num(key, val, 0, 100);
    else if (key == "top_p") {
      rc.sampling.top_p = parse_num(key, val, 0, 1);
      if (rc.sampling.top_p <= 0) input_error("config: top_p=", val, ": expected a number in (0, 1]");
    } else if (key == "top_k") rc.sampling.top_k = parse_int(key, val, 0, 1 << 30);
    else if (key == "min_p") rc.sampling.min_p = parse_num(key, val, 0, 1);
    else if (key == "rep_pen") {
      rc.sampling.repetition_penalty = parse_num(key, val, 0, 100);
      if (rc.sampling.repetition_penalty <= 0) input_error("config: rep_pen=", val, ": expected a number > 0");
    } else if (key == "presence_pen") rc.sampling.presence_penalty = parse_num(key, val, -100, 100);
    else if (key == "seed") rc.sampling.seed = parse_u64(key, val);
    else if (key == "fault") {
      const auto& known = known_fault_names();
      if (std::find(known.begin(), known.end(), val) == known.end()) {
        std::string names;
        for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
        input_error("config: unknown fault '", val, "'; expected one of ", names);
      }
      rc.faults.push_back({val, scope.value_or(LayerScope{})});
    }
  }
  return rc;
}

RunConfig parse_run_config(const std::string& text) { return apply_run_config(RunConfig{}, text); }

std::string RunConfig::str() const {
  const RunConfig d;
  std::vector<std::string> out;
  if (backend != d.backend) out.push_back(cat("backend=", enum_name(backend, kBackend)));
  if (precision != d.precision || cuda_reference()) out.push_back(cat("precision=", enum_name(precision, kPrecision)));
  scoped_str(out, "attn", attn, d.attn.base, false, kAttn);
  scoped_str(out, "gdn", gdn, d.gdn.base, false, kGdn);
  scoped_str(out, "ssm_dtype", ssm_dtype, d.ssm_dtype.base, ssm_dtype_set, kSsm);
  scoped_str(out, "conv_dtype", conv_dtype, d.conv_dtype.base, conv_dtype_set, kConv);
  scoped_str(out, "kv_dtype", kv_dtype, d.kv_dtype.base, false, kKv);
  if (mtp != d.mtp) out.push_back(cat("mtp=", mtp));
  if (graphs) out.push_back(cat("graphs=", *graphs ? "on" : "off"));
  if (gemm) out.push_back(cat("gemm=", *gemm));
  if (tp != d.tp) out.push_back(cat("tp=", tp));
  if (batch != d.batch) out.push_back("batch=all");
  const SamplingParams& s = sampling;
  const SamplingParams& ds = d.sampling;
  if (s.temperature != ds.temperature) out.push_back("temp=" + num_str(s.temperature));
  if (s.top_p != ds.top_p) out.push_back("top_p=" + num_str(s.top_p));
  if (s.top_k != ds.top_k) out.push_back(cat("top_k=", s.top_k));
  if (s.min_p != ds.min_p) out.push_back("min_p=" + num_str(s.min_p));
  if (s.repetition_penalty != ds.repetition_penalty) out.push_back("rep_pen=" + num_str(s.repetition_penalty));
  if (s.presence_penalty != ds.presence_penalty) out.push_back("presence_pen=" + num_str(s.presence_penalty));
  if (s.seed != ds.seed) out.push_back(cat("seed=", s.seed));
  for (const auto& f : faults) out.push_back("fault=" + f.name + f.scope.str());
  if (out.empty()) return "default";
  std::string r;
  for (size_t i = 0; i < out.size(); ++i) r += (i ? "," : "") + out[i];
  return r;
}

DType RunConfig::ssm_dtype_at(int layer, const ModelConfig& cfg) const {
  DType base = ssm_dtype.base;
  if (!ssm_dtype_set) {
    base = DType::f32;
    if (cfg.mamba_ssm_dtype == std::optional<std::string>("bfloat16")) base = DType::bf16;
    if (cfg.mamba_ssm_dtype == std::optional<std::string>("float16")) base = DType::f16;
  }
  Scoped<DType> s{base, ssm_dtype.overrides};
  return s.at(layer, &cfg);
}

DType RunConfig::conv_dtype_at(int layer, const ModelConfig* cfg) const {
  // Unset: fp32 for the reference, bf16 (the activation dtype, as HF and the engines keep it) under
  // GPU emulation and on cuda.
  DType base = conv_dtype_set ? conv_dtype.base
                              : ((precision == Precision::bf16 || (backend == BackendKind::cuda && !cuda_reference()))
                                     ? DType::bf16
                                     : DType::f32);
  Scoped<DType> s{base, conv_dtype.overrides};
  return s.at(layer, cfg);
}

std::vector<std::string> RunConfig::faults_at(int layer, const ModelConfig* cfg) const {
  std::vector<std::string> out;
  for (const auto& f : faults)
    if (f.scope.all || (layer >= 0 && f.scope.contains(layer, cfg))) out.push_back(f.name);
  return out;
}

bool RunConfig::has_fault(const std::string& name, int layer, const ModelConfig* cfg) const {
  for (const auto& f : faults)
    if (f.name == name && (f.scope.all || (layer >= 0 && f.scope.contains(layer, cfg)))) return true;
  return false;
}

std::string RunConfig::untestable_reason(bool cuda_built) const {
  if (backend == BackendKind::cpu) {
    if (graphs) return "graphs is a CUDA toggle (backend=cuda); the CPU path has no graphs";
    if (gemm) return "gemm is a CUDA toggle (backend=cuda); the CPU path has one matrix product";
  } else {
    if (!cuda_built) return "this build has no CUDA backend (rebuild with nvcc and -DDEGEN_CUDA=ON)";
    if (precision != Precision::ref)
      return "on backend=cuda, precision is ref (the fp32 reference on the GPU) or not given (the bf16 GPU path); "
             "fp64, bf16 and q8_0 are CPU precisions";
    // note: a graph step runs rank 0 alone; every rank's all-reduces would have to be captured at once.
    if (graphs && *graphs && tp > 1) return "graphs=on with tp > 1 is not built (decode steps of several ranks are not captured)";
  }
  return "";
}

void validate_run_config(const RunConfig& rc, const ModelConfig& cfg) {
  auto check_scope = [&](const char* key, const LayerScope& s) {
    for (const auto& r : s.ranges)
      if (r.b >= cfg.num_layers)
        input_error("config: ", key, s.str(), ": layer ", r.b, " is outside the model (layers 0..", cfg.num_layers - 1, ")");
  };
  for (const auto& e : rc.attn.overrides) check_scope("attn", e.scope);
  for (const auto& e : rc.gdn.overrides) check_scope("gdn", e.scope);
  for (const auto& e : rc.ssm_dtype.overrides) check_scope("ssm_dtype", e.scope);
  for (const auto& e : rc.conv_dtype.overrides) check_scope("conv_dtype", e.scope);
  for (const auto& e : rc.kv_dtype.overrides) check_scope("kv_dtype", e.scope);
  for (const auto& f : rc.faults) check_scope("fault", f.scope);
  check_tp_split(cfg, rc.tp);
  if (rc.sampling.top_k > cfg.vocab_size)
    input_error("config: top_k=", rc.sampling.top_k, " exceeds the vocabulary (", cfg.vocab_size, ")");
}

}  // namespace degen

// ---- toggle-level views for bisection ----

namespace degen {

namespace {

template <typename T>
std::string scoped_full(const char* key, const Scoped<T>& s, const std::vector<std::pair<const char*, T>>& table,
                        bool set = true) {
  std::vector<std::string> out;
  if (set) out.push_back(cat(key, "=", enum_name(s.base, table)));
  else out.push_back(cat(key, "=auto"));
  for (const auto& e : s.overrides) out.push_back(cat(key, "=", enum_name(e.value, table), e.scope.str()));
  std::string r;
  for (size_t i = 0; i < out.size(); ++i) r += (i ? "," : "") + out[i];
  return r;
}

// Every toggle key's full fragment (defaults included), for comparing two configs key by key.
std::map<std::string, std::string> key_fragments(const RunConfig& rc) {
  std::map<std::string, std::string> m;
  m["backend"] = enum_name(rc.backend, kBackend);
  m["precision"] = rc.backend == BackendKind::cuda && !rc.cuda_reference() ? "gpu" : enum_name(rc.precision, kPrecision);
  m["attn"] = scoped_full("attn", rc.attn, kAttn);
  m["gdn"] = scoped_full("gdn", rc.gdn, kGdn);
  m["ssm_dtype"] = scoped_full("ssm_dtype", rc.ssm_dtype, kSsm, rc.ssm_dtype_set);
  m["conv_dtype"] = scoped_full("conv_dtype", rc.conv_dtype, kConv, rc.conv_dtype_set);
  m["kv_dtype"] = scoped_full("kv_dtype", rc.kv_dtype, kKv);
  m["mtp"] = std::to_string(rc.mtp);
  m["graphs"] = rc.graphs ? (*rc.graphs ? "on" : "off") : "unset";
  m["gemm"] = rc.gemm.value_or("unset");
  m["tp"] = std::to_string(rc.tp);
  m["batch"] = rc.batch == BatchMode::all ? "all" : "1";
  m["temp"] = num_str(rc.sampling.temperature);
  m["top_p"] = num_str(rc.sampling.top_p);
  m["top_k"] = std::to_string(rc.sampling.top_k);
  m["min_p"] = num_str(rc.sampling.min_p);
  m["rep_pen"] = num_str(rc.sampling.repetition_penalty);
  m["presence_pen"] = num_str(rc.sampling.presence_penalty);
  m["seed"] = std::to_string(rc.sampling.seed);
  return m;
}

bool fault_present(const RunConfig& rc, const FaultSpec& f) {
  for (const auto& g : rc.faults)
    if (g.name == f.name && g.scope.str() == f.scope.str()) return true;
  return false;
}

std::vector<int> kind_layers(const ModelConfig& cfg, LayerKind k) {
  std::vector<int> out;
  for (int l = 0; l < cfg.num_layers; ++l)
    if (cfg.layer_types[static_cast<size_t>(l)] == k) out.push_back(l);
  return out;
}

template <typename T>
void mix_scoped(Scoped<T>& dst, const Scoped<T>& src_good, const Scoped<T>& src_bad, const std::vector<int>& layers,
                const ModelConfig& cfg, T (*good_at)(const Scoped<T>&, int, const ModelConfig&),
                T (*bad_at)(const Scoped<T>&, int, const ModelConfig&)) {
  std::vector<std::pair<T, std::vector<int>>> groups;
  for (int l : layers) {
    T gb = good_at(src_good, l, cfg), bb = bad_at(src_bad, l, cfg);
    if (gb == bb) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == bb; });
    if (it == groups.end()) groups.push_back({bb, {l}});
    else it->second.push_back(l);
  }
  for (auto& [v, ls] : groups) dst.overrides.push_back({v, LayerScope::of_layers(ls)});
}

}  // namespace

bool toggle_scopable(const std::string& key) {
  if (key.rfind("fault:", 0) == 0) return true;
  for (const auto& t : toggle_table())
    if (key == t.key) return t.scoped;
  return false;
}

std::vector<int> toggle_layers(const std::string& key, const ModelConfig& cfg) {
  if (key == "attn" || key == "kv_dtype") return kind_layers(cfg, LayerKind::full);
  if (key == "gdn" || key == "ssm_dtype" || key == "conv_dtype") return kind_layers(cfg, LayerKind::linear);
  if (key.rfind("fault:", 0) == 0) {
    const FaultInfo* f = find_fault(key.substr(6));
    if (!f) return {};
    switch (f->site) {
      case FaultSite::full_layer: return kind_layers(cfg, LayerKind::full);
      case FaultSite::linear_layer: return kind_layers(cfg, LayerKind::linear);
      case FaultSite::any_layer: {
        std::vector<int> all(static_cast<size_t>(cfg.num_layers));
        for (int l = 0; l < cfg.num_layers; ++l) all[static_cast<size_t>(l)] = l;
        return all;
      }
      case FaultSite::moe_layer: {
        std::vector<int> out;
        for (int l = 0; l < cfg.num_layers; ++l)
          if (cfg.is_moe_layer(l)) out.push_back(l);
        return out;
      }
      case FaultSite::model: return {};
    }
  }
  return {};
}

std::vector<std::string> differing_toggles(const RunConfig& good, const RunConfig& bad) {
  std::vector<std::string> out;
  auto g = key_fragments(good), b = key_fragments(bad);
  for (const auto& t : toggle_table()) {
    std::string k = t.key;
    if (k == "fault") continue;
    if (g[k] != b[k]) out.push_back(k);
  }
  for (const auto& f : bad.faults)
    if (!fault_present(good, f)) out.push_back("fault:" + f.name);
  return out;
}

RunConfig mix_configs(const RunConfig& good, const RunConfig& bad, const std::vector<std::string>& keys,
                      const std::vector<int>* layers, const ModelConfig& cfg) {
  RunConfig r = good;
  auto at_attn = +[](const Scoped<AttnAlgo>& s, int l, const ModelConfig& c) { return s.at(l, &c); };
  auto at_gdn = +[](const Scoped<GdnAlgo>& s, int l, const ModelConfig& c) { return s.at(l, &c); };
  auto at_dt = +[](const Scoped<DType>& s, int l, const ModelConfig& c) { return s.at(l, &c); };
  for (const std::string& k : keys) {
    std::vector<int> where;
    if (layers) {
      std::vector<int> ok = toggle_layers(k, cfg);
      for (int l : *layers)
        if (std::find(ok.begin(), ok.end(), l) != ok.end()) where.push_back(l);
    }
    bool scoped = layers && toggle_scopable(k);
    if (k == "backend") r.backend = bad.backend;
    else if (k == "precision") { r.precision = bad.precision; r.precision_set = bad.precision_set; }
    else if (k == "attn") { if (scoped) mix_scoped(r.attn, good.attn, bad.attn, where, cfg, at_attn, at_attn); else r.attn = bad.attn; }
    else if (k == "gdn") { if (scoped) mix_scoped(r.gdn, good.gdn, bad.gdn, where, cfg, at_gdn, at_gdn); else r.gdn = bad.gdn; }
    else if (k == "kv_dtype") { if (scoped) mix_scoped(r.kv_dtype, good.kv_dtype, bad.kv_dtype, where, cfg, at_dt, at_dt); else r.kv_dtype = bad.kv_dtype; }
    else if (k == "ssm_dtype") {
      if (!scoped) { r.ssm_dtype = bad.ssm_dtype; r.ssm_dtype_set = bad.ssm_dtype_set; continue; }
      std::map<DType, std::vector<int>> by_value;  // one scoped entry per value: "ssm_dtype=bf16@0-2+5"
      for (int l : where) {
        DType gv = good.ssm_dtype_at(l, cfg), bv = bad.ssm_dtype_at(l, cfg);
        if (gv != bv) by_value[bv].push_back(l);
      }
      for (auto& [v, ls] : by_value) r.ssm_dtype.overrides.push_back({v, LayerScope::of_layers(ls)});
    } else if (k == "conv_dtype") {
      if (!scoped) { r.conv_dtype = bad.conv_dtype; r.conv_dtype_set = bad.conv_dtype_set; continue; }
      std::map<DType, std::vector<int>> by_value;
      for (int l : where) {
        DType gv = good.conv_dtype_at(l, &cfg), bv = bad.conv_dtype_at(l, &cfg);
        if (gv != bv) by_value[bv].push_back(l);
      }
      for (auto& [v, ls] : by_value) r.conv_dtype.overrides.push_back({v, LayerScope::of_layers(ls)});
    } else if (k == "mtp") r.mtp = bad.mtp;
    else if (k == "graphs") r.graphs = bad.graphs;
    else if (k == "gemm") r.gemm = bad.gemm;
    else if (k == "tp") r.tp = bad.tp;
    else if (k == "batch") r.batch = bad.batch;
    else if (k == "temp") r.sampling.temperature = bad.sampling.temperature;
    else if (k == "top_p") r.sampling.top_p = bad.sampling.top_p;
    else if (k == "top_k") r.sampling.top_k = bad.sampling.top_k;
    else if (k == "min_p") r.sampling.min_p = bad.sampling.min_p;
    else if (k == "rep_pen") r.sampling.repetition_penalty = bad.sampling.repetition_penalty;
    else if (k == "presence_pen") r.sampling.presence_penalty = bad.sampling.presence_penalty;
    else if (k == "seed") r.sampling.seed = bad.sampling.seed;
    else if (k.rfind("fault:", 0) == 0) {
      std::string name = k.substr(6);
      for (const auto& f : bad.faults) {
        if (f.name != name || fault_present(good, f)) continue;
        if (!layers) { r.faults.push_back(f); continue; }
        std::vector<int> sel;
        for (int l : where)
          if (f.scope.contains(l, &cfg)) sel.push_back(l);
        if (!sel.empty()) r.faults.push_back({name, LayerScope::of_layers(sel)});
        else if (toggle_layers(k, cfg).empty()) r.faults.push_back(f);  // model-level: not scopable
      }
    } else {
      throw std::logic_error("mix_configs: unknown toggle key " + k);
    }
  }
  return r;
}

}  // namespace degen
