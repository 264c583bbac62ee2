// Localisation without toggles (see localise.h).
#include "diag/localise.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine/engine.h"
#include "engine/trace.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

using nlohmann::json;

namespace {


size_t step_index(const std::string& name) {
  const auto& steps = trace_steps();
  for (size_t i = 0; i < steps.size(); ++i)
    if (name == steps[i].name) return i;
  return steps.size();
}

// The step of a decoder layer's tensor (the part after "layers.N.").
std::optional<std::string> layer_tensor_step(const std::string& t) {
  // Order matters where one name contains another ("mlp.gate." vs "mlp.gate_proj").
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"input_layernorm.", "attn_norm"},
      {"post_attention_layernorm.", "ffn_norm"},
      {"self_attn.q_proj.", "attn_q"},     // q and the output gate, interleaved per head
      {"self_attn.q_norm.", "attn_q"},
      {"self_attn.k_proj.", "attn_k"},
      {"self_attn.k_norm.", "attn_k"},
      {"self_attn.v_proj.", "attn_v"},
      {"self_attn.o_proj.", "mixer_out"},
      {"linear_attn.in_proj_qkvz.", "gdn_qkv"},
      {"linear_attn.in_proj_qkv.", "gdn_qkv"},
      {"linear_attn.in_proj_z.", "gdn_z"},
      {"linear_attn.in_proj_ba.", "gdn_b"},
      {"linear_attn.in_proj_b.", "gdn_b"},
      {"linear_attn.in_proj_a.", "gdn_a"},
      {"linear_attn.conv1d.", "gdn_conv"},
      {"linear_attn.dt_bias", "gdn_g"},
      {"linear_attn.A_log", "gdn_g"},
      {"linear_attn.norm.", "gdn_norm"},
      {"linear_attn.out_proj.", "mixer_out"},
      {"mlp.shared_expert_gate.", "moe_shared"},
      {"mlp.shared_expert.", "moe_shared"},
      {"mlp.experts.", "moe_routed"},
      {"mlp.gate.", "moe_router"},
      {"mlp.gate_proj.", "ffn_out"},
      {"mlp.up_proj.", "ffn_out"},
      {"mlp.down_proj.", "ffn_out"},
  };
  for (const auto& [key, step] : table)
    if (t.starts_with(key)) return step;
  return std::nullopt;
}

// Every (case, mode, layer) whose isolated error breaks its rule.
struct Break {
  size_t c;
  int mode, layer;
};

std::vector<Break> layer_breaks(const CompareResult& r) {
  std::vector<Break> out;
  for (size_t c = 0; c < r.cases.size(); ++c)
    for (const LayerRow& row : r.cases[c].layers)
      for (int m = 0; m < 2; ++m)
        if (row.iso[m] && !row.pass[m]) out.push_back({c, m, row.layer});
  return out;
}

bool breaks_at(const CompareResult& r, int layer) {
  for (const Break& b : layer_breaks(r))
    if (b.layer == layer) return true;
  return false;
}

PatchCheck patch_check(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                       const RunConfig& bad, const BackendFactory& factory, const std::string& case_id, int layer,
                       ForcedMode mode) {
  const ModelConfig& cfg = model.config;
  const int L = cfg.num_layers;
  const int64_t V = cfg.vocab_size;
  GoldenCase g = rec.load_case(select_cases(rec, {case_id}).at(0));
  PatchCheck pc;
  pc.case_id = case_id;
  pc.layer = layer;
  pc.positions = g.P;
  const std::vector<int32_t> seq = g.sequence();
  std::vector<int32_t> next(static_cast<size_t>(g.P), -1);
  for (int64_t i = 0; i + 1 < g.P && i + 1 < static_cast<int64_t>(seq.size()); ++i) next[static_cast<size_t>(i)] = seq[static_cast<size_t>(i + 1)];
  std::vector<uint8_t> mask;
  if (tok) mask = tok->padding_mask(V);
  const std::vector<uint8_t>* maskp = mask.empty() ? nullptr : &mask;

  std::unique_ptr<Backend> be = factory(bad, cfg);
  Engine eng(cfg, model.weights, *be, engine_options(bad));
  const bool last_stored = !g.l_out.at(static_cast<size_t>(L - 1)).empty();
  auto run = [&](bool patched, double& kld, double& drift) {
    ForcedOptions fo;
    fo.mode = mode;
    fo.run_positions = g.P;
    fo.capture_positions = g.P;
    fo.capture_layers.assign(static_cast<size_t>(L), false);
    fo.capture_layers[static_cast<size_t>(L - 1)] = last_stored;
    fo.vocab_mask = maskp;
    if (patched) {
      fo.patch_layer = layer;
      fo.patch_out = &g.l_out.at(static_cast<size_t>(layer));
    }
    ForcedRun fr = forced_run(eng, seq, fo);
    kld = mean_kld(logit_positions(fr.logits, fr.T, V, g.topk, next, maskp));
    drift = last_stored ? metrics::tensor_error(std::span<const float>(fr.l_out[static_cast<size_t>(L - 1)]),
                                                std::span<const float>(g.l_out[static_cast<size_t>(L - 1)]))
                              .rel_l2
                        : 0.0;
  };
  run(false, pc.kld_unpatched, pc.drift_unpatched);
  run(true, pc.kld_patched, pc.drift_patched);
  const FloorClass fc = floor_class_for(bad);
  const std::optional<CaseFloors>& floors = g.floors[static_cast<int>(fc)];
  const std::optional<double> kfloor = floors ? floors->kld[static_cast<int>(mode)] : std::nullopt;
  pc.kld_limit = kfloor ? opt.rules.kld.k * *kfloor + opt.rules.kld.eps : opt.rules.fallback_kld;
  pc.confirmed = std::isfinite(pc.kld_patched) && pc.kld_patched <= pc.kld_limit &&
                 (!last_stored || pc.drift_patched < pc.drift_unpatched || pc.drift_unpatched == 0);
  return pc;
}

}  // namespace

