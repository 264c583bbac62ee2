// Fault catalogue data (see faults.h). The op each fault corrupts is implemented in the backends;
// this table is what users see (`degenbisect faults`) and what selftest iterates over.
#include "engine/faults.h"

#include <map>
#include <stdexcept>

#include "engine/run_config.h"
#include "util/error.h"

namespace degen {

const char* fault_site_name(FaultSite s) {
  switch (s) {
    case FaultSite::full_layer: return "full-attention layers";
    case FaultSite::linear_layer: return "GDN layers";
    case FaultSite::any_layer: return "every layer";
    case FaultSite::moe_layer: return "MoE layers";
    case FaultSite::model: return "model-level";
  }
  return "?";
}

namespace {

// When a fault cannot change a model (untestable there, not silently clean).
const char* inert_head_mod(const ModelConfig& c) { return c.n_v == c.n_k ? "n_v = n_k, so j mod n_k = j / r" : nullptr; }
const char* inert_qgate_split(const ModelConfig& c) { return c.n_q == 1 ? "one query head: both splits are the same" : nullptr; }
const char* inert_rope_all_dims(const ModelConfig& c) {  // (also rope-freq-head-dim's: R = head_dim)
  return c.rotary_dim == c.head_dim ? "RoPE already rotates every dim" : nullptr;
}
const char* inert_not_interleaved_ba(const ModelConfig& c) {
  return c.arch != Arch::qwen3_next ? "the checkpoint stores in_proj_b and in_proj_a apart (no interleaved in_proj_ba)"
                                    : nullptr;
}
const char* inert_moe_no_renorm(const ModelConfig& c) {
  return !c.norm_topk_prob ? "this model does not renormalise (norm_topk_prob false)" : nullptr;
}

}  // namespace

// The faults drawn from the public bug reports of ../shared/spec/real-bugs.md (issue 44; docs/faults.md),
// after the first nineteen in Fault order.
static void add_report_faults(std::vector<FaultInfo>& v) {
  const std::vector<FaultInfo> rows = {
      {Fault::norm_double_plus_one, "norm-double-plus-one", FaultSite::any_layer, "attn_norm",
       "zero-centred RMSNorm applied with weight (2 + w): the +1 shift added at conversion and again at run time",
       "ml-explore/mlx-lm PR #1623 (real-bugs.md row 27: layer and final norms shifted again, incoherent text; "
       "unscoped, the fault shifts the final norm too); variants: jundot/omlx #3750, InternLM/lmdeploy #4790",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::mtp_concat_order, "mtp-concat-order", FaultSite::model, "mtp_in",
       "MTP head: fc input concatenated as [hidden | embedding] instead of [embedding | hidden]",
       "ml-explore/mlx-lm PR #1469 (Qwen3.5 MTPHead concat [hidden, embedding]: drafts ~0 % agreement); issue 44's "
       "Rapid-MLX #3371 (real-bugs.md row 30) fixed the hidden's stage (post-norm), not the order",
       false, FaultApplied::engine_step, false, true, nullptr},
      {Fault::tp_ba_midpoint_split, "tp-ba-midpoint-split", FaultSite::linear_layer, "gdn_b",
       "tp > 1: Qwen3-Next's interleaved in_proj_ba (per key group [b | a]) split across ranks at its midpoint, as if "
       "it were [all b | all a]: ranks read other heads' b and a",
       "vllm-project/vllm PR #36242 (issue #35504; real-bugs.md row 25: Qwen3-Next wrong at TP > 1)",
       false, FaultApplied::op_flag, true, false, inert_not_interleaved_ba},
      {Fault::spec_stale_slot, "spec-stale-slot", FaultSite::linear_layer, "gdn_core",
       "speculative decoding: after m > 0 accepted drafts the next step reads the GDN state of verify position 0 "
       "(slot 0) instead of position m",
       "vllm-project/vllm #39273 (PRs #40738, #52942, #56531: S and the conv window read from slot 0; there only a step "
       "without drafts after accepted ones hits it; SGLang PR #26351 approximately; real-bugs.md rows 6-7)",
       false, FaultApplied::engine_step, false, true, nullptr, "mtp=2", "rollback"},
      {Fault::prefix_snapshot_drafts, "prefix-snapshot-drafts", FaultSite::linear_layer, "gdn_core",
       "prefix caching with MTP: the GDN state stored for a block crossed during a verify pass is the state after "
       "the whole pass, rejected drafts included, and later requests reuse it",
       "vllm-project/vllm #43559 (PRs #48375, #57128, #43650; real-bugs.md row 4: -20 % accuracy with MTP)",
       false, FaultApplied::engine_step, false, true, nullptr, "prefix_cache=on,mtp=2", "snapshot"},
      {Fault::pad_slot_alias, "pad-slot-alias", FaultSite::linear_layer, "gdn_core",
       "padded batch: a padding row's state slot aliases the first live sequence's, so the pad token's GDN update "
       "lands in that sequence's state",
       "NVIDIA/TensorRT-LLM PRs #13151, #9873; tokenspeed PR #700 (-1 pad index clamped to slot 0; real-bugs.md "
       "rows 10-11)",
       false, FaultApplied::engine_step, false, false, nullptr, "batch=4", "slot"},
      {Fault::pad_updates_state, "pad-updates-state", FaultSite::linear_layer, "gdn_core",
       "chunked prefill: the last chunk is padded to the chunk size and the pad tokens update the GDN state (conv "
       "window and S)",
       "huggingface/transformers #47086 (PR #47087: pads not masked from the conv and the GDN core on continued "
       "forwards), vllm-project/vllm PR #55178 (a prompt tail's placeholder pads persisted into conv and SSM state); "
       "real-bugs.md row 20's transformers #46190 / PR #46873 claims it but was closed unmerged",
       false, FaultApplied::engine_step, false, false, nullptr, "prefill_chunk=8", "chunk"},
      {Fault::chunk_state_twice, "chunk-state-twice", FaultSite::linear_layer, "gdn_core",
       "chunked prefill: a chunk that continues a sequence counts its initial GDN state twice",
       "vllm-project/vllm-ascend PR #11508 (real-bugs.md row 21; there the extra copy of s0 decays over the later "
       "context-parallel ranks' tokens only: this models the class, not the exact chaining)",
       false, FaultApplied::engine_step, false, false, nullptr, "prefill_chunk=8", "chunk"},
      {Fault::chunk_state_zero, "chunk-state-zero", FaultSite::linear_layer, "gdn_core",
       "chunked prefill: a chunk that continues a sequence starts its scan from a zero GDN state",
       "sparkinfer PR #1071 (real-bugs.md row 22: the prefill scan starts from zero when the sequence does not "
       "start at 0)",
       false, FaultApplied::engine_step, false, false, nullptr, "prefill_chunk=8", "chunk"},
  };
  v.insert(v.end(), rows.begin(), rows.end());
}

const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> c = {
      {Fault::rope_interleaved, "rope-interleaved", FaultSite::full_layer, "attn_q",
       "RoPE pairs dims (2i, 2i+1) (GPT-J) instead of rotate-half (i, i+R/2)",
       "spec model.md §4.5, §8 item 7: the NeoX pairing inside the first R dims is the right one",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::rope_all_dims, "rope-all-dims", FaultSite::full_layer, "attn_q",
       "RoPE rotates all head_dim dims instead of the first R = head_dim * partial_rotary_factor",
       "spec §8 item 7: HF v5's default-RoPE init falls back to partial_rotary_factor 1.0 when the key is missing",
       false, FaultApplied::op_flag, false, false, inert_rope_all_dims},
      {Fault::rope_freq_head_dim, "rope-freq-head-dim", FaultSite::full_layer, "attn_q",
       "RoPE rotates the first R dims, but with the frequencies of head_dim: 1/theta^(2i/head_dim), i < R/2, "
       "instead of 1/theta^(2i/R) (slower rotation: positions blur with context)",
       "pie #602 (real-bugs.md row 29: head_dim used for the frequencies of a partial rotary embedding; loops "
       "with context)",
       false, FaultApplied::op_flag, false, false, inert_rope_all_dims},
      {Fault::norm_no_plus_one, "norm-no-plus-one", FaultSite::any_layer, "attn_norm",
       "zero-centred RMSNorm applied with weight w instead of (1 + w)",
       "spec §8 item 5: mlx-lm's +1 shift when sanitising HF checkpoints (ml-explore/mlx-lm PR #990, #1456)",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::gdn_norm_plus_one, "gdn-norm-plus-one", FaultSite::linear_layer, "gdn_norm",
       "GDN gated norm applied with (1 + w) although its weight is plain",
       "spec §8 item 5 (the reverse convention mix-up; mlx-lm 'norm-double-shift bugfix')",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::qgate_split, "qgate-split", FaultSite::full_layer, "attn_q",
       "q_proj output split as all queries then all gates, instead of per head [q_h | g_h]",
       "spec §8 item 6: q_proj interleaves query and gate per head",
       false, FaultApplied::op_flag, false, false, inert_qgate_split},
      {Fault::gdn_read_before_decay, "gdn-read-before-decay", FaultSite::linear_layer, "gdn_core",
       "delta-rule error read from the state before it is decayed",
       "spec §8 item 4: cumulus blog 'Day-0 Support for the Qwen3.5 Family'",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::gdn_skip_l2norm, "gdn-skip-l2norm", FaultSite::linear_layer, "gdn_q",
       "q/k L2 normalisation skipped before the recurrence",
       "spec §4.7.3 (use_qk_l2norm_in_kernel=True in HF and FLA)",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::gdn_head_mod, "gdn-head-mod", FaultSite::linear_layer, "gdn_core",
       "value head j reads key head j mod n_k instead of floor(j / r)",
       "spec §8 item 6: with r = 3 (Qwen3.6-27B) a tiled mapping is silently wrong",
       false, FaultApplied::op_flag, false, false, inert_head_mod},
      {Fault::gdn_out_fp16, "gdn-out-fp16", FaultSite::linear_layer, "gdn_core",
       "GDN readout o = S^T q stored in fp16: overflows to inf, then NaN after the gated norm",
       "spec §8 item 2: vllm-project/vllm #54308 (fused_sigmoid_gating_delta_rule_update wrote o in fp16)",
       true, FaultApplied::op_flag, false, false, nullptr},
      {Fault::conv_window_stuck, "conv-window-stuck", FaultSite::linear_layer, "gdn_conv",
       "conv window not advanced in decode: every step convolves with the prefill's last rows",
       "spec §5.1-5.2 (decode window update); state-handling bugs of §8 items 9-10",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::alog_no_exp, "alog-no-exp", FaultSite::linear_layer, "gdn_g",
       "decay computed from A_log directly (g = -A_log * softplus(a + dt_bias)) instead of -exp(A_log)",
       "spec §8 item 3: A_log dtype/handling pitfalls (HF: 'without the .float() ... A might be -inf')",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::kv_off_by_one, "kv-off-by-one", FaultSite::full_layer, "attn_core",
       "KV cache row written one position off in decode (the new key lands at pos + 1)",
       "DESIGN.md §7: KV cache written one position off",
       false, FaultApplied::op_flag, false, false, nullptr},
      {Fault::moe_no_renorm, "moe-no-renorm", FaultSite::moe_layer, "moe_routed",
       "top-k routing weights not renormalised to sum 1 (norm_topk_prob ignored)",
       "spec §4.8: Qwen3.5-MoE always renormalises; Qwen3-Next iff norm_topk_prob",
       false, FaultApplied::op_flag, false, false, inert_moe_no_renorm},
      {Fault::mtp_prenorm_hidden, "mtp-prenorm-hidden", FaultSite::model, "mtp_in",
       "MTP head fed the pre-final-norm hidden state instead of the post-norm one",
       "spec §8 item 8: ggml-org/llama.cpp PR #24025, ModelTC/LightLLM PR #1402",
       false, FaultApplied::engine_step, false, true, nullptr},
      {Fault::mtp_no_rollback, "mtp-no-rollback", FaultSite::model, "gdn_core",
       "GDN state and conv window not rolled back after rejected MTP drafts",
       "spec §8 item 9, §5.4: vllm-project/tpu-inference PR #3057, ml-explore/mlx-lm PR #990",
       false, FaultApplied::engine_step, false, true, nullptr},
      {Fault::tp_skip_last_allreduce, "tp-skip-last-allreduce", FaultSite::model, "ffn_out",
       "tp > 1: the last decoder layer's MLP/MoE all-reduce is skipped (each rank keeps its partial sum)",
       "spec §8 item 13: sgl-project/sglang #19393 / PR #19411 (deferred all-reduce fusion with no next layer; "
       "garbled Qwen3.5-27B output at TP = 2)",
       false, FaultApplied::engine_step, true, false, nullptr},
      {Fault::tp_gdn_no_allreduce, "tp-gdn-no-allreduce", FaultSite::linear_layer, "mixer_out",
       "tp > 1: the GDN out_proj partial sums are not all-reduced (row-parallel out_proj with reduce_results off)",
       "sgl-project/sglang PR #14811 (Mamba/linear-attention out_proj built with reduce_results=False: garbage at TP > 1)",
       false, FaultApplied::op_flag, true, false, nullptr},
      {Fault::tp_moe_double_allreduce, "tp-moe-double-allreduce", FaultSite::moe_layer, "ffn_out",
       "tp > 1: the MoE block output is all-reduced twice, which multiplies it by tp",
       "sgl-project/sglang PR #20110 (Qwen3.5 MoE all-reduced by the block and again by the fused next-layer "
       "all-reduce: gibberish at TP 4/8)",
       false, FaultApplied::op_flag, true, false, nullptr},
  };
  static const std::vector<FaultInfo> all = [] {
    std::vector<FaultInfo> v = c;
    add_report_faults(v);
    return v;
  }();
  return all;
}

