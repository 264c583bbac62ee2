// Model loading and fingerprint.
#include "model/model.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"
#include "util/file_io.h"

namespace degen {

std::string model_fingerprint(const ModelConfig& cfg, const Checkpoint& ckpt) {
  Sha256 h;
  std::filesystem::path cfg_path = ckpt.dir() / "config.json";
  nlohmann::json j = parse_json(read_file(cfg_path, kMaxInputFileBytes), cfg_path.string(), false);
  h.update("degenbisect-model-fingerprint-v1\n");
  h.update(j.is_discarded() ? cfg.model_type : j.dump());
  h.update("\n");
  for (const TensorView* t : ckpt.tensors())
    h.update(cat(t->name, " ", dtype_name(t->dtype), " ", shape_str(t->shape), " ", t->offset, " ", t->nbytes, "\n"));
  return h.hex();
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    input_error(dir.string(), ": not a folder (expected a Hugging Face model folder with config.json and *.safetensors)");
  auto m = std::make_unique<Model>();
  m->dir = dir;
  m->config = load_model_config(dir);
  m->checkpoint = Checkpoint::open(dir);
  m->weights = bind_weights(m->config, *m->checkpoint);
  m->fingerprint = model_fingerprint(m->config, *m->checkpoint);
  return m;
}

}  // namespace degen

namespace degen {

MemoryEstimate estimate_memory(const ModelConfig& c, int64_t weight_bytes, int mtp_layers) {
  MemoryEstimate m;
  m.weight_bytes = weight_bytes;
  m.kv_bytes_per_token = int64_t(c.num_full_layers()) * 2 * c.n_kv * c.head_dim * 2;
  m.mtp_kv_bytes_per_token = int64_t(mtp_layers) * 2 * c.n_kv * c.head_dim * 2;
  m.ssm_state_bytes_per_seq = int64_t(c.num_linear_layers()) * c.n_v * c.d_k * c.d_v * 4;
  m.conv_bytes_per_seq = int64_t(c.num_linear_layers()) * c.d_conv() * (c.conv_kernel - 1) * 2;
  return m;
}

}  // namespace degen
