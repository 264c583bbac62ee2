// The toggle registry (see toggles.h): one entry per toggle, built from a few kinds of toggle (a
// layer-scoped enum, a plain value, and the three with rules of their own: precision, gemm, fault).
#include "engine/toggles.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>

#include "engine/faults.h"
#include "engine/run_config.h"
#include "model/shard.h"
#include "util/error.h"

namespace degen {

namespace {

template <typename T>
using Names = std::vector<std::pair<const char*, T>>;

const Names<AttnAlgo> kAttn = {
    {"naive", AttnAlgo::naive}, {"flash", AttnAlgo::flash}, {"splitkv", AttnAlgo::splitkv}, {"grouped", AttnAlgo::grouped}};
const Names<GdnAlgo> kGdn = {{"chunked", GdnAlgo::chunked}, {"recurrent", GdnAlgo::recurrent}, {"fla", GdnAlgo::fla}};
const Names<DType> kSsm = {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
const Names<DType> kConv = {{"fp32", DType::f32}, {"bf16", DType::bf16}};
const Names<DType> kKv = {{"bf16", DType::bf16}, {"fp8", DType::f8_e4m3}};
const Names<BackendKind> kBackend = {{"cpu", BackendKind::cpu}, {"cuda", BackendKind::cuda}};
const Names<bool> kOnOff = {{"on", true}, {"off", false}};
const Names<GemmMode> kGemm = {{"auto", GemmMode::automatic}, {"cublas", GemmMode::cublas}, {"simple", GemmMode::simple}};
// The precision vocabulary of every option that takes one (precision_from_word).
const Names<Precision> kPrecision = {
    {"ref", Precision::ref}, {"fp64", Precision::fp64}, {"bf16", Precision::bf16}, {"q8_0", Precision::q8_0}};
// Older spellings still taken where they were (golden --precision fp32), each with its word now.
const Names<Precision> kOldPrecision = {{"fp32", Precision::ref}};

const RunConfig& defaults() {
  static const RunConfig d;
  return d;
}

[[noreturn]] void int_range_error(const std::string& key, const std::string& v, int lo, int hi) {
  input_error("config: ", key, "=", v, ": expected an integer in [", lo, ", ", hi, "]");
}

int parse_int(const std::string& key, const std::string& v, int lo, int hi) {
  int x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi) int_range_error(key, v, lo, hi);
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
E parse_enum(const std::string& key, const std::string& v, const Names<E>& table) {
  std::string allowed;
  for (const auto& [n, e] : table) {
    if (v == n) return e;
    allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  }
  input_error("config: ", key, "=", v, ": unknown value; expected one of ", allowed);
}

template <typename E>
const char* enum_name(E e, const Names<E>& table) {
  for (const auto& [n, v] : table)
    if (v == e) return n;
  return "?";
}

// The shortest text that reads back as exactly v (std::to_chars): a configuration's canonical form
// must parse to the value it was printed from. Ten significant digits printed top_p=0.99999999999222
// as top_p=1, which then read as the default and vanished from the canonical string (a fuzz finding,
// tests/fuzz/regressions/run_config).
std::string num_str(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  DEGEN_ASSERT(ec == std::errc(), "num_str: to_chars failed");
  return std::string(buf, end);
}

std::string join(const std::vector<std::string>& parts) {
  std::string r;
  for (size_t i = 0; i < parts.size(); ++i) r += (i ? "," : "") + parts[i];
  return r;
}

// ---- a layer-scoped enum toggle: attn, gdn, ssm_dtype, conv_dtype, kv_dtype ----

// `dst` takes bad's value on `layers`, one override per value in the order the values first
// appear (the value at a layer as the toggle's own overrides give it).
template <typename T>
void mix_by_first_seen(Scoped<T>& dst, const Scoped<T>& good, const Scoped<T>& bad, const std::vector<int>& layers,
                       const ModelConfig& cfg) {
  std::vector<std::pair<T, std::vector<int>>> groups;
  for (int l : layers) {
    T gb = good.at(l, &cfg), bb = bad.at(l, &cfg);
    if (gb == bb) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == bb; });
    if (it == groups.end()) groups.push_back({bb, {l}});
    else it->second.push_back(l);
  }
  for (auto& [v, ls] : groups) dst.overrides.push_back({v, LayerScope::of_layers(ls)});
}

// The same for a storage dtype whose unset default depends on the model and the precision
// (`resolved`: RunConfig::ssm_dtype_at, conv_dtype_at): one override per value, in value order
// ("ssm_dtype=bf16@0-2+5").
template <typename T>
void mix_by_value(Scoped<T>& dst, const RunConfig& good, const RunConfig& bad, const std::vector<int>& layers,
                  const ModelConfig& cfg, T (*resolved)(const RunConfig&, int, const ModelConfig&)) {
  std::map<T, std::vector<int>> by_value;
  for (int l : layers) {
    T gv = resolved(good, l, cfg), bv = resolved(bad, l, cfg);
    if (gv != bv) by_value[bv].push_back(l);
  }
  for (auto& [v, ls] : by_value) dst.overrides.push_back({v, LayerScope::of_layers(ls)});
}

// `given`: the RunConfig flag saying the base value was given (unset: a default resolved later,
// printed only when given, "auto" in fragments). `resolved`: see mix_by_value.
template <typename T>
Toggle scoped_toggle(Toggle t, Scoped<T> RunConfig::*field, const Names<T>& names, bool RunConfig::*given = nullptr,
                     T (*resolved)(const RunConfig&, int, const ModelConfig&) = nullptr) {
  const std::string key = t.key;
  t.kind = ToggleKind::layer;
  t.parse = [=, &names](RunConfig& rc, const std::string& v, const LayerScope* scope) {
    const T value = parse_enum(key, v, names);
    Scoped<T>& s = rc.*field;
    if (scope) {
      s.overrides.push_back({value, *scope});
      return;
    }
    s.base = value;
    s.overrides.clear();
    if (given) rc.*given = true;
  };
  t.print = [=, &names](const RunConfig& rc, std::vector<std::string>& out) {
    const Scoped<T>& s = rc.*field;
    if ((given && rc.*given) || !(s.base == (defaults().*field).base)) out.push_back(cat(key, "=", enum_name(s.base, names)));
    for (const auto& e : s.overrides) out.push_back(cat(key, "=", enum_name(e.value, names), e.scope.str()));
  };
  t.fragment = [=, &names](const RunConfig& rc) {
    const Scoped<T>& s = rc.*field;
    std::vector<std::string> out = {(given && !(rc.*given)) ? cat(key, "=auto") : cat(key, "=", enum_name(s.base, names))};
    for (const auto& e : s.overrides) out.push_back(cat(key, "=", enum_name(e.value, names), e.scope.str()));
    return join(out);
  };
  t.take = [=](RunConfig& dst, const RunConfig& src) {
    dst.*field = src.*field;
    if (given) dst.*given = src.*given;
  };
  t.mix_layers = [=](RunConfig& dst, const RunConfig& good, const RunConfig& bad, const std::vector<int>& layers,
                     const ModelConfig& cfg) {
    if (resolved) mix_by_value(dst.*field, good, bad, layers, cfg, resolved);
    else mix_by_first_seen(dst.*field, good.*field, bad.*field, layers, cfg);
  };
  t.scopes = [=](const RunConfig& rc) {
    std::vector<const LayerScope*> out;
    for (const auto& e : (rc.*field).overrides) out.push_back(&e.scope);
    return out;
  };
  return t;
}

DType ssm_at(const RunConfig& rc, int l, const ModelConfig& cfg) { return rc.ssm_dtype_at(l, cfg); }
DType conv_at(const RunConfig& rc, int l, const ModelConfig& cfg) { return rc.conv_dtype_at(l, &cfg); }

// ---- a plain value ----

// `ref`: a generic lambda giving the field of a RunConfig (const or not); `read(key, text)` parses a
// value, `show(value)` prints one. Printed when it differs from the default.
template <typename Ref, typename Read, typename Show>
Toggle value_toggle(Toggle t, Ref ref, Read read, Show show) {
  const std::string key = t.key;
  t.parse = [=](RunConfig& rc, const std::string& v, const LayerScope*) { ref(rc) = read(key, v); };
  t.print = [=](const RunConfig& rc, std::vector<std::string>& out) {
    if (ref(rc) != ref(defaults())) out.push_back(cat(key, "=", show(ref(rc))));
  };
  t.fragment = [=](const RunConfig& rc) { return std::string(show(ref(rc))); };
  t.take = [=](RunConfig& dst, const RunConfig& src) { ref(dst) = ref(src); };
  return t;
}

template <typename E>
auto read_enum(const Names<E>& names) {
  return [&names](const std::string& key, const std::string& v) { return parse_enum(key, v, names); };
}
template <typename E>
auto show_enum(const Names<E>& names) {
  return [&names](E e) { return std::string(enum_name(e, names)); };
}
auto read_int(int lo, int hi) {
  return [=](const std::string& key, const std::string& v) { return parse_int(key, v, lo, hi); };
}
auto read_num(double lo, double hi) {
  return [=](const std::string& key, const std::string& v) { return parse_num(key, v, lo, hi); };
}
auto show_int = [](auto v) { return std::to_string(v); };

// ---- the toggles with rules of their own ----

// precision: printed when given explicitly on backend=cuda too (precision=ref there is the fp32
// reference on the GPU, unset the bf16 GPU path); the GPU path's fragment is "gpu".
Toggle precision_toggle(Toggle t) {
  t.parse = [](RunConfig& rc, const std::string& v, const LayerScope*) {
    rc.precision = parse_enum("precision", v, kPrecision);
    rc.precision_set = true;
  };
  t.print = [](const RunConfig& rc, std::vector<std::string>& out) {
    if (rc.precision != defaults().precision || rc.cuda_reference())
      out.push_back(cat("precision=", enum_name(rc.precision, kPrecision)));
  };
  t.fragment = [](const RunConfig& rc) {
    return std::string(rc.backend == BackendKind::cuda && !rc.cuda_reference() ? "gpu" : enum_name(rc.precision, kPrecision));
  };
  t.take = [](RunConfig& dst, const RunConfig& src) {
    dst.precision = src.precision;
    dst.precision_set = src.precision_set;
  };
  return t;
}

// fault: repeats, one entry per fault, each scoped to the layers of its own site; bisection takes
// faults one by one ("fault:NAME", run_config.cpp), so it has no fragment.
Toggle fault_toggle(Toggle t) {
  t.parse = [](RunConfig& rc, const std::string& v, const LayerScope* scope) {
    const auto& known = known_fault_names();
    if (std::find(known.begin(), known.end(), v) == known.end()) {
      std::string names;
      for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
      input_error("config: unknown fault '", v, "'; expected one of ", names);
    }
    rc.faults.push_back({v, scope ? *scope : LayerScope{}});
  };
  t.print = [](const RunConfig& rc, std::vector<std::string>& out) {
    for (const auto& f : rc.faults) out.push_back("fault=" + f.name + f.scope.str());
  };
  t.take = [](RunConfig& dst, const RunConfig& src) { dst.faults = src.faults; };
  t.scopes = [](const RunConfig& rc) {
    std::vector<const LayerScope*> out;
    for (const auto& f : rc.faults) out.push_back(&f.scope);
    return out;
  };
  return t;
}

Toggle gemm_toggle(Toggle t) {
  auto read = [](const std::string& key, const std::string& v) -> std::optional<GemmMode> { return parse_enum(key, v, kGemm); };
  return value_toggle(
      t, [](auto& r) -> auto& { return r.gemm; }, read,
      [](const std::optional<GemmMode>& g) { return std::string(g ? enum_name(*g, kGemm) : "unset"); });
}

Toggle graphs_toggle(Toggle t) {
  auto read = [](const std::string& key, const std::string& v) -> std::optional<bool> { return parse_enum(key, v, kOnOff); };
  return value_toggle(
      t, [](auto& r) -> auto& { return r.graphs; }, read,
      [](const std::optional<bool>& g) { return std::string(g ? (*g ? "on" : "off") : "unset"); });
}

// batch: 1, all, or N >= 2 (padded decode steps of N rows); one field pair (batch, batch_rows).
Toggle batch_toggle(Toggle t) {
  auto show = [](const RunConfig& rc) {
    return rc.batch == BatchMode::one ? std::string("1") : rc.batch == BatchMode::all ? std::string("all")
                                                                                       : std::to_string(rc.batch_rows);
  };
  t.parse = [](RunConfig& rc, const std::string& v, const LayerScope*) {
    rc.batch_rows = 0;
    if (v == "1") rc.batch = BatchMode::one;
    else if (v == "all") rc.batch = BatchMode::all;
    else {
      int n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || p != v.data() + v.size() || n < 2 || n > 256)
        input_error("config: batch=", v, ": expected 1, all, or a row count in [2, 256]");
      rc.batch = BatchMode::padded;
      rc.batch_rows = n;
    }
  };
  t.print = [=](const RunConfig& rc, std::vector<std::string>& out) {
    if (rc.batch != BatchMode::one) out.push_back("batch=" + show(rc));
  };
  t.fragment = show;
  t.take = [](RunConfig& dst, const RunConfig& src) {
    dst.batch = src.batch;
    dst.batch_rows = src.batch_rows;
  };
  return t;
}

