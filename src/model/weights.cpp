// Weight table and binding (../shared/spec/model.md §3.2).
#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "util/error.h"

namespace degen {

namespace {

const std::vector<DType> kFloat = {DType::bf16, DType::f16, DType::f32};

struct TableBuilder {
  std::vector<WeightSpec> rows;
  void add(std::string name, std::vector<int64_t> shape, std::string kind, Need need = Need::required) {
    rows.push_back({std::move(name), std::move(shape), kFloat, need, std::move(kind)});
  }
};

void add_mlp(TableBuilder& t, const std::string& p, int64_t H, int64_t I, const std::string& kind) {
  t.add(p + "gate_proj.weight", {I, H}, kind);
  t.add(p + "up_proj.weight", {I, H}, kind);
  t.add(p + "down_proj.weight", {H, I}, kind);
}

void add_attention(TableBuilder& t, const std::string& p, const ModelConfig& c, const std::string& kind) {
  const int64_t H = c.hidden_size, D = c.head_dim;
  t.add(p + "self_attn.q_proj.weight", {2 * c.n_q * D, H}, kind);
  t.add(p + "self_attn.k_proj.weight", {c.n_kv * D, H}, kind);
  t.add(p + "self_attn.v_proj.weight", {c.n_kv * D, H}, kind);
  t.add(p + "self_attn.o_proj.weight", {H, c.n_q * D}, kind);
  t.add(p + "self_attn.q_norm.weight", {D}, "norm");
  t.add(p + "self_attn.k_norm.weight", {D}, "norm");
}

void add_gdn(TableBuilder& t, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  const std::string a = p + "linear_attn.";
  if (c.arch == Arch::qwen3_next) {
    t.add(a + "in_proj_qkvz.weight", {2 * c.d_key() + 2 * c.d_val(), H}, "gdn");
    t.add(a + "in_proj_ba.weight", {2 * int64_t(c.n_v), H}, "gdn");
  } else {
    t.add(a + "in_proj_qkv.weight", {c.d_conv(), H}, "gdn");
    t.add(a + "in_proj_z.weight", {c.d_val(), H}, "gdn");
    t.add(a + "in_proj_b.weight", {c.n_v, H}, "gdn");
    t.add(a + "in_proj_a.weight", {c.n_v, H}, "gdn");
  }
  t.add(a + "conv1d.weight", {c.d_conv(), 1, c.conv_kernel}, "gdn");
  t.add(a + "dt_bias", {c.n_v}, "gdn");
  t.add(a + "A_log", {c.n_v}, "gdn");
  t.add(a + "norm.weight", {c.d_v}, "norm");
  t.add(a + "out_proj.weight", {H, c.d_val()}, "gdn");
}

void add_ffn(TableBuilder& t, const std::string& p, const ModelConfig& c, bool moe, bool fused,
             const std::string& kind_prefix) {
  const int64_t H = c.hidden_size;
  if (!moe) {
    add_mlp(t, p + "mlp.", H, c.intermediate_size, kind_prefix + "mlp");
    return;
  }
  const std::string kind = kind_prefix + "moe";
  const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, Is = c.shared_expert_intermediate_size;
  t.add(p + "mlp.gate.weight", {E, H}, kind);
  if (fused) {
    t.add(p + "mlp.experts.gate_up_proj", {E, 2 * Ie, H}, kind);
    t.add(p + "mlp.experts.down_proj", {E, H, Ie}, kind);
  } else {
    for (int64_t e = 0; e < E; ++e) add_mlp(t, cat(p, "mlp.experts.", e, "."), H, Ie, kind);
  }
  if (Is > 0) {
    add_mlp(t, p + "mlp.shared_expert.", H, Is, kind);
    t.add(p + "mlp.shared_expert_gate.weight", {1, H}, kind);
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

CheckpointLayout detect_layout(const ModelConfig& cfg, const Checkpoint& ckpt) {
  CheckpointLayout lay;
  for (int i = 0; i < cfg.num_layers; ++i)
    if (ckpt.find(cat(cfg.tensor_prefix, "layers.", i, ".mlp.experts.gate_up_proj"))) lay.experts_fused = true;
  std::set<int> mtp_layers;
  bool any_mtp = false;
  for (const TensorView* t : ckpt.tensors()) {
    if (!starts_with(t->name, "mtp.")) continue;
    any_mtp = true;
    if (starts_with(t->name, "mtp.layers.")) {
      size_t b = 11, e = t->name.find('.', b);
      std::string idx = t->name.substr(b, e - b);
      if (!idx.empty() && idx.size() < 4 && std::all_of(idx.begin(), idx.end(), ::isdigit))
        mtp_layers.insert(std::stoi(idx));
    }
  }
  if (any_mtp) lay.mtp_layers = std::max<int>(1, mtp_layers.empty() ? 1 : *mtp_layers.rbegin() + 1);
  return lay;
}

std::vector<WeightSpec> weight_table(const ModelConfig& c, const CheckpointLayout& lay) {
  TableBuilder t;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const std::string& P = c.tensor_prefix;
  t.add(P + "embed_tokens.weight", {V, H}, "embed");
  t.add("lm_head.weight", {V, H}, "lm_head", c.tie_word_embeddings ? Need::optional : Need::required);
  t.add(P + "norm.weight", {H}, "norm");
  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = cat(P, "layers.", i, ".");
    t.add(p + "input_layernorm.weight", {H}, "norm");
    t.add(p + "post_attention_layernorm.weight", {H}, "norm");
    if (c.layer_types[i] == LayerKind::linear) add_gdn(t, p, c);
    else add_attention(t, p, c, "attn");
    add_ffn(t, p, c, c.is_moe_layer(i), lay.experts_fused, "");
  }
  for (int m = 0; m < lay.mtp_layers; ++m) {
    if (m == 0) {
      t.add("mtp.fc.weight", {H, 2 * H}, "mtp");
      t.add("mtp.pre_fc_norm_embedding.weight", {H}, "mtp");
      t.add("mtp.pre_fc_norm_hidden.weight", {H}, "mtp");
      t.add("mtp.norm.weight", {H}, "mtp");
    }
    std::string p = cat("mtp.layers.", m, ".");
    t.add(p + "input_layernorm.weight", {H}, "mtp");
    t.add(p + "post_attention_layernorm.weight", {H}, "mtp");
    add_attention(t, p, c, "mtp");
    // MTP experts are stored per expert even where the main layers are fused (spec §3.2).
    add_ffn(t, p, c, c.is_moe(), /*fused=*/false, "mtp-");
  }
  for (auto& r : t.rows)
    if (starts_with(r.kind, "mtp-")) r.kind = "mtp";  // all MTP tensors count as "mtp"
  return t.rows;
}

namespace {

std::string dtype_list(const std::vector<DType>& ds) {
  std::string s;
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? "/" : "") + std::string(dtype_name(ds[i]));
  return s;
}

// Checks the checkpoint against the table; throws one InputError listing every problem.
void validate_against(const std::vector<WeightSpec>& table, const Checkpoint& ckpt, const ModelConfig& cfg) {
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string> known;
  for (const auto& spec : table) {
    known.insert(spec.name);
    const TensorView* t = ckpt.find(spec.name);
    if (!t) {
      if (spec.need == Need::required) missing.push_back(spec.name + " " + shape_str(spec.shape));
      continue;
    }
    if (t->shape != spec.shape)
      mismatched.push_back(cat(spec.name, ": shape ", shape_str(t->shape), ", expected ", shape_str(spec.shape)));
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), t->dtype) == spec.dtypes.end())
      mismatched.push_back(cat(spec.name, ": dtype ", dtype_name(t->dtype), ", expected ", dtype_list(spec.dtypes),
                               t->dtype == DType::f8_e4m3 ? " (FP8-quantised checkpoints are not supported)" : ""));
  }
  for (const TensorView* t : ckpt.tensors()) {
    if (known.count(t->name)) continue;
    if (starts_with(t->name, "model.visual.") || starts_with(t->name, "visual.")) continue;  // vision tower
    unexpected.push_back(t->name + " " + shape_str(t->shape));
  }
  if (missing.empty() && mismatched.empty() && unexpected.empty()) return;
  std::string msg = cat(ckpt.dir().string(), ": checkpoint does not match its config (", arch_name(cfg.arch),
                        ", model_type ", cfg.model_type, ", ", cfg.num_layers, " layers ", cfg.layer_map(), ")");
  auto section = [&](const char* title, const std::vector<std::string>& items) {
    if (items.empty()) return;
    msg += cat("\n  ", items.size(), " ", title, ":");
    size_t shown = std::min<size_t>(items.size(), 40);
    for (size_t i = 0; i < shown; ++i) msg += "\n    " + items[i];
    if (shown < items.size()) msg += cat("\n    ... and ", items.size() - shown, " more");
  };
  section("missing", missing);
  section("mismatched", mismatched);
  section("unexpected", unexpected);
  throw InputError(msg);
}

}  // namespace

