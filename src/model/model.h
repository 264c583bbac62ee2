// A loaded model: validated config, memory-mapped checkpoint, bound weight table, fingerprint.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace degen {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
  ModelWeights weights;
  std::string fingerprint;  // model_fingerprint(): config.json + every tensor header
  // Every tensor's digest over all its bytes (diag/golden.h tensor_digests), filled on first use by
  // compare: a sweep or a bisect compares the same loaded model once per cell or evaluation, and
  // the digests read the whole checkpoint.
  mutable std::optional<std::map<std::string, std::string>> tensor_digests;
  // The tensors holding NaN or Inf (find_nonfinite), filled on first use by compare: scanned once per
  // loaded model, like the digests.
  mutable std::optional<std::vector<NonFiniteTensor>> nonfinite;
};

// Opens DIR: config.json, safetensors (headers only), weight-table validation. InputError on any problem.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir);

// SHA-256 over the canonical config JSON (keys sorted, no whitespace) and, for every tensor sorted by
// name, "name dtype shape offset nbytes". Independent of file timestamps, paths, JSON formatting
// and shard file names; changes with any config value or tensor layout.
std::string model_fingerprint(const ModelConfig& cfg, const Checkpoint& ckpt);

}  // namespace degen

namespace degen {

// Memory needed to serve the model (bf16 weights as stored, bf16 KV cache, fp32 recurrent state, bf16 conv window).
struct MemoryEstimate {
  int64_t weight_bytes = 0;            // as stored in the checkpoint (or bf16 for a config-only folder)
  int64_t kv_bytes_per_token = 0;      // full-attention layers, K and V, bf16
  int64_t mtp_kv_bytes_per_token = 0;  // the MTP layers' own K and V, bf16
  int64_t ssm_state_bytes_per_seq = 0; // GDN recurrent state S, [n_v, d_k, d_v] per layer, fp32
  int64_t conv_bytes_per_seq = 0;      // GDN conv window, [d_conv, K-1] per layer, bf16
};
MemoryEstimate estimate_memory(const ModelConfig& cfg, int64_t weight_bytes, int mtp_layers);

}  // namespace degen
