// Synthetic checkpoint presets and writer (see synth.h).
#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <chrono>
#include <cstdio>
#include <thread>

#include "model/config.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "model/tokenizer_synth.h"
#include "model/weights.h"
#include "util/error.h"

namespace degen {

using nlohmann::json;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) { h ^= c; h *= 0x100000001b3ull; }
  return h;
}

// Tiny models share one shape family; the variants differ in what they exercise.
json tiny_text_fields() {
  return json{{"vocab_size", 1024},
              {"hidden_size", 128},
              {"num_hidden_layers", 8},
              {"layer_types", {"linear_attention", "linear_attention", "linear_attention", "full_attention",
                               "linear_attention", "linear_attention", "linear_attention", "full_attention"}},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 64},  // note: != hidden_size / heads (32), as in the real models
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}}},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"linear_conv_kernel_dim", 4},
              {"linear_key_head_dim", 32},
              {"linear_value_head_dim", 32},
              {"linear_num_key_heads", 2},
              {"linear_num_value_heads", 4},
              {"intermediate_size", 256},
              {"max_position_embeddings", 4096},
              {"mamba_ssm_dtype", "float32"},
              {"mtp_num_hidden_layers", 1},
              {"tie_word_embeddings", false}};
}

json nest(const char* model_type, const char* text_type, const char* arch, json text) {
  text["model_type"] = text_type;
  return json{{"architectures", {arch}},
              {"model_type", model_type},
              {"text_config", text},
              {"tie_word_embeddings", false},
              {"language_model_only", true},
              {"torch_dtype", "bfloat16"}};
}