ModelWeights bind_weights(const ModelConfig& c, const Checkpoint& ckpt) {
  CheckpointLayout lay = detect_layout(c, ckpt);
  validate_against(weight_table(c, lay), ckpt, c);
  return bind_weight_views(c, lay, [&](const std::string& name) { return &ckpt.get(name); });
}

ModelWeights bind_weight_views(const ModelConfig& c, const CheckpointLayout& lay,
                               const std::function<const TensorView*(const std::string&)>& find) {
  ModelWeights w;
  w.experts_fused = lay.experts_fused;
  auto get = [&](const std::string& name) {
    const TensorView* v = find(name);
    if (!v) input_error("weight ", name, " is missing");
    return v;
  };
  const std::string& P = c.tensor_prefix;
  w.embed = get(P + "embed_tokens.weight");
  w.lm_head = c.tie_word_embeddings ? w.embed : get("lm_head.weight");
  w.final_norm = get(P + "norm.weight");

  auto bind_mlp = [&](const std::string& p) { return MlpWeights{get(p + "gate_proj.weight"), get(p + "up_proj.weight"), get(p + "down_proj.weight")}; };
  auto bind_attn = [&](const std::string& p) {
    return AttnWeights{get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                       get(p + "self_attn.v_proj.weight"), get(p + "self_attn.o_proj.weight"),
                       get(p + "self_attn.q_norm.weight"), get(p + "self_attn.k_norm.weight")};
  };
  auto slice = [&](const TensorView* full, int64_t e, int64_t row0, int64_t rows, int64_t cols, const char* part) {
    auto v = std::make_unique<TensorView>();
    size_t es = dtype_size(full->dtype);
    size_t per_expert = static_cast<size_t>(full->shape[1] * full->shape[2]);
    v->name = cat(full->name, "[", e, "].", part);
    v->dtype = full->dtype;
    v->shape = {rows, cols};
    v->data = full->data + (static_cast<size_t>(e) * per_expert + static_cast<size_t>(row0 * cols)) * es;
    v->nbytes = static_cast<size_t>(rows * cols) * es;
    v->offset = full->offset + (v->data - full->data);
    v->file = full->file;
    w.derived.push_back(std::move(v));
    return w.derived.back().get();
  };
  auto bind_ffn = [&](LayerWeights& lw, const std::string& p, bool moe, bool fused) {
    lw.moe = moe;
    if (!moe) { lw.mlp = bind_mlp(p + "mlp."); return; }
    lw.moe_w.router = get(p + "mlp.gate.weight");
    const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, H = c.hidden_size;
    if (fused) {
      const TensorView* gu = get(p + "mlp.experts.gate_up_proj");
      const TensorView* dn = get(p + "mlp.experts.down_proj");
      for (int64_t e = 0; e < E; ++e)  // gate rows [0, I_e), up rows [I_e, 2 I_e) (spec §3.2)
        lw.moe_w.experts.push_back({slice(gu, e, 0, Ie, H, "gate"), slice(gu, e, Ie, Ie, H, "up"),
                                    slice(dn, e, 0, H, Ie, "down")});
    } else {
      for (int64_t e = 0; e < E; ++e) lw.moe_w.experts.push_back(bind_mlp(cat(p, "mlp.experts.", e, ".")));
    }
    if (c.shared_expert_intermediate_size > 0) {
      lw.moe_w.shared = bind_mlp(p + "mlp.shared_expert.");
      lw.moe_w.shared_gate = get(p + "mlp.shared_expert_gate.weight");
    }
  };

  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = cat(P, "layers.", i, ".");
    LayerWeights lw;
    lw.kind = c.layer_types[i];
    lw.input_norm = get(p + "input_layernorm.weight");
    lw.post_norm = get(p + "post_attention_layernorm.weight");
    if (lw.kind == LayerKind::full) {
      lw.attn = bind_attn(p);
    } else {
      std::string a = p + "linear_attn.";
      GdnWeights& g = lw.gdn;
      g.fused = c.arch == Arch::qwen3_next;
      if (g.fused) {
        g.in_proj_qkvz = get(a + "in_proj_qkvz.weight");
        g.in_proj_ba = get(a + "in_proj_ba.weight");
      } else {
        g.in_proj_qkv = get(a + "in_proj_qkv.weight");
        g.in_proj_z = get(a + "in_proj_z.weight");
        g.in_proj_b = get(a + "in_proj_b.weight");
        g.in_proj_a = get(a + "in_proj_a.weight");
      }
      g.conv1d = get(a + "conv1d.weight");
      g.dt_bias = get(a + "dt_bias");
      g.A_log = get(a + "A_log");
      g.norm = get(a + "norm.weight");
      g.out_proj = get(a + "out_proj.weight");
    }
    bind_ffn(lw, p, c.is_moe_layer(i), lay.experts_fused);
    w.layers.push_back(std::move(lw));
  }
  for (int m = 0; m < lay.mtp_layers; ++m) {
    MtpWeights mw;
    mw.fc = get("mtp.fc.weight");
    mw.pre_fc_norm_embedding = get("mtp.pre_fc_norm_embedding.weight");
    mw.pre_fc_norm_hidden = get("mtp.pre_fc_norm_hidden.weight");
    mw.norm = get("mtp.norm.weight");
    std::string p = cat("mtp.layers.", m, ".");
    mw.layer.kind = LayerKind::full;
    mw.layer.input_norm = get(p + "input_layernorm.weight");
    mw.layer.post_norm = get(p + "post_attention_layernorm.weight");
    mw.layer.attn = bind_attn(p);
    bind_ffn(mw.layer, p, c.is_moe(), false);
    w.mtp.push_back(std::move(mw));
  }
  return w;
}

