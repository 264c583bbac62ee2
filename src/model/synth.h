// Synthetic checkpoints: complete Hugging Face style model folders (config.json, safetensors,
// tokenizer.json, generation_config.json) with random weights that are identical on every machine
// for a given seed and scaled like trained weights (../shared/spec/model.md §4).
// note: values are made from an integer counter hash with +, *, / and sqrt only (all correctly
// rounded in IEEE arithmetic), never std distributions or libm transcendentals, so the bytes, and
// hence the model fingerprint, do not depend on the C++ library or the machine.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen {

// transformers' save_pretrained default max_shard_size ("5GB"): the shard size of `synth --weights
// sharded` for a preset whose published shard count we do not state.
constexpr int64_t kDefaultShardBytes = 5'000'000'000;

struct SynthOptions {
  uint64_t seed = 0;
  bool mtp = true;             // write one MTP layer
  bool experts_fused = false;  // MoE experts as experts.gate_up_proj / experts.down_proj (Qwen3.5-MoE checkpoints)
  bool gdn_params_f32 = false; // A_log and linear_attn.norm.weight stored F32 (as in Qwen3.5-35B-A3B)
  bool weights = true;         // false: config, tokenizer and generation config only
  int64_t shard_bytes = 0;     // > 0: split into shards of about this size with model.safetensors.index.json
  size_t shards = 0;           // > 1: exactly this many shards of about equal size (the published layout), with the index
  // The embedding's scale (its values ~ N(0, embed_scale^2)). With tied embeddings it is the LM head
  // too, and sets how peaked the output distribution is: logits ~ N(0, hidden_size x embed_scale^2).
  double embed_scale = 1.0;
  // A tokenizer.json to ship instead of the synthetic one (synth --tokenizer): its text, and the stop
  // ids of config.json and generation_config.json are its <|endoftext|> and <|im_end|>.
  std::string tokenizer_json;
};

struct SynthPreset {
  std::string name;
  std::string description;
  nlohmann::json config;  // config.json
  SynthOptions options;
  bool config_only;       // real-size presets: weights are not written unless asked for
  size_t published_shards = 0;  // the shard count of the published checkpoint (synth --weights sharded)
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset& find_synth_preset(const std::string& name);  // InputError listing the names

// Writes a checkpoint folder for `config` (an HF config.json object). Returns the parameter count written.
// Existing files in `out` with the same names are replaced atomically. The weights are made while
// they are written (a chunk of at most 64 MiB at a time), so memory stays bounded whatever the size;
// with `progress`, a line per shard written.
int64_t synth_checkpoint(const nlohmann::json& config, const SynthOptions& options, const std::filesystem::path& out,
                         std::FILE* progress = nullptr);

// The counter-based generator (exposed for tests): uniform in [0, 1) and approximately standard
// normal (Irwin-Hall sum of 4 uniforms, rescaled to unit variance) for stream `key`, element `i`.
double synth_uniform(uint64_t seed, uint64_t key, uint64_t i);
double synth_normal(uint64_t seed, uint64_t key, uint64_t i);

}  // namespace degen
