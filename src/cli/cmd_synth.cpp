// `degenbisect synth`: write a synthetic Hugging Face style checkpoint (model/synth.h).
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "util/file_io.h"
#include "model/config.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/output_file.h"
#include "util/json_input.h"

namespace degen::cli {
namespace {

struct SynthArgs {
  std::string preset;
  std::string config_file;
  std::string out;
  uint64_t seed = 0;
  bool list = false;
  std::string weights;      // --weights [LAYOUT]: "" (the preset's layout), sharded or single
  bool weights_given = false;
  bool no_weights = false;
  bool no_mtp = false;
  bool fused_experts = false;
  bool gdn_f32 = false;
  double shard_mb = 0;
  std::string tokenizer;  // --tokenizer FILE
};

int run_synth(const SynthArgs& a) {
  if (a.list) {
    for (const auto& p : synth_presets()) std::printf("%-18s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  if (a.preset.empty() == a.config_file.empty())
    input_error("synth: give exactly one of --preset NAME or --config FILE (see --list for the presets)");
  if (a.out.empty()) input_error("synth: --out DIR is required");
  check_output_folder(a.out, "synth --out");
  nlohmann::json config;
  SynthOptions opt;
  bool config_only = false;
  if (!a.preset.empty()) {
    const SynthPreset& p = find_synth_preset(a.preset);
    config = p.config;
    opt = p.options;
    config_only = p.config_only;
  } else {
    config = parse_json(read_file(a.config_file, kMaxInputFileBytes), a.config_file, false);
    if (config.is_discarded()) input_error(a.config_file, ": not valid JSON");
    opt.experts_fused = a.fused_experts;
    opt.gdn_params_f32 = a.gdn_f32;
  }
  opt.seed = a.seed;
  if (a.no_mtp) opt.mtp = false;
  if (!a.tokenizer.empty()) {
    // Loaded once here so that a file the tool cannot read is refused before any weight is written.
    opt.tokenizer_json = read_file(a.tokenizer, kMaxInputFileBytes);
    const std::unique_ptr<Tokenizer> tok = Tokenizer::from_json_text(opt.tokenizer_json, a.tokenizer);
    const int64_t V = parse_model_config(config, "synth").vocab_size;
    if (tok->vocab_end() > V)
      input_error("synth --tokenizer ", a.tokenizer, ": the tokenizer defines ids up to ", tok->vocab_end() - 1, ", beyond the model's ",
                  V, " logit rows (vocab_size)");
  }
  if (a.weights_given && a.no_weights) input_error("synth: --weights and --no-weights contradict each other");
  opt.weights = a.no_weights ? false : (a.weights_given || !config_only);
  if (a.weights_given && !a.weights.empty() && a.weights != "sharded" && a.weights != "single")
    input_error("synth: --weights ", a.weights, ": expected sharded (the published shard layout) or single (one file)");
  if (a.weights == "sharded") {
    if (a.shard_mb > 0) input_error("synth: --weights sharded sets the shard layout; leave out --shard-mb");
    const size_t published = a.preset.empty() ? 0 : find_synth_preset(a.preset).published_shards;
    if (published > 0) opt.shards = published;
    else opt.shard_bytes = kDefaultShardBytes;
  }
  if (a.shard_mb < 0) input_error("synth: --shard-mb must be >= 0, found ", a.shard_mb);
  opt.shard_bytes = static_cast<int64_t>(a.shard_mb * 1024 * 1024);
  auto t0 = std::chrono::steady_clock::now();
  int64_t params = synth_checkpoint(config, opt, a.out, global_options().quiet ? nullptr : stderr);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt.weights)
    std::fprintf(stderr, "synth: wrote %s (%.2fM parameters, seed %llu) in %.1f s\n", a.out.c_str(), params / 1e6,
                 static_cast<unsigned long long>(opt.seed), s);
  else
    std::fprintf(stderr, "synth: wrote %s (config, tokenizer and generation config only; add --weights for tensors)\n",
                 a.out.c_str());
  return 0;
}

CommandRegistrar reg("synth", "Write a synthetic checkpoint (HF layout) from a preset or a config.json", 90,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<SynthArgs>();
  sub->add_option("--preset", a->preset, "Preset name (see --list)");
  sub->add_option("--config", a->config_file, "A config.json of any shape to synthesize weights for");
  sub->add_option("--out", a->out, "Output folder");
  sub->add_option("--seed", a->seed, "Seed of the weight generator (same seed, same bytes on every machine)");
  sub->add_flag("--list", a->list, "List the presets and exit");
  sub->add_option("--weights", a->weights,
                  "Also write weights for config-only (real-size) presets; LAYOUT: sharded (the published shard\n"
                  "count where known, qwen36-27b: 11 shards and model.safetensors.index.json; else shards of at\n"
                  "most 5 GB, transformers' default) or single (one model.safetensors)")
      ->expected(0, 1)
      ->type_name("[LAYOUT]");
  sub->add_flag("--no-weights", a->no_weights, "Write config.json, tokenizer.json and generation_config.json only");
  sub->add_flag("--no-mtp", a->no_mtp, "Leave out the MTP layer");
  sub->add_flag("--fused-experts", a->fused_experts, "With --config: store MoE experts fused (experts.gate_up_proj)");
  sub->add_flag("--gdn-f32", a->gdn_f32, "With --config: store A_log and the GDN norm weight as F32");
  sub->add_option("--shard-mb", a->shard_mb, "Split the weights into shards of about this many MiB (with an index)");
  sub->add_option("--tokenizer", a->tokenizer,
                  "Ship this tokenizer.json instead of the synthetic one (its <|endoftext|> and <|im_end|> become the\n"
                  "stop ids), e.g. the real Qwen3.5 vocabulary for --preset tiny-realvocab");
  sub->footer("Examples:\n  degenbisect synth --preset tiny-qwen35 --out models/tiny-qwen35\n"
              "  degenbisect synth --preset qwen36-27b --out /tmp/q27   # config only\n"
              "  degenbisect synth --preset qwen36-27b --weights sharded --out /data/q27   # 54 GB in 11 shards, ~5 min\n"
              "  degenbisect synth --list");
  return [a, sub] {
    a->weights_given = sub->count("--weights") > 0;
    return run_synth(*a);
  };
});

}  // namespace
}  // namespace degen::cli
