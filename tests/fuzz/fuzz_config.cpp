// config.json as load_model_config reads it, then what `inspect` derives from a config alone: the
// layer map and every weight's shape and element count for both checkpoint layouts (the sums
// overflowed on absurd sizes: issue 21 item 4; UBSan reports any signed overflow).
#include "fuzz_common.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/json_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_view(data, size));
  fuzz::expect_clean("config", [&] {
    nlohmann::json j;
    try {
      j = degen::parse_json(text, "config.json");
    } catch (const nlohmann::json::parse_error&) {
      return;  // load_model_config turns this into an InputError; nothing more to exercise
    }
    const degen::ModelConfig cfg = degen::parse_model_config(j, "config.json");
    (void)cfg.layer_map();
    (void)cfg.num_linear_layers();
    for (bool fused : {false, true}) {
      degen::CheckpointLayout lay;
      lay.experts_fused = fused && cfg.is_moe();
      lay.mtp_layers = cfg.mtp_num_layers;
      int64_t total = 0;
      for (const auto& spec : degen::weight_table(cfg, lay)) {
        int64_t n = 1;
        for (int64_t d : spec.shape) {
          if (d < 0) fuzz::finding("config", "negative dimension in " + spec.name);
          n *= d;  // UBSan: a config whose sizes overflow must have been refused by parse_model_config
        }
        total += n;
      }
      if (total < 0) fuzz::finding("config", "negative parameter count");
    }
  });
  return 0;
}
