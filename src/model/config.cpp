// Parsing and validation of config.json into ModelConfig (../shared/spec/model.md §2).
// Defaults for absent fields are the transformers v5 config-class defaults of each family
// (configuration_qwen3_next.py, configuration_qwen3_5.py, configuration_qwen3_5_moe.py);
// partial_rotary_factor and rope_theta are resolved the way HF v5 standardises them:
// rope_parameters.X, else the top-level X, else the class default (0.25; theta 10000).
#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "util/file_io.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::qwen3_next: return "qwen3_next";
    case Arch::qwen3_5: return "qwen3_5";
    case Arch::qwen3_5_moe: return "qwen3_5_moe";
  }
  return "?";
}

namespace {

// Field access with type checks; `path` is the dotted name used in messages ("text_config.hidden_size").
struct Fields {
  const json& j;
  std::string prefix;  // "" or "text_config."
  std::string origin;

  std::string path(const std::string& key) const { return prefix + key; }
  bool has(const std::string& key) const { return j.contains(key) && !j.at(key).is_null(); }

  [[noreturn]] void bad(const std::string& key, const std::string& expected, const json& found) const {
    input_error(origin, ": field '", path(key), "': expected ", expected, ", found ", json_excerpt(found));
  }

  int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t min_value = 0) const {
    if (!has(key)) {
      if (!def) input_error(origin, ": required field '", path(key), "' is missing");
      return *def;
    }
    const json& v = j.at(key);
    if (!v.is_number_integer()) bad(key, "an integer", v);
    int64_t x = v.get<int64_t>();
    if (x < min_value) bad(key, cat("an integer >= ", min_value), v);
    return x;
  }
  double number(const std::string& key, double def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    if (!v.is_number()) bad(key, "a number", v);
    return v.get<double>();
  }
  bool boolean(const std::string& key, bool def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    if (!v.is_boolean()) bad(key, "true or false", v);
    return v.get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    if (!v.is_string()) bad(key, "a string", v);
    return v.get<std::string>();
  }
  std::vector<int64_t> int_list(const std::string& key) const {  // int or list of ints
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const json& v = j.at(key);
    if (v.is_number_integer()) return {v.get<int64_t>()};
    if (!v.is_array()) bad(key, "an integer or a list of integers", v);
    for (const auto& e : v) {
      if (!e.is_number_integer()) bad(key, "a list of integers", v);
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
};

int to_int(const Fields& f, const std::string& key, std::optional<int64_t> def, int64_t min_value = 0) {
  int64_t v = f.integer(key, def, min_value);
  if (v > (int64_t(1) << 30)) f.bad(key, "a value below 2^30", json(v));
  return static_cast<int>(v);
}

// Checked arithmetic on config sizes (issue 21: hidden_size 2^63-1 printed negative parameter
// counts). The weight table multiplies the sizes (embed V x H, fused experts E x 2 I_e x H) and
// inspect sums them over layers; the engine computes head dimensions such as 2 n_q D in 32-bit int.
// So: every product below is computed with overflow checks and the first that overflows (or leaves
// its bound) is reported with the fields it comes from.
struct Factor {
  const char* field;  // config field ("hidden_size"), or a constant ("2")
  int64_t value;
};

std::string factors_str(const Fields& f, std::initializer_list<Factor> fs) {
  std::string s;
  for (const Factor& x : fs) {
    s += s.empty() ? "" : " x ";
    const std::string name = x.field;
    if (std::isdigit(static_cast<unsigned char>(name[0]))) s += name;  // a constant factor
    else s += cat(name.find(' ') == std::string::npos ? f.path(name) : name, " (", x.value, ")");
  }
  return s;
}

// Product of the factors; an InputError naming them when it overflows int64 or exceeds `limit`.
int64_t checked_product(const Fields& f, std::initializer_list<Factor> fs, int64_t limit, const char* why) {
  int64_t p = 1;
  bool over = false;
  for (const Factor& x : fs) over = over || __builtin_mul_overflow(p, x.value, &p);
  if (over || p > limit)
    input_error(f.origin, ": sizes ", factors_str(f, fs), " = ", over ? std::string("more than 2^63-1") : cat(p),
                "; expected at most ", limit, " (", why, ")");
  return p;
}

// note: the largest released models have ~2^41 parameters; 2^48 leaves a factor 100 and keeps every
// count, byte size (x 4 for fp32) and sum of them far inside int64.
constexpr int64_t kMaxParams = int64_t(1) << 48;
constexpr int64_t kMaxDim = kMaxTensorDim;  // engine head dimensions are int (config.h)

// Counts that size the tool's own tables (one weight-table entry per layer and expert, one layer map
// entry per layer), not tensors: a config with 3,000,000 layers (a 58 MB config.json) made `inspect`
// run 7 minutes in 21 GB before these bounds. Real checkpoints are far inside them: Qwen3-Next-80B has
// 48 layers x 512 experts, Qwen3.6-27B 64 layers (spec/model.md); the largest published LLMs have
// under 200 layers and at most a few hundred routed experts.
constexpr int64_t kMaxLayers = kMaxModelLayers;  // (config.h)
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxLayerExperts = int64_t(1) << 18;  // layers x experts: 512 x 512, or 128 x 2048
constexpr int64_t kMaxMtpLayers = 16;

void check_sizes(const ModelConfig& c, const Fields& f) {
  // 0. Table sizes.
  if (c.num_layers > kMaxLayers) f.bad("num_hidden_layers", cat("at most ", kMaxLayers, " (real models have under 200)"), json(c.num_layers));
  if (c.num_experts > kMaxExperts) f.bad("num_experts", cat("at most ", kMaxExperts, " (real models have at most a few hundred)"), json(c.num_experts));
  if (c.mtp_num_layers > kMaxMtpLayers)
    f.bad(f.has("mtp_num_hidden_layers") ? "mtp_num_hidden_layers" : "num_nextn_predict_layers", cat("at most ", kMaxMtpLayers, " (released models have 1)"), json(c.mtp_num_layers));
  if (int64_t(c.num_layers) * c.num_experts > kMaxLayerExperts)
    input_error(f.origin, ": num_hidden_layers x num_experts = ", c.num_layers, " x ", c.num_experts, " = ",
                int64_t(c.num_layers) * c.num_experts, " expert weight sets; expected at most ", kMaxLayerExperts,
                " (Qwen3-Next-80B has 48 x 512 = 24576)");

  // 1. Single sizes: each is a tensor dimension (token ids are int32 too).
  for (auto [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"moe_intermediate_size", c.moe_intermediate_size},
                        {"shared_expert_intermediate_size", c.shared_expert_intermediate_size}})
    if (v > kMaxDim) f.bad(key, cat("at most 2^31-1 = ", kMaxDim, " (a tensor dimension)"), json(v));

  // 2. Head dimensions the engine computes in int (2 n_q D for the gated q_proj; 2 d_key + 2 d_val
  // rows of in_proj_qkvz).
  const char* dim = "a dimension the engine computes in 32-bit int";
  const int64_t qd = checked_product(f, {{"2", 2}, {"num_attention_heads", c.n_q}, {"head_dim", c.head_dim}}, kMaxDim, dim);
  const int64_t kvd = checked_product(f, {{"num_key_value_heads", c.n_kv}, {"head_dim", c.head_dim}}, kMaxDim, dim);
  const int64_t dkey = checked_product(f, {{"2", 2}, {"linear_num_key_heads", c.n_k}, {"linear_key_head_dim", c.d_k}},
                                       kMaxDim / 2, dim) / 2;
  const int64_t dval = checked_product(f, {{"2", 2}, {"linear_num_value_heads", c.n_v}, {"linear_value_head_dim", c.d_v}},
                                       kMaxDim / 2, dim) / 2;

  // 3. The largest weight tensors, then an upper bound on the parameter count (every layer counted
  // with attention, GDN, dense MLP and experts together; MTP layers counted as full layers).
  // Terms are sums of int32-bounded dimensions, so only the products need checks.
  const char* tensor = "elements of one weight tensor; a real model is far smaller";
  const char* params = "parameters in all; a real model is far smaller";
  const int64_t H = c.hidden_size, I = c.intermediate_size, Ie = c.moe_intermediate_size;
  checked_product(f, {{"vocab_size", c.vocab_size}, {"hidden_size", H}}, kMaxParams, tensor);
  const int64_t experts = checked_product(f, {{"3", 3}, {"num_experts", c.num_experts},
                                              {"moe_intermediate_size", Ie}, {"hidden_size", H}}, kMaxParams, tensor);
  const int64_t rows = qd + qd / 2 + 2 * kvd + 2 * dkey + 3 * dval + 2 * int64_t(c.n_v) + 3 * I + c.num_experts +
                       3 * c.shared_expert_intermediate_size + 8;
  const int64_t per_layer = checked_product(f, {{"hidden_size", H}, {"the rows of one layer's matrices", rows}}, kMaxParams,
                                            params) +
                            experts + checked_product(f, {{"2", 2}, {"linear_conv_kernel_dim", c.conv_kernel},
                                                          {"linear key + value dimensions", dkey + dval}},
                                                      kMaxParams, params);
  const int64_t layers = int64_t(c.num_layers) + std::max(c.mtp_num_layers, 0) + 1;
  int64_t total = checked_product(f, {{"num_hidden_layers (+ MTP layers + 1)", layers},
                                      {"an upper bound on the parameters of one layer", per_layer}}, kMaxParams, params);
  total += checked_product(f, {{"3", 3}, {"vocab_size", c.vocab_size}, {"hidden_size", H}}, kMaxParams, params);
  if (total > kMaxParams)
    input_error(f.origin, ": the sizes give more than ", kMaxParams, " parameters (upper bound ", total, "); expected at most ",
                kMaxParams, " (", params, ")");
}

// RoPE base: θ^(-2i/d) must fall with i, so θ > 1 (at θ ≤ 1 every pair turns by ≥ 1 radian a token
// and positions alias; θ = 1e-300 rounds to 0 in fp32 and gave infinite frequencies). Released
// checkpoints use 1e4 (Llama 2) to 1e7 (Qwen3.5, Qwen3.6, Qwen3-Next); 1e12 is 10^5 times that, and
// keeps θ far inside fp32 (the frequencies are computed in fp32: Backend::rope_inv_freq; beyond
// 3.4e38 the conversion overflows).
constexpr double kMaxRopeTheta = 1e12;
// RMSNorm epsilon: released models use 1e-6 (Qwen3.5, Qwen3-Next) or 1e-5 (Llama). The CUDA kernels
// add it in fp32 (src/cuda/rmsnorm.cpp), where below FLT_MIN = 1.2e-38 it is a subnormal or 0 and a
// zero row normalises to 0/0 = NaN, while the fp64 CPU reference still adds it: so at least FLT_MIN.
// Below 1 (as before): an epsilon of 1 would outweigh unit activations.
constexpr double kMinRmsNormEps = std::numeric_limits<float>::min();

void validate(const ModelConfig& c, const Fields& f) {
  auto need = [&](bool ok, const std::string& key, const std::string& expected, const json& found) {
    if (!ok) f.bad(key, expected, found);
  };
  need(c.vocab_size > 0, "vocab_size", "a positive integer", c.vocab_size);
  need(c.hidden_size > 0, "hidden_size", "a positive integer", c.hidden_size);
  need(c.num_layers > 0, "num_hidden_layers", "a positive integer", c.num_layers);
  need(c.n_q > 0, "num_attention_heads", "a positive integer", c.n_q);
  need(c.n_kv > 0 && c.n_q % c.n_kv == 0, "num_key_value_heads",
       cat("a positive divisor of num_attention_heads = ", c.n_q), c.n_kv);
  need(c.head_dim > 0, "head_dim", "a positive integer", c.head_dim);
  need(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1, "partial_rotary_factor",
       "a number in (0, 1]", c.partial_rotary_factor);
  need(c.rotary_dim >= 2 && c.rotary_dim % 2 == 0, "partial_rotary_factor",
       cat("a factor giving an even rotary dimension >= 2 (head_dim ", c.head_dim, " x factor = ",
           c.rotary_dim, ")"),
       c.partial_rotary_factor);
  const bool theta_in_rp = f.j.contains("rope_parameters") && f.j.at("rope_parameters").is_object() &&
                          f.j.at("rope_parameters").contains("rope_theta");
  need(c.rope_theta > 1 && c.rope_theta <= kMaxRopeTheta, theta_in_rp ? "rope_parameters.rope_theta" : "rope_theta",
       cat("a number in (1, ", kMaxRopeTheta, "] (released models use 1e4 to 1e7)"), c.rope_theta);
  need(c.rms_norm_eps >= kMinRmsNormEps && c.rms_norm_eps < 1, "rms_norm_eps",
       cat("a number in [", kMinRmsNormEps, " (FLT_MIN: the GPU adds it in fp32), 1)"), c.rms_norm_eps);
  // Token ids the config names: ids of its own vocabulary (an id past it can never be generated, so
  // a stop id there would silently never stop).
  for (int64_t id : c.eos_token_ids)
    need(id >= 0 && id < c.vocab_size, "eos_token_id", cat("token ids in [0, vocab_size = ", c.vocab_size, ")"), id);
  if (c.bos_token_id)
    need(*c.bos_token_id < c.vocab_size, "bos_token_id", cat("a token id in [0, vocab_size = ", c.vocab_size, ")"),
         *c.bos_token_id);
  need(c.hidden_act == "silu", "hidden_act", "\"silu\" (the only activation these models use)", c.hidden_act);
  need(c.conv_kernel >= 1, "linear_conv_kernel_dim", "a positive integer", c.conv_kernel);
  need(c.n_k > 0, "linear_num_key_heads", "a positive integer", c.n_k);
  need(c.n_v > 0 && c.n_v % c.n_k == 0, "linear_num_value_heads",
       cat("a positive multiple of linear_num_key_heads = ", c.n_k, " (r = n_v / n_k must be an integer)"), c.n_v);
  need(c.d_k > 0, "linear_key_head_dim", "a positive integer", c.d_k);
  need(c.d_v > 0, "linear_value_head_dim", "a positive integer", c.d_v);
  if (c.is_moe()) {
    need(c.experts_per_tok >= 1 && c.experts_per_tok <= c.num_experts, "num_experts_per_tok",
         cat("an integer in [1, num_experts = ", c.num_experts, "]"), c.experts_per_tok);
    need(c.moe_intermediate_size > 0, "moe_intermediate_size", "a positive integer", c.moe_intermediate_size);
    need(c.shared_expert_intermediate_size >= 0, "shared_expert_intermediate_size", "an integer >= 0",
         c.shared_expert_intermediate_size);
    need(c.decoder_sparse_step >= 1, "decoder_sparse_step", "a positive integer", c.decoder_sparse_step);
  }
  bool any_dense = false;
  for (int i = 0; i < c.num_layers; ++i) any_dense |= !c.is_moe_layer(i);
  if (any_dense)
    need(c.intermediate_size > 0, "intermediate_size", "a positive integer (a layer uses a dense MLP)",
         c.intermediate_size);
  for (int l : c.mlp_only_layers)
    need(l >= 0 && l < c.num_layers, "mlp_only_layers", cat("layer indices in [0, ", c.num_layers, ")"), l);
  if (c.mamba_ssm_dtype) {
    static const std::set<std::string> ok = {"float32", "bfloat16", "float16"};
    need(ok.count(*c.mamba_ssm_dtype) > 0, "mamba_ssm_dtype", "\"float32\", \"bfloat16\" or \"float16\"",
         *c.mamba_ssm_dtype);
  }
  check_sizes(c, f);
}

// RoPE: rope_parameters first, then top-level keys, then the class default (HF v5 standardisation).
// Sets rope_theta, partial_rotary_factor and rotary_dim (head_dim must be read).
void read_rope(ModelConfig& c, const Fields& f, const json& lm, const std::string& prefix, const std::string& origin) {
  double prf = f.number("partial_rotary_factor", 0.25);
  c.rope_theta = f.number("rope_theta", 10000.0);
  if (f.has("rope_parameters")) {
    const json& rp = lm.at("rope_parameters");
    Fields rf{rp, prefix + "rope_parameters.", origin};
    if (!rp.is_object()) f.bad("rope_parameters", "an object", rp);
    std::string type = rf.string("rope_type", "default");
    if (type != "default")
      input_error(origin, ": field '", prefix, "rope_parameters.rope_type': expected \"default\" "
                  "(YaRN and other scalings are not supported), found \"", type, "\"");
    prf = rf.number("partial_rotary_factor", prf);
    c.rope_theta = rf.number("rope_theta", c.rope_theta);
  }
  if (f.has("rope_scaling")) {
    const json& rs = lm.at("rope_scaling");
    std::string type = rs.is_object() && rs.contains("rope_type") && rs["rope_type"].is_string()
                           ? rs["rope_type"].get<std::string>()
                           : (rs.is_object() && rs.contains("type") && rs["type"].is_string() ? rs["type"].get<std::string>() : "?");
    if (type != "default")
      input_error(origin, ": field '", prefix, "rope_scaling': expected null or rope_type \"default\" "
                  "(YaRN and other scalings are not supported), found ", json_excerpt(rs));
  }
  c.partial_rotary_factor = prf;
  c.rotary_dim = static_cast<int>(std::floor(c.head_dim * prf + 1e-9));
}

// Layer types: explicit list, else derived from full_attention_interval (layer i is full iff (i+1) % n == 0).
void read_layer_types(ModelConfig& c, const Fields& f, const json& lm, const std::string& prefix,
                      const std::string& origin) {
  if (f.has("layer_types")) {
    const json& lt = lm.at("layer_types");
    if (!lt.is_array()) f.bad("layer_types", "a list of \"linear_attention\" / \"full_attention\"", lt);
    if (static_cast<int>(lt.size()) != c.num_layers)
      f.bad("layer_types", cat("a list of num_hidden_layers = ", c.num_layers, " entries"), json(lt.size()));
    for (size_t i = 0; i < lt.size(); ++i) {
      const json& e = lt[i];
      if (e == "linear_attention") c.layer_types.push_back(LayerKind::linear);
      else if (e == "full_attention") c.layer_types.push_back(LayerKind::full);
      else input_error(origin, ": field '", prefix, "layer_types[", i,
                       "]': expected \"linear_attention\" or \"full_attention\", found ", json_excerpt(e));
    }
  } else {
    int interval = to_int(f, "full_attention_interval", 4, 1);
    for (int i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::full : LayerKind::linear);
  }
}

// The FFN fields: dense, Qwen3-Next's MoE (with its dense layers) or Qwen3.5's all-MoE.
void read_ffn(ModelConfig& c, const Fields& f, bool next, bool moe) {
  if (next) {
    c.intermediate_size = f.integer("intermediate_size", 5632, 0);
    c.num_experts = to_int(f, "num_experts", 512, 0);
    c.experts_per_tok = to_int(f, "num_experts_per_tok", 10, 0);
    c.moe_intermediate_size = f.integer("moe_intermediate_size", 512, 0);
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size", 512, 0);
    c.norm_topk_prob = f.boolean("norm_topk_prob", true);
    c.decoder_sparse_step = to_int(f, "decoder_sparse_step", 1, 1);
    for (int64_t l : f.int_list("mlp_only_layers")) c.mlp_only_layers.push_back(static_cast<int>(l));
  } else if (moe) {
    c.intermediate_size = f.integer("intermediate_size", 0, 0);  // unused by HF for qwen3_5_moe
    c.num_experts = to_int(f, "num_experts", 256, 1);
    c.experts_per_tok = to_int(f, "num_experts_per_tok", 8, 1);
    c.moe_intermediate_size = f.integer("moe_intermediate_size", 512, 1);
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size", 512, 0);
    c.norm_topk_prob = true;  // HF always renormalises for qwen3_5_moe (spec §4.8); the field is not read
  } else {
    c.intermediate_size = f.integer("intermediate_size", 12288, 1);
  }
}

}  // namespace