std::vector<int64_t> gdn_qkvz_rows(const ModelConfig& c) {
  const int64_t dk = c.d_k, dv = c.d_v, r = c.r();
  const int64_t P = 2 * dk + 2 * r * dv;  // per key-group stride
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(2 * c.d_key() + 2 * c.d_val()));
  for (int64_t g = 0; g < c.n_k; ++g)  // q
    for (int64_t i = 0; i < dk; ++i) rows.push_back(g * P + i);
  for (int64_t g = 0; g < c.n_k; ++g)  // k
    for (int64_t i = 0; i < dk; ++i) rows.push_back(g * P + dk + i);
  for (int64_t j = 0; j < c.n_v; ++j)  // v
    for (int64_t i = 0; i < dv; ++i) rows.push_back((j / r) * P + 2 * dk + (j % r) * dv + i);
  for (int64_t j = 0; j < c.n_v; ++j)  // z
    for (int64_t i = 0; i < dv; ++i) rows.push_back((j / r) * P + 2 * dk + r * dv + (j % r) * dv + i);
  return rows;
}

std::vector<int64_t> gdn_ba_rows(const ModelConfig& c) {
  const int64_t r = c.r();
  std::vector<int64_t> rows;
  for (int64_t j = 0; j < c.n_v; ++j) rows.push_back((j / r) * 2 * r + (j % r));      // b
  for (int64_t j = 0; j < c.n_v; ++j) rows.push_back((j / r) * 2 * r + r + (j % r));  // a
  return rows;
}

