// The fused ops of the engine's path, for localisation (see fused_ops.h). Each row mirrors a call in
// engine.cpp; tests/test_engine_invariants.cpp checks that every step a row names is offered to an
// observer of a CPU run.
#include "engine/fused_ops.h"

#include "util/error.h"

namespace degen {

namespace {

const FusedOp kInputNormGdn{"norm_matmul_many", {Step::attn_norm, Step::gdn_qkv, Step::gdn_z, Step::gdn_b, Step::gdn_a},
                            "input RMSNorm inside the in_proj products"};
const FusedOp kInputNormAttn{"norm_matmul_many", {Step::attn_norm, Step::attn_v},
                             "input RMSNorm inside the q/k/v products"};
const FusedOp kAttn{"attn_inputs_attention", {Step::attn_q, Step::attn_gate, Step::attn_k, Step::attn_core},
                    "split query|gate, QK-norm, partial RoPE, KV append, causal attention"};
const FusedOp kAttnOut{"sigmoid_gate_matmul", {Step::attn_gated, Step::mixer_out, Step::h_mid},
                       "sigmoid output gate, o_proj, + residual"};
const FusedOp kGdnIn{"gdn_inputs", {Step::gdn_conv, Step::gdn_q, Step::gdn_k, Step::gdn_g, Step::gdn_beta},
                     "causal conv + SiLU, split, L2 norm, decay and beta gates"};
const FusedOp kGdnOut{"gated_norm_matmul", {Step::gdn_norm, Step::mixer_out, Step::h_mid},
                      "gated RMSNorm, out_proj, + residual"};
const FusedOp kPostNorm{"norm_matmul_swiglu", {Step::ffn_norm}, "post-attention RMSNorm inside the gate/up products"};
const FusedOp kDown{"matmul_add", {Step::ffn_out, Step::l_out}, "down projection, + residual"};
const FusedOp kShared{"matmul_gate_add", {Step::moe_shared, Step::ffn_out}, "shared expert's down projection, "
                                                                             "its sigmoid gate, + routed experts"};

}  // namespace

const FusedOp* fused_op_of(Step s, LayerKind kind, bool moe) {
  const bool gdn = kind == LayerKind::linear;
  switch (s) {
    case Step::attn_norm: return gdn ? &kInputNormGdn : &kInputNormAttn;
    case Step::attn_q: case Step::attn_gate: case Step::attn_k: case Step::attn_core: return gdn ? nullptr : &kAttn;
    case Step::attn_v: return gdn ? nullptr : &kInputNormAttn;
    case Step::attn_gated: return gdn ? nullptr : &kAttnOut;
    case Step::gdn_qkv: case Step::gdn_z: case Step::gdn_b: case Step::gdn_a: return gdn ? &kInputNormGdn : nullptr;
    case Step::gdn_conv: case Step::gdn_q: case Step::gdn_k: case Step::gdn_g: case Step::gdn_beta:
      return gdn ? &kGdnIn : nullptr;
    case Step::gdn_norm: return gdn ? &kGdnOut : nullptr;
    case Step::mixer_out: case Step::h_mid: return gdn ? &kGdnOut : &kAttnOut;
    case Step::ffn_norm: return moe ? nullptr : &kPostNorm;
    case Step::moe_shared: return moe ? &kShared : nullptr;
    case Step::ffn_out: return moe ? &kShared : &kDown;
    case Step::l_out: return moe ? nullptr : &kDown;
    default: return nullptr;
  }
}

std::string fused_op_words(const FusedOp& f) {
  std::string steps;
  for (Step s : f.steps) steps += cat(steps.empty() ? "" : " -> ", step_name(s));
  return cat(f.op, " (", steps, ": ", f.what, ")");
}

}  // namespace degen
