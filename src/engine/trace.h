// Trace: every intermediate of the forward pass is offered to one optional observer under the
// name "<step>-<layer>" (e.g. attn_norm-3, gdn_conv-3, gdn_core-3, l_out-3) or "<step>" for
// whole-model steps (embed, final_norm, logits). The observer may read the tensor and may REPLACE
// it (assign another tensor of the same shape and dtype): that is how golden inputs are injected.
// Off (no observer) costs one branch per step: no name is built, nothing is copied.
// Tensor parallelism (tp > 1, engine.h): the observer runs on rank 0's thread and sees full tensors
// (per-head steps gathered over the ranks). A replacement of a replicated step (assign another
// tensor) reaches every rank; an in-place change of its elements reaches rank 0 only, so replace.
//
// ALL step names live in DEGEN_TRACE_STEPS below, in forward order; nowhere else.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace degen {

// X(name, per_layer, meaning). Row layout of every traced tensor: the batch rows (see TraceEvent).
#define DEGEN_TRACE_STEPS(X)                                                                    \
  X(embed, false, "token embeddings = the input of layer 0 [N, H]")                             \
  X(l_in, true, "layer input (residual stream) [N, H]; replace it to inject a golden input")   \
  X(attn_norm, true, "input_layernorm output [N, H]")                                           \
  X(attn_q, true, "query after QK-norm and RoPE [N, n_q, D]")                                   \
  X(attn_gate, true, "output-gate logits [N, n_q*D]")                                           \
  X(attn_k, true, "key after QK-norm and RoPE [N, n_kv, D]")                                    \
  X(attn_v, true, "value [N, n_kv, D]")                                                         \
  X(attn_core, true, "softmax(qk)v before the gate [N, n_q*D]")                                 \
  X(attn_gated, true, "attention output after the sigmoid gate [N, n_q*D]")                     \
  X(gdn_qkv, true, "pre-conv q|k|v in split layout [N, d_conv]")                                \
  X(gdn_z, true, "gate z [N, n_v*d_v]")                                                         \
  X(gdn_b, true, "beta logits [N, n_v]")                                                        \
  X(gdn_a, true, "decay logits [N, n_v]")                                                       \
  X(gdn_conv, true, "causal conv + SiLU output [N, d_conv]")                                    \
  X(gdn_q, true, "L2-normalised, scaled query [N, n_k, d_k]")                                   \
  X(gdn_k, true, "L2-normalised key [N, n_k, d_k]")                                             \
  X(gdn_g, true, "log decay g <= 0 [N, n_v]")                                                   \
  X(gdn_beta, true, "beta = sigmoid(b) [N, n_v]")                                               \
  X(gdn_core, true, "recurrence output o [N, n_v, d_v]")                                        \
  X(gdn_norm, true, "gated RMSNorm output [N, n_v*d_v]")                                        \
  X(mixer_out, true, "attention o_proj / GDN out_proj output [N, H]")                           \
  X(h_mid, true, "residual after the mixer [N, H]")                                             \
  X(ffn_norm, true, "post_attention_layernorm output [N, H]")                                   \
  X(moe_router, true, "router logits [N, E]")                                                   \
  X(moe_routed, true, "weighted sum of the routed experts [N, H]")                              \
  X(moe_shared, true, "gated shared expert [N, H]")                                             \
  X(ffn_out, true, "MLP / MoE output [N, H]")                                                   \
  X(l_out, true, "layer output (residual stream) [N, H]")                                       \
  X(final_norm, false, "model.norm output [N, H]")                                              \
  X(logits, false, "logits (padding ids masked) [rows, V]")                                     \
  X(mtp_in, false, "MTP fc output [N, H]")                                                      \
  X(mtp_out, false, "MTP decoder layer output [N, H]")                                          \
  X(mtp_norm, false, "mtp.norm output [N, H]")                                                  \
  X(mtp_logits, false, "MTP draft logits [N, V]")

enum class Step : uint8_t {
#define DEGEN_STEP_ENUM(name, per_layer, what) name,
  DEGEN_TRACE_STEPS(DEGEN_STEP_ENUM)
#undef DEGEN_STEP_ENUM
};

struct StepInfo {
  Step step;
  const char* name;
  bool per_layer;
  const char* what;
};
const std::vector<StepInfo>& trace_steps();  // every step, in forward order
const char* step_name(Step s);
std::string trace_name(Step s, int layer);   // "attn_norm-3", or "logits" when layer < 0

// One sequence's rows inside a batch tensor.
struct TraceSeq {
  int seq = 0;       // index of the sequence in the forward() call
  int64_t row0 = 0;  // first row of this sequence in the traced tensor
  int64_t rows = 0;
  int64_t pos0 = 0;  // absolute position of that first row
};

struct TraceEvent {
  Step step;
  int layer;                         // -1 for whole-model steps
  const std::string& name;           // trace_name(step, layer)
  const std::vector<TraceSeq>& seqs; // row layout of the tensor (outermost dimension = rows)
  bool mtp = false;                  // inside the MTP head (layer = MTP layer index)
};

class Backend;

// The observer may replace `t`; it must keep shape and dtype (checked by the engine).
using TraceObserver = std::function<void(const TraceEvent& ev, Tensor& t, Backend& backend)>;

struct Trace {
  TraceObserver observer;
  // The observer wants the logits only (Step::logits and mtp_logits; compare's generation watch):
  // the other steps are not offered, and a decode step may run as a CUDA graph (graphs=on), whose
  // logits are offered after the graph ran.
  bool logits_only = false;
  bool on() const { return static_cast<bool>(observer); }
};

}  // namespace degen