// prefix_cache: off, on (kPrefixBlockDefault tokens per block) or a block size.
Toggle prefix_cache_toggle(Toggle t) {
  auto read = [](const std::string& key, const std::string& v) {
    if (v == "off") return 0;
    if (v == "on") return kPrefixBlockDefault;
    int n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > (1 << 16))
      input_error("config: ", key, "=", v, ": expected off, on (blocks of ", kPrefixBlockDefault,
                  " tokens) or a block size in [1, 65536]");
    return n;
  };
  auto show = [](int n) { return n == 0 ? std::string("off") : n == kPrefixBlockDefault ? std::string("on") : std::to_string(n); };
  return value_toggle(t, [](auto& r) -> auto& { return r.prefix_cache; }, read, show);
}

// The sampling toggles (SamplingParams).
void add_sampling_toggles(std::vector<Toggle>& t) {
  const FloorNeutral y = FloorNeutral::yes;
  const size_t first = t.size();
  auto positive = [](const char* what, double lo, double hi) {
    return [=](const std::string& key, const std::string& v) {
      const double x = parse_num(key, v, lo, hi);
      if (x <= 0) input_error("config: ", key, "=", v, ": expected a number ", what);
      return x;
    };
  };
  t.push_back(value_toggle({"temp", ">=0", "sampling temperature (0 = greedy)", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.temperature; }, read_num(0, 100), num_str));
  t.push_back(value_toggle({"top_p", "(0,1]", "nucleus sampling", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.top_p; }, positive("in (0, 1]", 0, 1), num_str));
  Toggle top_k = value_toggle({"top_k", ">=0", "top-k sampling (0 = off)", ToggleSite::none, y},
                              [](auto& r) -> auto& { return r.sampling.top_k; }, read_int(0, 1 << 30), show_int);
  top_k.validate = [](const RunConfig& rc, const ModelConfig& cfg) {
    if (rc.sampling.top_k > cfg.vocab_size)
      input_error("config: top_k=", rc.sampling.top_k, " exceeds the vocabulary (", cfg.vocab_size, ")");
  };
  t.push_back(top_k);
  t.push_back(value_toggle({"min_p", "[0,1]", "min-p sampling", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.min_p; }, read_num(0, 1), num_str));
  t.push_back(value_toggle({"rep_pen", ">0", "repetition penalty (multiplicative, as HF)", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.repetition_penalty; }, positive("> 0", 0, 100),
                           num_str));
  t.push_back(value_toggle({"presence_pen", "any", "presence penalty (additive, as OpenAI)", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.presence_penalty; }, read_num(-100, 100), num_str));
  t.push_back(value_toggle({"seed", ">=0", "sampling seed", ToggleSite::none, y},
                           [](auto& r) -> auto& { return r.sampling.seed; }, parse_u64, show_int));
  for (size_t i = first; i < t.size(); ++i) t[i].kind = ToggleKind::sampling;
}

