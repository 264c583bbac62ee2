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
    const Toggle* toggle = find_toggle(key);
    if (!toggle) input_error("config: unknown key '", key, "'; expected one of ", toggle_keys([](const Toggle&) { return true; }));
    if (scope && !toggle->scoped()) input_error("config: ", key, " cannot be scoped to layers ('@' in '", item, "')");
    if (!toggle->repeats) {
      std::vector<std::string>& given = seen[key];
      const std::string sc = scope ? scope->str() : "";
      const bool clash = std::find(given.begin(), given.end(), sc) != given.end();
      if (clash)
        input_error("config: key '", key, "' is given twice in '", text, "' (", key, "=", val, sc, " after an earlier ", key,
                    "=...", sc, "); expected each key once (a scoped toggle may repeat for other layers: "
                    "attn=flash,attn=naive@3)");
      given.push_back(sc);
    }
    toggle->parse(rc, val, scope ? &*scope : nullptr);
  }
  return rc;
}

RunConfig parse_run_config(const std::string& text) { return apply_run_config(RunConfig{}, text); }

std::string RunConfig::str() const {
  std::vector<std::string> out;
  for (const Toggle& t : toggles()) t.print(*this, out);
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
  for (const Toggle& t : toggles()) {  // the layer scopes first, every toggle's
    if (!t.scopes) continue;
    for (const LayerScope* s : t.scopes(rc))
      for (const auto& r : s->ranges)
        if (r.b >= cfg.num_layers)
          input_error("config: ", t.key, s->str(), ": layer ", r.b, " is outside the model (layers 0..", cfg.num_layers - 1, ")");
  }
  for (const Toggle& t : toggles())
    if (t.validate) t.validate(rc, cfg);
}

void check_run_config(const RunConfig& rc, const ModelConfig& cfg, bool cuda_built) {
  validate_run_config(rc, cfg);  // includes the tp split check (InputError naming the dimension)
  if (const std::string why = rc.untestable_reason(cuda_built); !why.empty())
    throw UntestableError(cat("config ", rc.str(), ": ", why));
  check_faults(rc, cfg);  // InputError / UntestableError before anything runs
}

}  // namespace degen

// ---- toggle-level views for bisection ----

namespace degen {

namespace {

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

}  // namespace

bool toggle_scopable(const std::string& key) {
  if (key.rfind("fault:", 0) == 0) return true;
  const Toggle* t = find_toggle(key);
  return t && t->scoped();
}

namespace {

// The layers fault NAME can act on (its catalogue site); none for a model-level or unknown fault.
std::vector<int> fault_layers(const std::string& name, const ModelConfig& cfg) {
  const FaultInfo* f = find_fault(name);
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
  return {};
}

// `r` takes bad's faults NAME that good lacks: on `where` only when `layers` is given (a
// model-level fault, which has no layers, whole).
void mix_fault(RunConfig& r, const RunConfig& good, const RunConfig& bad, const std::string& name,
               const std::vector<int>* layers, const std::vector<int>& where, const ModelConfig& cfg) {
  for (const auto& f : bad.faults) {
    if (f.name != name || fault_present(good, f)) continue;
    if (!layers) { r.faults.push_back(f); continue; }
    std::vector<int> sel;
    for (int l : where)
      if (f.scope.contains(l, &cfg)) sel.push_back(l);
    if (!sel.empty()) r.faults.push_back({name, LayerScope::of_layers(sel)});
    else if (fault_layers(name, cfg).empty()) r.faults.push_back(f);  // model-level: not scopable
  }
}

}  // namespace

std::vector<int> toggle_layers(const std::string& key, const ModelConfig& cfg) {
  if (key.rfind("fault:", 0) == 0) return fault_layers(key.substr(6), cfg);
  const Toggle* t = find_toggle(key);
  if (!t) return {};
  switch (t->site) {
    case ToggleSite::full_layers: return kind_layers(cfg, LayerKind::full);
    case ToggleSite::linear_layers: return kind_layers(cfg, LayerKind::linear);
    case ToggleSite::none:
    case ToggleSite::per_fault: return {};
  }
  return {};
}

std::vector<std::string> differing_toggles(const RunConfig& good, const RunConfig& bad) {
  std::vector<std::string> out;
  for (const Toggle& t : toggles())
    if (t.fragment && t.fragment(good) != t.fragment(bad)) out.push_back(t.key);
  for (const auto& f : bad.faults)
    if (!fault_present(good, f)) out.push_back("fault:" + f.name);
  return out;
}

RunConfig mix_configs(const RunConfig& good, const RunConfig& bad, const std::vector<std::string>& keys,
                      const std::vector<int>* layers, const ModelConfig& cfg) {
  RunConfig r = good;
  for (const std::string& k : keys) {
    std::vector<int> where;
    if (layers) {
      std::vector<int> ok = toggle_layers(k, cfg);
      for (int l : *layers)
        if (std::find(ok.begin(), ok.end(), l) != ok.end()) where.push_back(l);
    }
    if (k.rfind("fault:", 0) == 0) {
      mix_fault(r, good, bad, k.substr(6), layers, where, cfg);
      continue;
    }
    const Toggle* t = find_toggle(k);
    if (!t || !t->fragment) throw std::logic_error("mix_configs: unknown toggle key " + k);
    if (layers && t->mix_layers) t->mix_layers(r, good, bad, where, cfg);
    else t->take(r, bad);
  }
  return r;
}

}  // namespace degen