std::optional<TensorUse> tensor_first_use(const std::string& tensor, const ModelConfig& cfg) {
  const std::string& pre = cfg.tensor_prefix;
  if (tensor.starts_with("mtp.")) {
    if (tensor.starts_with("mtp.fc.") || tensor.starts_with("mtp.pre_fc_norm")) return TensorUse{-1, "mtp_in"};
    if (tensor.starts_with("mtp.norm.")) return TensorUse{-1, "mtp_norm"};
    if (tensor.starts_with("mtp.layers.")) return TensorUse{-1, "mtp_out"};
    return std::nullopt;
  }
  if (tensor == "lm_head.weight") return TensorUse{-1, "logits"};
  if (!tensor.starts_with(pre)) return std::nullopt;
  const std::string rest = tensor.substr(pre.size());
  if (rest.starts_with("embed_tokens.")) return TensorUse{-1, "embed"};
  if (rest.starts_with("norm.")) return TensorUse{-1, "final_norm"};
  if (!rest.starts_with("layers.")) return std::nullopt;
  char* end = nullptr;
  const long l = std::strtol(rest.c_str() + 7, &end, 10);
  if (end == rest.c_str() + 7 || *end != '.' || l < 0 || l >= cfg.num_layers) return std::nullopt;
  auto step = layer_tensor_step(std::string(end + 1));
  if (!step) return std::nullopt;
  return TensorUse{static_cast<int>(l), *step};
}

json SharedLocalisation::to_json() const {
  json j = {{"broken_layers", broken_layers}, {"layer", layer}, {"mode", mode}, {"case", case_id},
            {"rel_l2", metrics::json_number(err)}, {"limit", metrics::json_number(limit)}, {"reference", reference},
            {"reference_breaks", reference_breaks ? json(*reference_breaks) : json(nullptr)}, {"digests", digests},
            {"changed_tensors", changed_tensors}, {"cause", cause}, {"cause_words", cause_words},
            {"op", op ? json(*op) : json(nullptr)}, {"op_how", op_how},
            {"op_tensor", op_tensor ? json(*op_tensor) : json(nullptr)}};
  if (patch)
    j["patch"] = {{"case", patch->case_id}, {"layer", patch->layer}, {"positions", patch->positions},
                  {"kld_unpatched", metrics::json_number(patch->kld_unpatched)},
                  {"kld_patched", metrics::json_number(patch->kld_patched)},
                  {"kld_limit", metrics::json_number(patch->kld_limit)},
                  {"drift_unpatched", metrics::json_number(patch->drift_unpatched)},
                  {"drift_patched", metrics::json_number(patch->drift_patched)}, {"confirmed", patch->confirmed}};
  json s = json::array();
  for (const auto& r : subop) s.push_back(r.to_json());
  j["subop"] = s;
  return j;
}