// The toggles of the numerics and of the engine's shape, in canonical order.
void add_engine_toggles(std::vector<Toggle>& t) {
  using S = ToggleSite;
  using F = FloorNeutral;
  t.push_back(value_toggle({"backend", "cpu|cuda", "where the path runs", S::none, F::gpu_reference, true},
                           [](auto& r) -> auto& { return r.backend; }, read_enum(kBackend), show_enum(kBackend)));
  t.push_back(precision_toggle({"precision", "ref|fp64|bf16|q8_0",
                                "cpu: golden fp32, fp64, GPU storage emulation, or ggml Q8_0 weights; cuda: ref = the "
                                "fp32 reference on the GPU", S::none, F::yes}));
  t.push_back(scoped_toggle({"attn", "naive|flash|splitkv|grouped", "attention algorithm", S::full_layers, F::no, true},
                            &RunConfig::attn, kAttn));
  t.push_back(scoped_toggle({"gdn", "chunked|recurrent|fla",
                             "GDN prefill algorithm (fla: chunked with flash-linear-attention's bf16 storage points; "
                             "tensor cores on cuda)", S::linear_layers, F::yes, true},
                            &RunConfig::gdn, kGdn));
  t.push_back(scoped_toggle({"ssm_dtype", "fp32|bf16|fp16",
                             "recurrent state storage (default: the checkpoint's mamba_ssm_dtype, else fp32)",
                             S::linear_layers, F::no, true},
                            &RunConfig::ssm_dtype, kSsm, &RunConfig::ssm_dtype_set, ssm_at));
  t.push_back(scoped_toggle({"conv_dtype", "fp32|bf16", "conv window storage", S::linear_layers, F::no, true},
                            &RunConfig::conv_dtype, kConv, &RunConfig::conv_dtype_set, conv_at));
  t.push_back(scoped_toggle({"kv_dtype", "bf16|fp8", "KV cache storage", S::full_layers, F::no, true},
                            &RunConfig::kv_dtype, kKv));
  t.push_back(value_toggle({"mtp", "0..4", "MTP draft tokens per step (0 = off)", S::none, F::yes},
                           [](auto& r) -> auto& { return r.mtp; }, read_int(0, 4), show_int));
  t.push_back(graphs_toggle({"graphs", "on|off",
                             "CUDA graphs for decode steps (cuda only; default on at tp=1 on the bf16 path)", S::none,
                             F::gpu_reference}));
  t.push_back(gemm_toggle({"gemm", "auto|cublas|simple",
                           "matrix products (cuda only; auto: a matrix-vector kernel up to 8 rows, cuBLAS above)",
                           S::none, F::gpu_reference, true}));
  Toggle tp = value_toggle({"tp", "1..64", "tensor-parallel ranks", S::none, F::gpu_reference},
                           [](auto& r) -> auto& { return r.tp; }, read_int(1, kMaxTp), show_int);
  tp.validate = [](const RunConfig& rc, const ModelConfig& cfg) { check_tp_split(cfg, rc.tp); };
  t.push_back(tp);
  t.push_back(batch_toggle({"batch", "1|all|N",
                            "prompts one at a time, batched, or decoded N rows at a time with padding rows", S::none,
                            F::yes}));
  t.push_back(value_toggle({"prefill_chunk", "0|N", "prefill the prompt in chunks of N tokens (0 = one call)", S::none,
                            F::yes},
                           [](auto& r) -> auto& { return r.prefill_chunk; }, read_int(0, 1 << 20), show_int));
  t.push_back(prefix_cache_toggle({"prefix_cache", "off|on|N",
                                   "reuse GDN/KV state snapshots at N-token block boundaries (on = 8) across requests",
                                   S::none, F::yes}));
}

}  // namespace