// The tiny presets: the shipped test models, each exercising one checkpoint form.
void add_tiny_presets(std::vector<SynthPreset>& p) {
  {  // dense Qwen3.5, nested config, tensors under model.language_model.
    json t = tiny_text_fields();
    p.push_back({"tiny-qwen35", "Qwen3.5 dense, GGGA x2, r = 2, MTP, nested text_config (~1.6M params)",
                 nest("qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration", t), SynthOptions{}, false});
  }
  {  // r = 3 as in Qwen3.6-27B; flat text-only form; fp32 A_log / GDN norm
    json t = tiny_text_fields();
    t["linear_num_value_heads"] = 6;
    t["model_type"] = "qwen3_5_text";
    t["architectures"] = {"Qwen3_5ForCausalLM"};
    SynthOptions o;
    o.gdn_params_f32 = true;
    p.push_back({"tiny-qwen35-r3", "Qwen3.5 dense, n_v / n_k = 3 as in the 27B, flat qwen3_5_text form", t, o, false});
  }
  {  // heads and intermediate divisible by 3 (and n_v / n_k = 3): tensor parallelism at tp = 3
    json t = tiny_text_fields();
    t["num_attention_heads"] = 6;
    t["num_key_value_heads"] = 3;
    t["linear_num_key_heads"] = 3;
    t["linear_num_value_heads"] = 9;
    t["intermediate_size"] = 192;
    p.push_back({"tiny-qwen35-tp3", "Qwen3.5 dense whose heads split 3 ways (6 q / 3 kv, GDN 3 k / 9 v, I = 192): tp=3",
                 nest("qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration", t), SynthOptions{}, false});
  }
  {  // MoE with fused experts in the checkpoint as Qwen3.5-35B-A3B
    json t = tiny_text_fields();
    t.erase("intermediate_size");
    t["num_experts"] = 8;
    t["num_experts_per_tok"] = 2;
    t["moe_intermediate_size"] = 64;
    t["shared_expert_intermediate_size"] = 64;
    SynthOptions o;
    o.experts_fused = true;
    o.gdn_params_f32 = true;
    p.push_back({"tiny-qwen35-moe", "Qwen3.5 MoE (8 experts, top-2, shared expert), experts fused as in 35B-A3B",
                 nest("qwen3_5_moe", "qwen3_5_moe_text", "Qwen3_5MoeForConditionalGeneration", t), o, false});
  }
  {  // the real Qwen3.5 / Qwen3.6 vocabulary (248,320 rows) on a few small layers: every verdict at real scale
    json t = tiny_text_fields();
    t["vocab_size"] = 248320;
    t["hidden_size"] = 64;
    t["num_hidden_layers"] = 4;
    t["layer_types"] = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
    t["head_dim"] = 32;
    t["intermediate_size"] = 128;
    t["max_position_embeddings"] = 4096;
    json c = nest("qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration", t);
    c["tie_word_embeddings"] = true;  // as Qwen3.5-0.8B and 2B: one 248,320 x 64 matrix, 32 MB in bf16
    SynthOptions o;
    // logits ~ N(0, 4.5^2): over 248,077 ids the top 40 then hold about 70 % of the mass and the top 20
    // about 64 % (a mean over draws of Gaussian logits), peaked like a trained model's, unlike the 6 %
    // and 4 % of the untied presets' logits of spread 2.
    o.embed_scale = 4.5 / 8.0;
    p.push_back({"tiny-realvocab",
                 "Qwen3.5 dense, GGGA x1, hidden 64, tied embeddings, 248,320 logit rows: give it the real Qwen3.5 "
                 "tokenizer (synth --tokenizer; scripts/make-realvocab-model.sh)",
                 c, o, false});
  }
  {  // Qwen3-Next: flat config, fused interleaved GDN projections, per-expert MoE, one dense layer
    json t = tiny_text_fields();
    t.erase("layer_types");  // derived from full_attention_interval, as in the real Qwen3-Next config
    t["full_attention_interval"] = 4;
    t.erase("rope_parameters");
    t.erase("mamba_ssm_dtype");
    t.erase("mtp_num_hidden_layers");
    t["rope_theta"] = 10000000.0;
    t["partial_rotary_factor"] = 0.25;
    t["rope_scaling"] = nullptr;
    t["num_experts"] = 8;
    t["num_experts_per_tok"] = 2;
    t["moe_intermediate_size"] = 64;
    t["shared_expert_intermediate_size"] = 64;
    t["norm_topk_prob"] = true;
    t["decoder_sparse_step"] = 1;
    t["mlp_only_layers"] = {1};
    t["model_type"] = "qwen3_next";
    t["architectures"] = {"Qwen3NextForCausalLM"};
    p.push_back({"tiny-qwen3next", "Qwen3-Next: fused interleaved in_proj_qkvz/in_proj_ba, MoE + one dense layer", t,
                 SynthOptions{}, false});
  }
}