const FaultInfo& fault_info(Fault id) {
  const FaultInfo& f = fault_catalogue().at(static_cast<size_t>(id));
  if (f.id != id) throw std::logic_error("fault_catalogue: entries out of Fault order");
  return f;
}

const char* fault_name(Fault f) {
  return f < Fault::count ? fault_info(f).name : "?";
}

std::optional<Fault> fault_from_name(std::string_view name) {
  for (const FaultInfo& i : fault_catalogue())
    if (name == i.name) return i.id;
  return std::nullopt;
}

const FaultInfo* find_fault(const std::string& name) {
  for (const auto& f : fault_catalogue())
    if (name == f.name) return &f;
  return nullptr;
}

const std::vector<std::string>& known_fault_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& f : fault_catalogue()) n.push_back(f.name);
    return n;
  }();
  return names;
}

// Whether decoder layer l (or the MTP layer) can host a fault of this site.
bool fault_site_hosts(FaultSite site, const ModelConfig& cfg, int l, bool mtp) {
  if (!mtp && (l < 0 || l >= cfg.num_layers)) return false;
  const bool full = mtp || cfg.layer_types[static_cast<size_t>(l)] == LayerKind::full;
  switch (site) {
    case FaultSite::full_layer: return full;
    case FaultSite::linear_layer: return !full;
    case FaultSite::any_layer: return true;
    case FaultSite::moe_layer: return mtp ? cfg.is_moe() : cfg.is_moe_layer(l);
    case FaultSite::model: return false;
  }
  return false;
}