SharedLocalisation localise_shared(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                   const CompareOptions& base, const RunConfig& bad, const BackendFactory& factory,
                                   bool subop, std::FILE* progress) {
  const ModelConfig& cfg = model.config;
  SharedLocalisation out;
  auto say = [&](const std::string& s) {
    if (progress) std::fprintf(progress, "localise: %s\n", s.c_str());
  };
  CompareOptions opt = base;
  opt.config = bad;
  say(cat("comparing `", bad.str(), "` with golden inputs injected into every layer"));
  out.tested = compare_golden(rec, model, tok, opt, factory);

  // 1. The first layer over its rule.
  const std::vector<Break> breaks = layer_breaks(out.tested);
  for (const Break& b : breaks)
    if (std::find(out.broken_layers.begin(), out.broken_layers.end(), b.layer) == out.broken_layers.end())
      out.broken_layers.push_back(b.layer);
  std::sort(out.broken_layers.begin(), out.broken_layers.end());
  if (!out.broken_layers.empty()) {
    out.layer = out.broken_layers.front();
    for (const Break& b : breaks) {
      if (b.layer != out.layer) continue;
      const LayerRow& row = out.tested.cases[b.c].layers[static_cast<size_t>(b.layer)];
      out.mode = forced_mode_name(static_cast<ForcedMode>(b.mode));
      out.case_id = out.tested.cases[b.c].id;
      out.err = row.iso[b.mode]->rel_l2;
      out.limit = row.limit[b.mode].value_or(0);
      break;
    }
  }

  // 3. The record's own reference on this checkpoint.
  RunConfig ref;
  if (rec.manifest().settings.fp64()) ref.precision = Precision::fp64;
  out.reference = ref.str();
  const CompareResult* ref_result = &out.tested;
  CompareResult ref_owned;
  if (ref.str() != bad.str()) {
    CompareOptions ro = base;
    ro.config = ref;
    say(cat("comparing the record's reference `", ref.str(), "` on this checkpoint"));
    ref_owned = compare_golden(rec, model, tok, ro, factory);
    ref_result = &ref_owned;
  }
  out.reference_breaks = out.layer >= 0 ? breaks_at(*ref_result, out.layer) : ref_result->verdict == metrics::Verdict::bad;
  out.digests = !rec.tensor_digests().empty();
  out.changed_tensors = out.tested.changed_tensors;
  const std::string tool = rec.manifest().tool_version.value_or("?");
  if (*out.reference_breaks) {
    if (out.digests && !out.changed_tensors.empty()) {
      out.cause = "model";
      out.cause_words = cat("the model: the record's own reference (`", out.reference, "`) does not reproduce the record on ",
                            "this checkpoint either, and ", out.changed_tensors.size(), " tensor(s) differ from the ",
                            "record's model");
    } else if (out.digests) {
      out.cause = "engine-build";
      out.cause_words = cat("the engine build: every tensor matches the record's digests, but the record's own reference (`",
                            out.reference, "`) no longer reproduces it (the record was made by version ", tool, ")");
    } else {
      out.cause = "model-or-engine-build";
      out.cause_words = cat("the model or the engine build: the record's own reference (`", out.reference,
                            "`) does not reproduce it on this checkpoint either, and the record has no per-tensor digests ",
                            "to tell which", out.tested.weights_differ ? " (its weight sample differs: most likely the model)" : "");
    }
  } else {
    out.cause = "engine-build";
    out.cause_words = cat("the engine build: the record's own reference (`", out.reference, "`) reproduces the record on this ",
                          "checkpoint, the tested path (`", bad.str(), "`) does not");
  }

  // 4. The operation.
  if (out.cause == "model") {
    size_t best = trace_steps().size() + 1;
    for (const std::string& t : out.changed_tensors) {
      auto use = tensor_first_use(t, cfg);
      if (!use || use->layer != out.layer) continue;
      const size_t si = step_index(use->step);
      if (si < best) { best = si; out.op = use->step; out.op_tensor = t; }
    }
    if (out.op) out.op_how = "first-reader-of-changed-tensor";
  } else if (out.cause == "engine-build" && !*out.reference_breaks && subop && out.layer >= 0) {
    say(cat("per-operation analysis of layer ", out.layer));
    out.subop = subop_analysis(rec, model, bad, out.layer, factory, select_cases(rec, {out.case_id}).at(0));
    out.op = named_op(out.subop);
    if (out.op) out.op_how = "first-over-floor";
  }

  // 2. Confirmation by patching the layer's output.
  if (out.layer >= 0) {
    say(cat("patching the output of layer ", out.layer, " with the record's"));
    out.patch = patch_check(rec, model, tok, opt, bad, factory, out.case_id, out.layer,
                            out.mode == "decode" ? ForcedMode::decode : ForcedMode::prefill);
  }
  return out;
}

}  // namespace degen