// The bench model and the real-size shapes (config only unless --weights).
void add_large_presets(std::vector<SynthPreset>& p) {
  {  // ~1B dense model for CPU benchmarks
    json t = tiny_text_fields();
    t["vocab_size"] = 32768;
    t["hidden_size"] = 2048;
    t["num_hidden_layers"] = 16;
    json lt = json::array();
    for (int i = 0; i < 16; ++i) lt.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    t["layer_types"] = lt;
    t["num_attention_heads"] = 16;
    t["num_key_value_heads"] = 2;
    t["head_dim"] = 128;
    t["linear_num_key_heads"] = 8;
    t["linear_num_value_heads"] = 16;
    t["linear_key_head_dim"] = 128;
    t["linear_value_head_dim"] = 128;
    t["intermediate_size"] = 6144;
    p.push_back({"bench-1b", "Qwen3.5 dense of about 1B parameters for CPU benchmarks (2 GB bf16)",
                 nest("qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration", t), SynthOptions{}, false});
  }
  {  // Qwen3.6-27B, values from its config.json (spec §3.1)
    json t = {{"vocab_size", 248320}, {"hidden_size", 5120}, {"num_hidden_layers", 64}, {"num_attention_heads", 24},
              {"num_key_value_heads", 4}, {"head_dim", 256},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25},
                                   {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}}},
              {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"linear_conv_kernel_dim", 4},
              {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
              {"linear_num_value_heads", 48}, {"intermediate_size", 17408}, {"max_position_embeddings", 262144},
              {"mamba_ssm_dtype", "float32"}, {"mtp_num_hidden_layers", 1}, {"full_attention_interval", 4},
              {"bos_token_id", 248044}, {"eos_token_id", 248044}, {"tie_word_embeddings", false}};
    p.push_back({"qwen36-27b", "Qwen3.6-27B shapes (config only unless --weights: 54 GB)",
                 nest("qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration", t), SynthOptions{}, true,
                 11});  // the published checkpoint: model-000NN-of-00011.safetensors and its index
  }
  {  // Qwen3-Next-80B-A3B-Instruct, values from its config.json (spec §3.1)
    json t = {{"architectures", {"Qwen3NextForCausalLM"}}, {"model_type", "qwen3_next"}, {"vocab_size", 151936},
              {"hidden_size", 2048}, {"num_hidden_layers", 48}, {"num_attention_heads", 16}, {"num_key_value_heads", 2},
              {"head_dim", 256}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}, {"rope_scaling", nullptr},
              {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"linear_conv_kernel_dim", 4},
              {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
              {"linear_num_value_heads", 32}, {"intermediate_size", 5120}, {"num_experts", 512},
              {"num_experts_per_tok", 10}, {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512},
              {"norm_topk_prob", true}, {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array()},
              {"full_attention_interval", 4}, {"max_position_embeddings", 262144}, {"bos_token_id", 151643},
              {"eos_token_id", 151645}, {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}};
    p.push_back({"qwen3next-80b-a3b", "Qwen3-Next-80B-A3B shapes (config only unless --weights: 160 GB)", t,
                 SynthOptions{}, true});
  }
  {  // Qwen3.5-35B-A3B (spec §3.1)
    json t = {{"vocab_size", 248320}, {"hidden_size", 2048}, {"num_hidden_layers", 40}, {"num_attention_heads", 16},
              {"num_key_value_heads", 2}, {"head_dim", 256},
              {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25},
                                   {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}}},
              {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"}, {"linear_conv_kernel_dim", 4},
              {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128}, {"linear_num_key_heads", 16},
              {"linear_num_value_heads", 32}, {"num_experts", 256}, {"num_experts_per_tok", 8},
              {"moe_intermediate_size", 512}, {"shared_expert_intermediate_size", 512},
              {"max_position_embeddings", 262144}, {"mamba_ssm_dtype", "float32"}, {"mtp_num_hidden_layers", 1},
              {"full_attention_interval", 4}, {"eos_token_id", 248044}, {"tie_word_embeddings", false}};
    SynthOptions o;
    o.experts_fused = true;
    o.gdn_params_f32 = true;
    p.push_back({"qwen35-35b-a3b", "Qwen3.5-35B-A3B shapes (config only unless --weights: 72 GB)",
                 nest("qwen3_5_moe", "qwen3_5_moe_text", "Qwen3_5MoeForConditionalGeneration", t), o, true});
  }
}