namespace {
// "layer 0 is a GDN (linear_attention) layer" / "layers 0, 1, 2 are dense-MLP layers"
std::string layers_are(const std::vector<int>& layers, const char* kind) {
  std::string list;
  for (int l : layers) list += (list.empty() ? "" : ", ") + std::to_string(l);
  return layers.size() == 1 ? cat("layer ", list, " is a ", kind, " layer") : cat("layers ", list, " are ", kind, " layers");
}
}  // namespace

const RunConfig& fault_needs(const FaultInfo& f) {
  // The catalogue's needs, each read once: a fixed table, its text kept for messages ("for example ...").
  static const std::map<std::string, RunConfig> needs = [] {
    std::map<std::string, RunConfig> m;
    for (const FaultInfo& g : fault_catalogue())
      if (g.needs) m.emplace(g.name, parse_run_config(g.needs));
    return m;
  }();
  static const RunConfig none;
  const auto it = needs.find(f.name);
  return it == needs.end() ? none : it->second;
}

std::string missing_needs(const FaultInfo& f, const RunConfig& rc) {
  if (!f.needs) return "";
  static const RunConfig none;
  const RunConfig& want = fault_needs(f);
  std::string missing;
  for (const Toggle& t : toggles()) {
    if (!t.fragment || t.fragment(want) == t.fragment(none)) continue;
    // A padded batch (batch=N) is the mechanism of a batch need: batch=all decodes every sequence in one
    // group with no padding rows, so a fault of the padding rows cannot act there.
    const bool unmet = want.batch == BatchMode::padded && std::string(t.key) == "batch" ? rc.batch != BatchMode::padded
                                                                                     : t.fragment(rc) == t.fragment(none);
    if (unmet) missing += cat(missing.empty() ? "" : ", ", t.key, want.batch == BatchMode::padded && std::string(t.key) == "batch" ? "=N" : "");
  }
  return missing;
}