bool ModelConfig::is_moe_layer(int layer) const {
  if (num_experts <= 0) return false;
  if (arch == Arch::qwen3_5_moe) return true;  // every layer (HF reads neither mlp_only_layers nor the step)
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int ModelConfig::num_linear_layers() const {
  return static_cast<int>(std::count(layer_types.begin(), layer_types.end(), LayerKind::linear));
}
int ModelConfig::num_full_layers() const { return num_layers - num_linear_layers(); }

std::string ModelConfig::layer_map() const {
  std::string s;
  for (LayerKind k : layer_types) s += (k == LayerKind::linear ? 'G' : 'A');
  size_t n = s.size();
  for (size_t p = 1; p <= n; ++p) {
    if (n % p) continue;
    bool periodic = true;
    for (size_t i = p; i < n && periodic; ++i) periodic = s[i] == s[i - p];
    if (periodic) return p == n ? s : s.substr(0, p) + "\u00d7" + std::to_string(n / p);
  }
  return s;
}

ModelConfig parse_model_config(const json& top, const std::string& origin) {
  if (!top.is_object()) input_error(origin, ": expected a JSON object at the top level");
  ModelConfig c;
  c.origin = origin;
  Fields tf{top, "", origin};
  c.model_type = tf.string("model_type", "");
  if (c.model_type.empty()) input_error(origin, ": field 'model_type' is missing");

  const json* lm = &top;
  std::string prefix;
  if (c.model_type == "qwen3_next") {
    c.arch = Arch::qwen3_next;
    c.tensor_prefix = "model.";
  } else if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe") {
    c.arch = c.model_type == "qwen3_5" ? Arch::qwen3_5 : Arch::qwen3_5_moe;
    if (!top.contains("text_config") || !top.at("text_config").is_object())
      input_error(origin, ": model_type '", c.model_type, "' needs a 'text_config' object with the language-model fields");
    lm = &top.at("text_config");
    prefix = "text_config.";
    c.tensor_prefix = "model.language_model.";
  } else if (c.model_type == "qwen3_5_text" || c.model_type == "qwen3_5_moe_text") {
    c.arch = c.model_type == "qwen3_5_text" ? Arch::qwen3_5 : Arch::qwen3_5_moe;
    c.tensor_prefix = "model.";
  } else {
    input_error(origin, ": unsupported model_type '", c.model_type,
                "'; expected one of qwen3_next, qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text");
  }
  Fields f{*lm, prefix, origin};
  const bool next = c.arch == Arch::qwen3_next;
  const bool moe = c.arch == Arch::qwen3_5_moe;

  c.vocab_size = f.integer("vocab_size", next ? 151936 : 248320, 1);
  c.hidden_size = f.integer("hidden_size", next ? 2048 : (moe ? 2048 : 4096), 1);
  c.num_layers = to_int(f, "num_hidden_layers", next ? 48 : (moe ? 40 : 32), 1);
  c.n_q = to_int(f, "num_attention_heads", 16, 1);
  c.n_kv = to_int(f, "num_key_value_heads", next ? 2 : (moe ? 2 : 4), 1);
  c.head_dim = to_int(f, "head_dim", 256, 1);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.hidden_act = f.string("hidden_act", "silu");
  c.conv_kernel = to_int(f, "linear_conv_kernel_dim", 4, 1);
  c.d_k = to_int(f, "linear_key_head_dim", 128, 1);
  c.d_v = to_int(f, "linear_value_head_dim", 128, 1);
  c.n_k = to_int(f, "linear_num_key_heads", 16, 1);
  c.n_v = to_int(f, "linear_num_value_heads", 32, 1);
  c.max_position_embeddings = f.integer("max_position_embeddings", 32768, 1);

  read_rope(c, f, *lm, prefix, origin);
  read_layer_types(c, f, *lm, prefix, origin);
  read_ffn(c, f, next, moe);

  // tie_word_embeddings sits at the top level for the nested form (Qwen3_5Config), else with the LM fields.
  c.tie_word_embeddings = tf.has("tie_word_embeddings") ? tf.boolean("tie_word_embeddings", false)
                                                        : f.boolean("tie_word_embeddings", false);
  if (f.has("mamba_ssm_dtype")) c.mamba_ssm_dtype = f.string("mamba_ssm_dtype", "float32");
  c.mtp_num_layers = to_int(f, f.has("mtp_num_hidden_layers") ? "mtp_num_hidden_layers" : "num_nextn_predict_layers",
                            next ? 1 : 0, 0);
  c.eos_token_ids = f.has("eos_token_id") ? f.int_list("eos_token_id") : tf.int_list("eos_token_id");
  if (f.has("bos_token_id")) c.bos_token_id = f.integer("bos_token_id", 0, 0);

  validate(c, f);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  std::filesystem::path p = std::filesystem::is_directory(dir) ? dir / "config.json" : dir;
  if (!std::filesystem::exists(p))
    input_error(p.string(), ": not found (expected a Hugging Face model folder with config.json)");
  std::string text = read_file(p, kMaxInputFileBytes);
  json j = parse_json(text, p.string(), /*allow_exceptions=*/false);
  if (j.is_discarded()) input_error(p.string(), ": not valid JSON");
  return parse_model_config(j, p.string());
}

}  // namespace degen
