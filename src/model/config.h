// ModelConfig: the validated hyper-parameters of a Qwen3-Next / Qwen3.5 / Qwen3.6 language model,
// read from a Hugging Face config.json (../shared/spec/model.md §2). Four forms are accepted:
//   qwen3_next                      flat; tensors under "model."
//   qwen3_5, qwen3_5_moe            LM fields nested under "text_config"; tensors under "model.language_model."
//   qwen3_5_text, qwen3_5_moe_text  flat text-only form; tensors under "model."
// Unknown model types and invalid values are InputErrors naming the field, the expected and the found value.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace degen {

enum class Arch { qwen3_next, qwen3_5, qwen3_5_moe };
enum class LayerKind { linear, full };  // Gated DeltaNet ("linear_attention") or gated attention

const char* arch_name(Arch a);

// Bounds the config.json reader holds every model to (config.cpp check_sizes), public so that what
// is recorded about a model (a golden record's manifest) is held to the same: at most this many
// layers (the largest published LLMs have under 200), and a size that is a tensor dimension (token
// ids and the engine's head dimensions are 32-bit int).
constexpr int64_t kMaxModelLayers = 1024;
constexpr int64_t kMaxTensorDim = 2147483647;  // 2^31-1

struct ModelConfig {
  std::string model_type;     // as written in config.json
  Arch arch = Arch::qwen3_5;
  std::string tensor_prefix;  // "model." or "model.language_model."
  std::string origin;         // file the config came from, for messages

  int64_t vocab_size = 0;     // V: embedding / lm_head rows (padded vocabulary)
  int64_t hidden_size = 0;    // H
  int num_layers = 0;         // L, MTP layers excluded
  std::vector<LayerKind> layer_types;  // [L]

  // Full (gated) attention
  int n_q = 0;                // query heads
  int n_kv = 0;               // key/value heads
  int head_dim = 0;           // D (not hidden/heads)
  double partial_rotary_factor = 1.0;  // rho
  int rotary_dim = 0;         // R = floor(D * rho), even
  double rope_theta = 10000.0;

  double rms_norm_eps = 1e-6;  // every RMSNorm, gated norm and q/k norm included
  std::string hidden_act = "silu";  // MLP and GDN conv activation

  // Gated DeltaNet
  int conv_kernel = 4;        // K
  int n_k = 0;                // key heads (q and k)
  int n_v = 0;                // value heads
  int d_k = 0;                // key head dim
  int d_v = 0;                // value head dim

  // FFN
  int64_t intermediate_size = 0;  // I: dense MLP intermediate (0 if unused)
  int num_experts = 0;            // E (0: dense model)
  int experts_per_tok = 0;        // k_e
  int64_t moe_intermediate_size = 0;            // I_e
  int64_t shared_expert_intermediate_size = 0;  // I_s
  bool norm_topk_prob = true;     // renormalise top-k weights (always for qwen3_5_moe, spec §4.8)
  int decoder_sparse_step = 1;    // qwen3_next only
  std::vector<int> mlp_only_layers;  // qwen3_next only: dense-MLP layers

  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  std::optional<std::string> mamba_ssm_dtype;  // engines' default SSM state dtype (HF ignores it)
  int mtp_num_layers = 0;         // declared MTP layers (the weights decide what is present)
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // ---- derived ----
  int r() const { return n_v / n_k; }                    // value heads per key head
  int64_t d_key() const { return int64_t(n_k) * d_k; }   // n_k d_k
  int64_t d_val() const { return int64_t(n_v) * d_v; }   // n_v d_v
  int64_t d_conv() const { return 2 * d_key() + d_val(); }
  bool is_moe() const { return num_experts > 0; }
  bool is_moe_layer(int layer) const;                    // FFN of this layer is the MoE block
  int num_linear_layers() const;
  int num_full_layers() const;
  // "GGGA×16": G = Gated DeltaNet, A = attention; the shortest repeating unit and its count.
  std::string layer_map() const;
};

// Reads DIR/config.json. Throws InputError on a missing file, bad JSON or invalid values.
ModelConfig load_model_config(const std::filesystem::path& dir);
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& origin);

}  // namespace degen