void check_faults(const RunConfig& rc, const ModelConfig& cfg) {
  for (const FaultSpec& fs : rc.faults) {
    const FaultInfo* info = find_fault(fs.name);
    if (!info) input_error("unknown fault '", fs.name, "' (see `degenbisect faults`)");
    const std::string label = fs.name + fs.scope.str();
    if (const std::string m = missing_needs(*info, rc); !m.empty())
      throw UntestableError(cat("fault ", label, " lives in the ", info->mechanism ? info->mechanism : "serving",
                                " mechanism, which is off here: it needs ", m, " (for example ", info->needs, ")"));
    if (info->site == FaultSite::model) {
      if (!fs.scope.all) input_error("fault ", label, ": a model-level fault takes no layer scope");
      if (info->needs_tp && rc.tp <= 1)
        throw UntestableError(cat("fault ", label, ": needs tp > 1 (it skips the last tensor-parallel all-reduce)"));
      continue;  // mtp-no-rollback, mtp-prenorm-hidden: engine/spec_decode; tp-skip-last-allreduce: Engine::layer
    }
    const std::vector<int> layers = fs.scope.layers(cfg.num_layers, &cfg);
    bool hosted = false;
    for (int l : layers) hosted = hosted || fault_site_hosts(info->site, cfg, l, false);
    if (!hosted) {
      const char* kind = info->site == FaultSite::full_layer     ? "GDN (linear_attention)"
                         : info->site == FaultSite::linear_layer ? "full-attention"
                                                                 : "dense-MLP";
      if (layers.empty()) input_error("fault ", label, ": the scope selects no layer of this model");
      input_error("fault ", label, ": ", layers_are(layers, kind), "; ", fs.name, " acts on ",
                  fault_site_name(info->site), " only");
    }
    // Faults that cannot change anything on this model: untestable here, not silently clean.
    if (info->needs_tp && rc.tp <= 1)
      throw UntestableError(cat("fault ", label, ": needs tp > 1 (it is a fault of the tensor-parallel all-reduce)"));
    if (const char* why = info->inert_on ? info->inert_on(cfg) : nullptr)
      throw UntestableError(cat("fault ", label, " changes nothing on ", cfg.origin, ": ", why));
  }
}

}  // namespace degen
