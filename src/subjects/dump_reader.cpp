// compare --dump (subjects/dump_reader.h): the name tables of the engines' dumps and the reader that opens and
// checks a dump file. The comparison itself: subjects/dump.h.
#include "subjects/dump_reader.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <cmath>
#include <map>

#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

const std::vector<DumpName>& llama_cpp_dump_names() {
  using H = HeadOrder;
  static const std::vector<DumpName> t = {
      {'M', "model.input_embed", Step::embed, H::same, 0, false, "token embeddings"},
      {'*', "attn_norm", Step::attn_norm, H::same, 0, false, "input_layernorm"},
      // attention layer (models/qwen35.cpp build_layer_attn)
      {'A', "Qcur", Step::attn_q, H::same, 0, false, "query after q_norm and RoPE (its last value)"},
      {'A', "gate_reshaped", Step::attn_gate, H::same, 0, false, "output-gate logits"},
      {'A', "Kcur", Step::attn_k, H::same, 0, false, "key after k_norm and RoPE (its last value)"},
      {'A', "Vcur", Step::attn_v, H::same, 0, false, "value"},
      {'A', "attn_pregate", Step::attn_core, H::same, 0, false, "softmax(qk)v"},
      {'A', "attn_gated", Step::attn_gated, H::same, 0, false, "after the sigmoid gate"},
      {'A', "attn_output", Step::mixer_out, H::same, 0, false, "o_proj"},
      // Gated DeltaNet layer (build_layer_attn_linear, delta-net-base.cpp build_recurrent_attn)
      {'G', "linear_attn_qkv_mixed", Step::gdn_qkv, H::vheads_tiled, 2, true, "in_proj_qkv"},
      {'G', "z", Step::gdn_z, H::vheads_tiled, 0, true, "in_proj_z"},
      {'G', "beta", Step::gdn_b, H::vheads_tiled, 0, false, "in_proj_b"},
      {'G', "alpha", Step::gdn_a, H::vheads_tiled, 0, false, "in_proj_a"},
      {'G', "conv_output_silu", Step::gdn_conv, H::vheads_tiled, 2, true, "causal conv + SiLU"},
      {'G', "q_conv_predelta", Step::gdn_q, H::same, 0, false, "L2-normalised query (scaled by 1/sqrt(d_k) here)", true},
      {'G', "k_conv_predelta", Step::gdn_k, H::same, 0, false, "L2-normalised key"},
      {'G', "gate", Step::gdn_g, H::vheads_tiled, 0, false, "g = -exp(A_log)·softplus(a + dt_bias)"},
      {'G', "beta_sigmoid", Step::gdn_beta, H::vheads_tiled, 0, false, "sigmoid(b)"},
      {'G', "attn_output", Step::gdn_core, H::vheads_tiled, 0, true, "gated delta rule output"},
      {'G', "final_output", Step::gdn_norm, H::vheads_tiled, 0, true, "gated RMSNorm"},
      {'G', "linear_attn_out", Step::mixer_out, H::same, 0, false, "out_proj"},
      // both
      {'*', "attn_residual", Step::h_mid, H::same, 0, false, "residual after the mixer"},
      {'*', "attn_post_norm", Step::ffn_norm, H::same, 0, false, "post_attention_layernorm"},
      {'*', "ffn_out", Step::ffn_out, H::same, 0, false, "MLP"},
      {'*', "l_out", Step::l_out, H::same, 0, false, "layer output"},
      {'M', "result_norm", Step::final_norm, H::same, 0, false, "model.norm"},
  };
  return t;
}

const std::vector<DumpName>& degenbisect_dump_names() {
  static const std::vector<DumpName> t = [] {
    std::vector<DumpName> v;
    for (const StepInfo& s : trace_steps()) {
      if (s.step == Step::l_in || s.step == Step::logits || s.step == Step::mtp_logits) continue;
      if (!s.per_layer && s.step != Step::embed && s.step != Step::final_norm) continue;  // the MTP head
      v.push_back({s.per_layer ? '*' : 'M', s.name, s.step, HeadOrder::same, 0, false, s.what});
    }
    return v;
  }();
  return t;
}