bool Toggle::floor_neutral(const RunConfig& rc) const {
  return floor == FloorNeutral::yes || (floor == FloorNeutral::gpu_reference && rc.cuda_reference());
}

const std::vector<Toggle>& toggles() {
  static const std::vector<Toggle> t = [] {
    std::vector<Toggle> v;
    add_engine_toggles(v);
    add_sampling_toggles(v);
    v.push_back(fault_toggle({"fault", "name", "inject a known bug class (see `degenbisect faults`)", ToggleSite::per_fault,
                              FloorNeutral::yes, true, true}));
    v.back().kind = ToggleKind::fault;
    return v;
  }();
  return t;
}

const Toggle* find_toggle(const std::string& key) {
  for (const Toggle& t : toggles())
    if (key == t.key) return &t;
  return nullptr;
}

RunConfig without_toggles(const RunConfig& rc, const std::function<bool(const Toggle&)>& which) {
  RunConfig r = rc;
  for (const Toggle& t : toggles())
    if (which(t)) t.take(r, defaults());
  return r;
}

RunConfig with_toggles_of(const RunConfig& base, const RunConfig& over, const std::function<bool(const Toggle&)>& which) {
  RunConfig r = base;
  std::vector<std::string> printed;
  for (const Toggle& t : toggles()) {
    if (!which(t)) continue;
    printed.clear();
    t.print(over, printed);
    if (!printed.empty()) t.take(r, over);
  }
  return r;
}