std::vector<SynthPreset> make_presets() {
  std::vector<SynthPreset> p;
  add_tiny_presets(p);
  add_large_presets(p);
  return p;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Value of element i of tensor `name` (shape `shape`), scaled like a trained weight.
struct ValueRule {
  enum Kind { zero_centred_norm, plain_norm, a_log, dt_bias, normal } kind = normal;
  double scale = 1.0;
};

ValueRule rule_for(const std::string& name, const std::vector<int64_t>& shape, const ModelConfig& c, double embed_scale) {
  if (ends_with(name, "linear_attn.norm.weight")) return {ValueRule::plain_norm, 0.05};  // around 1
  if (ends_with(name, "norm.weight") || ends_with(name, "layernorm.weight")) return {ValueRule::zero_centred_norm, 0.05};
  if (ends_with(name, "A_log")) return {ValueRule::a_log, 1.0};
  if (ends_with(name, "dt_bias")) return {ValueRule::dt_bias, 1.0};
  if (ends_with(name, "embed_tokens.weight")) return {ValueRule::normal, embed_scale};
  if (name == "lm_head.weight") return {ValueRule::normal, 2.0 / std::sqrt(double(c.hidden_size))};
  if (ends_with(name, "conv1d.weight")) return {ValueRule::normal, 1.0 / std::sqrt(double(shape.back()))};
  return {ValueRule::normal, 1.0 / std::sqrt(double(shape.back()))};  // projections: 1/sqrt(fan_in)
}

double value_at(const ValueRule& r, uint64_t seed, uint64_t key, uint64_t i) {
  switch (r.kind) {
    case ValueRule::zero_centred_norm: return r.scale * synth_normal(seed, key, i);
    case ValueRule::plain_norm: return 1.0 + r.scale * synth_normal(seed, key, i);
    // A = exp(A_log) in [1, 16] as HF's init draws A ~ U(0, 16); A_log itself drawn uniform in [0, ln 16].
    case ValueRule::a_log: return 2.772588722239781 * synth_uniform(seed, key, i);
    // dt_bias in [-4.5, -0.5]: softplus(dt_bias) from 0.011 to 0.47, decays alpha mostly in (0.5, 1).
    case ValueRule::dt_bias: return -4.5 + 4.0 * synth_uniform(seed, key, i);
    case ValueRule::normal: return r.scale * synth_normal(seed, key, i);
  }
  return 0;
}

}  // namespace

double synth_uniform(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t x = splitmix64(splitmix64(seed ^ 0x5eed5eed5eed5eedull) ^ key) ^ (i * 0xd1b54a32d192ed03ull);
  return static_cast<double>(splitmix64(x) >> 11) * (1.0 / 9007199254740992.0);  // 53 bits -> [0, 1)
}

double synth_normal(uint64_t seed, uint64_t key, uint64_t i) {
  double s = 0;
  for (uint64_t k = 0; k < 4; ++k) s += synth_uniform(seed, key, 4 * i + k);
  return (s - 2.0) * 1.7320508075688772;  // var(sum of 4 U(0,1)) = 1/3; times sqrt(3) -> unit variance
}

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = make_presets();
  return presets;
}