const std::vector<DumpName>& dump_names(const std::string& names) {
  if (names == "llama.cpp") return llama_cpp_dump_names();
  if (names == "degenbisect") return degenbisect_dump_names();
  input_error("a dump named '", names, "': expected 'llama.cpp' or 'degenbisect' names (docs/dump-format.md)");
}

namespace {

// Tiled value heads back to our grouped order: ours[off + (k·r + v)·b + e] = theirs[off + (v·n_k + k)·b + e].
void untile_vheads(DumpRows& x, const ModelConfig& cfg, int64_t off, int64_t block) {
  const int64_t nk = cfg.n_k, r = cfg.r();
  if (off + cfg.n_v * block > x.cols) return;  // not the layout we expect: compared as is (and fails loudly)
  std::vector<float> row(static_cast<size_t>(cfg.n_v * block));
  for (int64_t i = 0; i < x.rows; ++i) {
    float* p = x.v.data() + i * x.cols + off;
    for (int64_t k = 0; k < nk; ++k)
      for (int64_t v = 0; v < r; ++v)
        for (int64_t e = 0; e < block; ++e) row[static_cast<size_t>((k * r + v) * block + e)] = p[(v * nk + k) * block + e];
    std::copy(row.begin(), row.end(), p);
  }
}

// The engine's name of entry n at `layer` (-1: a whole-model entry).
std::string engine_name(const DumpName& n, int layer) {
  return layer < 0 ? std::string(n.engine) : cat(n.engine, "-", layer);
}

// Does entry n apply to layer `layer` (-1: the whole model) of cfg?
bool applies(const DumpName& n, int layer, const ModelConfig& cfg) {
  if ((n.kind == 'M') != (layer < 0)) return false;
  if (n.kind == 'M' || n.kind == '*') return true;
  return n.kind == (cfg.layer_types[static_cast<size_t>(layer)] == LayerKind::full ? 'A' : 'G');
}

// A decimal count written as a metadata string ("52"); nullopt when it is not one.
std::optional<int64_t> decimal_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;  // 18 digits: below 2^63
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

bool dump_dtype_ok(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

DumpReader::DumpReader(const std::filesystem::path& file, const std::string& case_id, int64_t tokens,
                       const ModelConfig& cfg)
    : cfg_(cfg), T_(tokens) {
  DEGEN_ASSERT(tokens > 0, "a golden sequence has tokens");
  f_ = SafetensorsFile::open(file);
  const std::string where = file.string();
  // 1. Metadata.
  const auto& md = f_->metadata();
  auto meta = [&](const char* k) { auto it = md.find(k); return it == md.end() ? std::string() : it->second; };
  if (meta("format") != "degenbisect-dump")
    input_error(where, ": metadata format '", meta("format"), "', expected 'degenbisect-dump' (docs/dump-format.md)");
  if (meta("names") != "llama.cpp" && meta("names") != "degenbisect")
    input_error(where, ": metadata names '", meta("names"), "': expected 'llama.cpp' or 'degenbisect' (docs/dump-format.md)");
  names_ = &dump_names(meta("names"));
  if (!meta("case").empty() && meta("case") != case_id)
    input_error(where, ": a dump of case '", meta("case"), "', expected '", case_id, "'");
  if (md.count("tokens") && decimal_count(meta("tokens")) != tokens)
    input_error(where, ": metadata tokens '", meta("tokens"), "'; the golden sequence of case '", case_id, "' has ", tokens,
                " tokens (expected that count, in decimal digits)");
  if (meta("mode") == "decode") {
    mode_ = 1;
    const std::optional<int64_t> pt = decimal_count(meta("prompt_tokens"));
    if (!pt || *pt < 1 || *pt > tokens)
      input_error(where, ": metadata mode 'decode' with prompt_tokens '", meta("prompt_tokens"), "'; expected 1 to ", tokens,
                  " in decimal digits (the tokens of the first batch)");
    prompt_tokens_ = *pt;
  } else if (!meta("mode").empty() && meta("mode") != "prefill") {
    input_error(where, ": metadata mode '", meta("mode"), "', expected 'prefill' or 'decode' (docs/dump-format.md)");
  }
  // 2. Tensors: dtype and shape of every tensor this reader may be asked for, before any is read.
  auto check = [&](const std::string& name, std::optional<int64_t> cols) {
    const TensorView* t = f_->find(name);
    if (!t) return;
    if (!dump_dtype_ok(t->dtype))
      input_error(where, ": tensor '", name, "' has dtype ", dtype_name(t->dtype),
                  "; expected F32, F16 or BF16 (a dump holds the engine's float values, docs/dump-format.md)");
    if (t->shape.empty() || t->shape[0] != tokens)
      input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), "; expected ", tokens,
                  " rows (one per token of the golden sequence) first");
    if (cols && t->numel() != tokens * *cols)
      input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), "; expected [", tokens, ", ", *cols,
                  "] (hidden size ", cfg.hidden_size, ")");
  };
  const TensorView* lg = f_->find("logits");
  if (!lg || lg->shape.size() != 2)
    input_error(where, ": no 'logits' tensor [tokens, vocabulary]",
                lg ? cat(" (found shape ", shape_str(lg->shape), ")") : std::string());
  if (lg->shape[0] != tokens)
    input_error(where, ": logits for ", lg->shape[0], " positions; the golden sequence of case '", case_id, "' has ",
                tokens, " tokens (a dump of another sequence?)");
  if (lg->shape[1] != cfg.vocab_size)
    input_error(where, ": logits over ", lg->shape[1], " ids; the model's vocabulary has ", cfg.vocab_size,
                " (a dump of another model's vocabulary?)");
  check("logits", cfg.vocab_size);
  for (const DumpName& n : *names_)
    for (int l = -1; l < cfg.num_layers; ++l) {
      if (!applies(n, l, cfg)) continue;
      const bool hidden = n.step == Step::embed || n.step == Step::l_out;  // ours is [T, H]
      check(engine_name(n, l), hidden ? std::optional<int64_t>(cfg.hidden_size) : std::nullopt);
    }
  const DumpName l_out{'*', "l_out", Step::l_out, HeadOrder::same, 0, false, ""};
  for (int l = 0; l < cfg.num_layers; ++l) check(engine_name(l_out, l), cfg.hidden_size);
}

DumpReader::~DumpReader() = default;

const std::filesystem::path& DumpReader::path() const { return f_->path(); }

DumpRows DumpReader::rows(const std::string& name) const {
  const TensorView* t = f_->find(name);
  DumpRows r;
  if (!t) return r;
  DEGEN_ASSERT(dump_dtype_ok(t->dtype) && !t->shape.empty() && t->shape[0] == T_, "checked when opened: ", name);
  r.rows = T_;
  r.cols = t->numel() / T_;
  r.v.resize(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < r.v.size(); ++i) r.v[i] = t->at(i);
  return r;
}

std::vector<float> DumpReader::logits() const { return rows("logits").v; }

DumpRows DumpReader::mapped(const DumpName& n, int layer) const {
  DumpRows r = rows(engine_name(n, layer));
  if (!r.v.empty() && n.order == HeadOrder::vheads_tiled)
    untile_vheads(r, cfg_, n.offset_keys * cfg_.d_key(), n.block_is_dv ? cfg_.d_v : 1);
  if (n.scale_q)
    for (float& x : r.v) x = static_cast<float>(x / std::sqrt(static_cast<double>(cfg_.d_k)));
  return r;
}

}  // namespace degen