std::vector<ParamCount> count_params(const ModelConfig& cfg, const Checkpoint& ckpt) {
  CheckpointLayout lay = detect_layout(cfg, ckpt);
  std::map<std::string, ParamCount> by;
  for (const auto& spec : weight_table(cfg, lay)) {
    const TensorView* t = ckpt.find(spec.name);
    if (!t) continue;
    auto& pc = by[spec.kind];
    pc.kind = spec.kind;
    pc.count += t->numel();
    pc.bytes += static_cast<int64_t>(t->nbytes);
  }
  static const char* order[] = {"embed", "attn", "gdn", "mlp", "moe", "norm", "lm_head", "mtp"};
  std::vector<ParamCount> out;
  for (const char* k : order)
    if (by.count(k)) out.push_back(by[k]);
  return out;
}

// ---- non-finite weights ----

namespace {

// Non-finite elements of one tensor: count and first index (16-bit floats by their exponent bits).
NonFiniteTensor scan_tensor(const TensorView& t) {
  NonFiniteTensor r;
  r.tensor = &t;
  const int64_t n = t.numel();
  auto hit = [&](int64_t i) {
    if (r.count++ == 0) {
      r.first = i;
      r.first_value = t.at(static_cast<size_t>(i));
    }
  };
  switch (t.dtype) {
    case DType::bf16:
    case DType::f16: {
      const uint16_t mask = t.dtype == DType::bf16 ? 0x7f80 : 0x7c00;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        if ((b & mask) == mask) hit(i);
      }
      break;
    }
    case DType::f32:
    case DType::f64:
    case DType::f8_e4m3:
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(t.at(static_cast<size_t>(i)))) hit(i);
      break;
    default:
      break;  // integer tensors cannot hold NaN
  }
  return r;
}

}  // namespace