const SynthPreset& find_synth_preset(const std::string& name) {
  std::string names;
  for (const auto& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  input_error("unknown preset '", name, "'; expected one of: ", names);
}

namespace {

// config.json, generation_config.json and tokenizer.json of a synthetic checkpoint.
void write_synth_side_files(const json& config, const ModelConfig& cfg, const SynthOptions& opt,
                            const std::filesystem::path& out) {
  // Tokenizer: the Qwen3.5 pre-tokenizer (with \p{M}) for the Qwen3.5 family, Qwen2's for Qwen3-Next.
  SynthTokenizerKind tk = cfg.arch == Arch::qwen3_next ? SynthTokenizerKind::qwen2 : SynthTokenizerKind::qwen35;
  int max_ids = static_cast<int>(std::min<int64_t>(cfg.vocab_size, 1000));
  const bool given = !opt.tokenizer_json.empty();
  std::string tok_json = given ? opt.tokenizer_json : synth_tokenizer_json(tk, max_ids);
  json tok = json::parse(tok_json);
  auto special = [&](const std::string& content) -> int64_t {
    for (const auto& t : tok["added_tokens"])
      if (t["content"] == content) return t["id"].get<int64_t>();
    if (given) input_error("synth --tokenizer: the tokenizer has no added token ", content, "; expected the stop tokens of a Qwen tokenizer");
    throw std::logic_error("synthetic tokenizer lacks " + content);
  };
  int64_t eos = special("<|endoftext|>"), im_end = special("<|im_end|>");

  json cfg_out = config;
  json& lm = cfg_out.contains("text_config") ? cfg_out["text_config"] : cfg_out;
  if (cfg.vocab_size <= 1024 || given) {  // tiny models: point the token ids at the tokenizer shipped
    lm["eos_token_id"] = eos;
    lm["bos_token_id"] = nullptr;
  }
  if (given) max_ids = static_cast<int>(cfg.vocab_size);
  if (!opt.mtp) lm.erase("mtp_num_hidden_layers");
  // The stop ids must be tokens of the synthetic tokenizer (its first max_ids ids): a real-size
  // preset's own ids (248044) are not, so generation stops at the tokenizer's <|im_end|> and
  // <|endoftext|> instead.
  bool own_ids = cfg.vocab_size > 1024 && !cfg.eos_token_ids.empty();
  for (int64_t id : cfg.eos_token_ids) own_ids = own_ids && id < max_ids;
  json gen = {{"eos_token_id", own_ids ? json(cfg.eos_token_ids) : json{im_end, eos}},
              {"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 20},
              {"degenbisect_synthetic", true}};
  write_file_atomic(out / "config.json", cfg_out.dump(2) + "\n");
  write_file_atomic(out / "generation_config.json", gen.dump(2) + "\n");
  write_file_atomic(out / "tokenizer.json", tok_json);
}

// Every tensor's declaration and value rule; the bytes are made while each shard is written, a
// chunk at a time on every core, so a checkpoint larger than memory can be written.
struct SynthItem {
  TensorDecl decl;
  ValueRule rule;
  uint64_t key;
};

std::vector<SynthItem> synth_items(const std::vector<WeightSpec>& table, const ModelConfig& cfg, const SynthOptions& opt,
                                   int64_t& params, uint64_t& total) {
  std::vector<SynthItem> items;
  for (const auto& spec : table) {
    if (spec.need == Need::optional) continue;  // e.g. lm_head.weight of a tied model
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    bool f32 = opt.gdn_params_f32 && (ends_with(spec.name, "A_log") || ends_with(spec.name, "linear_attn.norm.weight"));
    const DType dt = f32 ? DType::f32 : DType::bf16;
    const uint64_t nbytes = static_cast<uint64_t>(n) * dtype_size(dt);
    items.push_back({TensorDecl{spec.name, dt, spec.shape, nbytes}, rule_for(spec.name, spec.shape, cfg, opt.embed_scale), fnv1a(spec.name)});
    params += n;
    total += nbytes;
  }
  return items;
}

// Shards: `shards` of them, each tensor in the part of the byte range its middle falls in (so every
// shard is about total / shards); or greedily up to shard_bytes; or one file. The shard of each
// item; nshards is set to the number of files.
std::vector<size_t> assign_shards(const std::vector<SynthItem>& items, uint64_t total, const SynthOptions& opt,
                                  size_t& nshards) {
  std::vector<size_t> shard_of(items.size(), 0);
  nshards = 1;
  if (opt.shards > 1) {
    uint64_t off = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const uint64_t mid = off + items[i].decl.nbytes / 2;
      shard_of[i] = std::min<size_t>(static_cast<size_t>(mid / ((total + opt.shards - 1) / opt.shards)), opt.shards - 1);
      off += items[i].decl.nbytes;
    }
    // numbered 0..n-1 in order of the shards that received tensors (a tiny model may leave some empty)
    std::vector<size_t> renum(opt.shards, SIZE_MAX);
    nshards = 0;
    for (size_t& s : shard_of) {
      if (renum[s] == SIZE_MAX) renum[s] = nshards++;
      s = renum[s];
    }
  } else if (opt.shard_bytes > 0) {
    int64_t fill = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t b = static_cast<int64_t>(items[i].decl.nbytes);
      if (fill > 0 && fill + b > opt.shard_bytes) {
        ++nshards;
        fill = 0;
      }
      shard_of[i] = nshards - 1;
      fill += b;
    }
  }
  return shard_of;
}

// Removes outputs of an earlier synth into the same folder that this one would not overwrite.
void remove_old_weights(const std::filesystem::path& out) {
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    std::string fn = e.path().filename().string();
    if (ends_with(fn, ".safetensors") || fn == "model.safetensors.index.json") std::filesystem::remove(e.path());
  }
}

