// bind_weight_views: the weight table of a config bound to views that live outside any checkpoint
// (what `bench --backend cuda --synthetic` does with device-generated weights): every table entry is
// bound, the per-layer structure follows the config, and a missing view is an InputError naming it.
#include <doctest/doctest.h>

#include <map>

#include "model/config.h"
#include "model/synth.h"
#include "model/weights.h"
#include "util/error.h"

using namespace degen;

namespace {
std::map<std::string, TensorView> views_of(const ModelConfig& cfg, const CheckpointLayout& lay) {
  std::map<std::string, TensorView> v;
  for (const WeightSpec& w : weight_table(cfg, lay)) {
    TensorView t;
    t.name = w.name;
    t.shape = w.shape;
    t.dtype = DType::bf16;
    v[w.name] = t;
  }
  return v;
}
}  // namespace

TEST_CASE("bind_weight_views binds a 27B-shaped config cut to 8 layers, and names a missing view") {
  nlohmann::json j = find_synth_preset("qwen36-27b").config;
  j["text_config"]["num_hidden_layers"] = 8;
  const ModelConfig cfg = parse_model_config(j, "qwen36-27b");
  REQUIRE(cfg.num_layers == 8);
  CHECK(cfg.layer_map() == "GGGA×2");
  CheckpointLayout lay;  // no MTP layer, per-expert tensors
  std::map<std::string, TensorView> v = views_of(cfg, lay);
  auto find = [&](const std::string& n) -> const TensorView* {
    auto it = v.find(n);
    return it == v.end() ? nullptr : &it->second;
  };
  const ModelWeights w = bind_weight_views(cfg, lay, find);
  REQUIRE(w.layers.size() == 8);
  CHECK(w.embed->shape == std::vector<int64_t>{cfg.vocab_size, cfg.hidden_size});
  CHECK(w.lm_head != w.embed);
  CHECK(w.mtp.empty());
  for (int l = 0; l < 8; ++l) {
    const LayerWeights& lw = w.layers[l];
    CHECK(lw.input_norm);
    CHECK(lw.mlp.down);
    if (lw.kind == LayerKind::full) CHECK(lw.attn.q_proj->shape[0] == 2 * cfg.n_q * cfg.head_dim);
    else CHECK(lw.gdn.A_log);
  }
  v.erase(v.find(cfg.tensor_prefix + "layers.3.self_attn.o_proj.weight"));
  CHECK_THROWS_WITH_AS(bind_weight_views(cfg, lay, find), doctest::Contains("layers.3.self_attn.o_proj.weight"), InputError);
}