std::vector<NonFiniteTensor> find_nonfinite(const Checkpoint& ckpt) {
  const std::vector<const TensorView*> ts = ckpt.tensors();
  std::vector<NonFiniteTensor> found(ts.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < ts.size();) found[i] = scan_tensor(*ts[i]);
  };
  const size_t n = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), ts.size()));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < n; ++k) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::vector<NonFiniteTensor> out;
  for (const NonFiniteTensor& f : found)
    if (f.count > 0) out.push_back(f);
  return out;
}

std::string nonfinite_line(const NonFiniteTensor& nf) {
  const TensorView& t = *nf.tensor;
  return cat(t.name, " ", shape_str(t.shape), " ", dtype_name(t.dtype), ": ", nf.count, " of ", t.numel(),
             " values non-finite, element ", nf.first, " is ", nf.first_value, " (file ", t.file, ")");
}

std::string nonfinite_message(const std::vector<NonFiniteTensor>& bad, size_t n_tensors, const std::string& what) {
  if (bad.empty()) return "";
  std::string msg = cat(what, ": tensor ", bad[0].tensor->name, " has ", bad[0].count, " non-finite values (NaN or Inf; ",
                        bad.size(), " of ", n_tensors, " tensors contain NaN or Inf, expected none):");
  for (const NonFiniteTensor& b : bad) msg += "\n  " + nonfinite_line(b);
  return msg;
}

size_t require_finite_weights(const Checkpoint& ckpt, const std::string& what) {
  const std::vector<NonFiniteTensor> bad = find_nonfinite(ckpt);
  if (!bad.empty()) throw InputError(nonfinite_message(bad, ckpt.tensors().size(), what));
  return ckpt.tensors().size();
}

}  // namespace degen