// One chunk of a tensor: elements [off / esize, (off + n) / esize) into buf, split over the cores.
void fill_chunk(const SynthItem& it, uint64_t seed, unsigned threads, uint64_t off, uint8_t* buf, size_t n) {
  const size_t es = dtype_size(it.decl.dtype);
  const uint64_t e0 = off / es, ne = n / es;
  auto work = [&](uint64_t a, uint64_t b) {
    for (uint64_t i = a; i < b; ++i) {
      const float v = static_cast<float>(value_at(it.rule, seed, it.key, e0 + i));
      if (es == 4) std::memcpy(buf + 4 * i, &v, 4);
      else { const uint16_t h = f32_to_bf16(v); std::memcpy(buf + 2 * i, &h, 2); }
    }
  };
  const uint64_t parts = ne < (1u << 16) ? 1 : threads;
  std::vector<std::thread> pool;
  for (uint64_t k = 1; k < parts; ++k) pool.emplace_back(work, ne * k / parts, ne * (k + 1) / parts);
  work(0, ne / parts);
  for (auto& th : pool) th.join();
}

}  // namespace

int64_t synth_checkpoint(const json& config, const SynthOptions& opt, const std::filesystem::path& out, std::FILE* progress) {
  ModelConfig cfg = parse_model_config(config, "synth config");
  std::filesystem::create_directories(out);

  write_synth_side_files(config, cfg, opt, out);
  if (!opt.weights) return 0;

  CheckpointLayout lay;
  lay.experts_fused = opt.experts_fused && cfg.is_moe();
  lay.mtp_layers = opt.mtp ? 1 : 0;
  std::vector<WeightSpec> table = weight_table(cfg, lay);

  int64_t params = 0;
  uint64_t total = 0;  // bytes
  const std::vector<SynthItem> items = synth_items(table, cfg, opt, params, total);
  size_t nshards = 1;
  const std::vector<size_t> shard_of = assign_shards(items, total, opt, nshards);
  remove_old_weights(out);
  auto shard_name = [&](size_t s) {
    if (nshards == 1) return std::string("model.safetensors");
    char fn[64];
    std::snprintf(fn, sizeof fn, "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
    return std::string(fn);
  };
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t written = 0;
  for (size_t s = 0; s < nshards; ++s) {
    std::vector<TensorDecl> decls;
    std::vector<const SynthItem*> in;
    for (size_t i = 0; i < items.size(); ++i)
      if (shard_of[i] == s) {
        decls.push_back(items[i].decl);
        in.push_back(&items[i]);
      }
    TensorFill fill = [&](size_t t, uint64_t off, uint8_t* buf, size_t n) {
      fill_chunk(*in[t], opt.seed, threads, off, buf, n);
    };
    write_safetensors_streamed(out / shard_name(s), {{"format", "pt"}}, decls, fill);
    for (const TensorDecl& d : decls) written += d.nbytes;
    if (progress && nshards > 1) {
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(progress, "synth: %s written (%zu of %zu; %.1f of %.1f GB in %.0f s)\n", shard_name(s).c_str(), s + 1,
                   nshards, double(written) / 1e9, double(total) / 1e9, sec);
      std::fflush(progress);
    }
  }
  if (nshards > 1) {
    json weight_map = json::object();
    for (size_t i = 0; i < items.size(); ++i) weight_map[items[i].decl.name] = shard_name(shard_of[i]);
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  return params;
}

}  // namespace degen
