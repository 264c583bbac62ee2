// The weight table (STYLE.md principle 6): for each architecture, every tensor's name, allowed dtypes
// and shape as a function of the config, and whether it is required, optional or tied
// (../shared/spec/model.md §3.2). bind_weights() checks a checkpoint against it and reports every
// missing, unexpected and mismatched tensor in one InputError, then returns typed per-layer views.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"

namespace degen {

enum class Need { required, optional };

// One row of the table.
struct WeightSpec {
  std::string name;                 // full tensor name in the checkpoint
  std::vector<int64_t> shape;       // expected shape
  std::vector<DType> dtypes;        // allowed dtypes
  Need need = Need::required;
  std::string kind;                 // parameter-count category: embed, attn, gdn, mlp, moe, norm, lm_head, mtp
};

// Dense SwiGLU MLP: down(silu(gate x) * up x).
struct MlpWeights {
  const TensorView* gate = nullptr;  // [I, H]
  const TensorView* up = nullptr;    // [I, H]
  const TensorView* down = nullptr;  // [H, I]
};

struct AttnWeights {
  const TensorView* q_proj = nullptr;  // [2 n_q D, H], query and gate interleaved per head
  const TensorView* k_proj = nullptr;  // [n_kv D, H]
  const TensorView* v_proj = nullptr;  // [n_kv D, H]
  const TensorView* o_proj = nullptr;  // [H, n_q D]
  const TensorView* q_norm = nullptr;  // [D] zero-centred
  const TensorView* k_norm = nullptr;  // [D] zero-centred
};

struct GdnWeights {
  bool fused = false;                       // Qwen3-Next interleaved layout
  const TensorView* in_proj_qkvz = nullptr; // fused: [2 d_key + 2 d_val, H]
  const TensorView* in_proj_ba = nullptr;   // fused: [2 n_v, H]
  const TensorView* in_proj_qkv = nullptr;  // split: [d_conv, H]
  const TensorView* in_proj_z = nullptr;    // split: [d_val, H]
  const TensorView* in_proj_b = nullptr;    // split: [n_v, H]
  const TensorView* in_proj_a = nullptr;    // split: [n_v, H]
  const TensorView* conv1d = nullptr;       // [d_conv, 1, K]
  const TensorView* dt_bias = nullptr;      // [n_v]
  const TensorView* A_log = nullptr;        // [n_v] (bf16 or fp32)
  const TensorView* norm = nullptr;         // [d_v] plain weight (bf16 or fp32)
  const TensorView* out_proj = nullptr;     // [H, d_val]
};

struct MoeWeights {
  const TensorView* router = nullptr;       // [E, H]
  std::vector<MlpWeights> experts;          // [E]; for a fused checkpoint these are views into the fused tensors
  MlpWeights shared;                        // I_s; null when shared_expert_intermediate_size == 0
  const TensorView* shared_gate = nullptr;  // [1, H]
};

struct LayerWeights {
  LayerKind kind = LayerKind::linear;
  bool moe = false;
  const TensorView* input_norm = nullptr;  // [H] zero-centred
  const TensorView* post_norm = nullptr;   // [H] zero-centred
  AttnWeights attn;                        // kind == full
  GdnWeights gdn;                          // kind == linear
  MlpWeights mlp;                          // !moe
  MoeWeights moe_w;                        // moe
};

struct MtpWeights {
  const TensorView* fc = nullptr;                     // [H, 2H]
  const TensorView* pre_fc_norm_embedding = nullptr;  // [H]
  const TensorView* pre_fc_norm_hidden = nullptr;     // [H]
  const TensorView* norm = nullptr;                   // [H]
  LayerWeights layer;                                 // full attention + the model's FFN type
};

struct ModelWeights {
  const TensorView* embed = nullptr;       // [V, H]
  const TensorView* lm_head = nullptr;     // [V, H]; == embed when tied
  const TensorView* final_norm = nullptr;  // [H]
  std::vector<LayerWeights> layers;        // [L]
  std::vector<MtpWeights> mtp;             // empty when the checkpoint has no MTP weights
  bool experts_fused = false;              // main layers store experts.gate_up_proj / down_proj
  std::vector<std::unique_ptr<TensorView>> derived;  // owned views (fused-expert slices)
};

// How the checkpoint stores things that vary between checkpoints of the same architecture.
struct CheckpointLayout {
  bool experts_fused = false;  // experts.gate_up_proj [E, 2 I_e, H] + experts.down_proj [E, H, I_e]
  int mtp_layers = 0;          // MTP decoder layers present (0: no MTP weights)
};

// Detects the layout from the tensor names present.
CheckpointLayout detect_layout(const ModelConfig& cfg, const Checkpoint& ckpt);
// The full table for a config and layout.
std::vector<WeightSpec> weight_table(const ModelConfig& cfg, const CheckpointLayout& layout);
// Validates every tensor against the table and binds the views. Throws one InputError listing every
// missing, unexpected, wrong-shape and wrong-dtype tensor. Vision tensors (model.visual.*) are ignored.
ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt);
// The binding step alone, over views found by name (nullptr: absent -> InputError), unvalidated:
// for weights that live outside a checkpoint (bench --synthetic: views of device-generated tensors).
ModelWeights bind_weight_views(const ModelConfig& cfg, const CheckpointLayout& layout,
                               const std::function<const TensorView*(const std::string&)>& find);

// Qwen3-Next fused GDN layout -> split layout: for each row of the split [qkv | z] (length
// 2 d_key + 2 d_val) the row of in_proj_qkvz it comes from, and for each row of [b | a] (2 n_v)
// the row of in_proj_ba (spec §4.7.1).
std::vector<int64_t> gdn_qkvz_rows(const ModelConfig& cfg);
std::vector<int64_t> gdn_ba_rows(const ModelConfig& cfg);

// Non-finite weights (NaN or Inf): a checkpoint that holds them is broken, whatever engine runs it.
// Scans every tensor's values (the whole checkpoint, on every core; integer tensors cannot hold
// them); for each tensor with any, how many and the first (f8_e4m3: NaN only, it has no Inf).
struct NonFiniteTensor {
  const TensorView* tensor = nullptr;
  int64_t count = 0;          // non-finite elements
  int64_t first = -1;         // index of the first
  float first_value = 0;      // its value (nan, inf or -inf)
};
std::vector<NonFiniteTensor> find_nonfinite(const Checkpoint& ckpt);
// One line per tensor: "NAME [shape] dtype: N of M values non-finite, element I is nan (file F)".
std::string nonfinite_line(const NonFiniteTensor& nf);
// "<what>: tensor X has N non-finite values (...)" and one nonfinite_line per tensor; "" when none.
std::string nonfinite_message(const std::vector<NonFiniteTensor>& bad, size_t n_tensors, const std::string& what);
// InputError naming every tensor with NaN/Inf ("<what>: tensor X has N non-finite values ..."); returns
// the number of tensors scanned when all are finite.
size_t require_finite_weights(const Checkpoint& ckpt, const std::string& what);

// Parameter counts by kind for `inspect` (from the table and the checkpoint actually loaded).
struct ParamCount { std::string kind; int64_t count = 0; int64_t bytes = 0; };
std::vector<ParamCount> count_params(const ModelConfig& cfg, const Checkpoint& ckpt);

}  // namespace degen