SamplingParams with_sampling_of(const SamplingParams& base, const SamplingParams& over) {
  RunConfig b, o;
  b.sampling = base;
  o.sampling = over;
  return with_toggles_of(b, o, [](const Toggle& t) { return t.kind == ToggleKind::sampling; }).sampling;
}

std::string toggle_keys(const std::function<bool(const Toggle&)>& which) {
  std::string keys;
  for (const Toggle& t : toggles())
    if (which(t)) keys += (keys.empty() ? "" : ", ") + std::string(t.key);
  return keys;
}

RunConfig RunConfig::with_precision(Precision p) const {
  RunConfig r = *this;
  r.precision = p;
  r.precision_set = true;
  return r;
}

RunConfig RunConfig::with_backend(BackendKind b) const {
  RunConfig r = *this;
  r.backend = b;
  return r;
}

RunConfig RunConfig::with_tp(int n) const {
  if (n < 1 || n > kMaxTp) int_range_error("tp", std::to_string(n), 1, kMaxTp);
  RunConfig r = *this;
  r.tp = n;
  return r;
}

std::optional<Precision> precision_from_word(const std::string& word, std::string* note) {
  for (const auto& [w, p] : kPrecision)
    if (word == w) return p;
  if (note)
    for (const auto& [w, p] : kOldPrecision)
      if (word == w) {
        *note = cat("--precision ", word, " is now spelled ", precision_word(p), " (the words of --config precision=)");
        return p;
      }
  return std::nullopt;
}

const char* precision_word(Precision p) { return enum_name(p, kPrecision); }

Precision precision_in_config(const std::string& word) { return parse_enum("precision", word, kPrecision); }

}  // namespace degen
