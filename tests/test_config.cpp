// ModelConfig parsing and the weight table, on the published configs (tests/fixtures/configs).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "model/config.h"
#include "util/file_io.h"
#include "model/weights.h"
#include "util/error.h"

using namespace degen;
using nlohmann::json;

namespace {
json fixture(const std::string& name) {
  return json::parse(read_file(test::fixtures_dir() / "configs" / name));
}
int64_t table_params(const ModelConfig& c, int mtp_layers, bool fused = false) {
  CheckpointLayout lay;
  lay.mtp_layers = mtp_layers;
  lay.experts_fused = fused;
  int64_t n = 0;
  for (const auto& s : weight_table(c, lay)) {
    if (s.need == Need::optional) continue;
    int64_t k = 1;
    for (int64_t d : s.shape) k *= d;
    n += k;
  }
  return n;
}
// The error message thrown by parse_model_config for a modified config.
std::string parse_error(const json& j) {
  try {
    parse_model_config(j, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config: Qwen3-Next-80B-A3B-Instruct") {
  ModelConfig c = parse_model_config(fixture("qwen3next-80b-a3b-instruct.json"), "80b");
  CHECK(c.arch == Arch::qwen3_next);
  CHECK(c.tensor_prefix == "model.");
  CHECK(c.num_layers == 48);
  CHECK(c.layer_map() == "GGGA\u00d712");  // layer_types derived from full_attention_interval
  CHECK(c.layer_types[3] == LayerKind::full);
  CHECK(c.layer_types[4] == LayerKind::linear);
  CHECK(c.num_full_layers() == 12);
  CHECK(c.rotary_dim == 64);
  CHECK(c.rope_theta == 1e7);
  CHECK(c.r() == 2);
  CHECK(c.d_conv() == 8192);
  CHECK(c.num_experts == 512);
  CHECK(c.experts_per_tok == 10);
  CHECK(c.norm_topk_prob);
  for (int i = 0; i < c.num_layers; ++i) CHECK(c.is_moe_layer(i));
  CHECK_FALSE(c.mamba_ssm_dtype.has_value());
  // Published total (spec §3.1): 81,324,862,720 parameters including the one MTP layer.
  CHECK(table_params(c, 1) == 81324862720LL);
}

TEST_CASE("config: Qwen3.6-27B (nested text_config)") {
  ModelConfig c = parse_model_config(fixture("qwen36-27b.json"), "27b");
  CHECK(c.arch == Arch::qwen3_5);
  CHECK(c.tensor_prefix == "model.language_model.");
  CHECK(c.num_layers == 64);
  CHECK(c.layer_map() == "GGGA\u00d716");
  CHECK(c.n_q == 24);
  CHECK(c.n_kv == 4);
  CHECK(c.r() == 3);
  CHECK(c.d_conv() == 10240);
  CHECK(c.d_val() == 6144);
  CHECK(c.rotary_dim == 64);
  CHECK(c.intermediate_size == 17408);
  CHECK_FALSE(c.is_moe());
  CHECK(c.mamba_ssm_dtype == std::optional<std::string>("float32"));
  CHECK(c.mtp_num_layers == 1);
  REQUIRE(c.eos_token_ids.size() == 1);
  CHECK(c.eos_token_ids[0] == 248044);
  // Spec §3.1: 27,781,427,952 parameters with vision and MTP; the text part must be below that and
  // the MTP layer adds exactly fc + 3 norms + one attention layer + one dense MLP.
  int64_t text = table_params(c, 0), with_mtp = table_params(c, 1);
  CHECK(text < 27781427952LL);
  CHECK(with_mtp - text == 5120LL * 10240 + 3 * 5120 + (12288LL + 1024 + 1024) * 5120 + 5120LL * 6144 + 2 * 256 +
                               2 * 5120 + 3 * 17408LL * 5120);
}

TEST_CASE("config: Qwen3.5-35B-A3B (nested, MoE, always renormalised)") {
  json j = fixture("qwen35-35b-a3b.json");
  ModelConfig c = parse_model_config(j, "35b");
  CHECK(c.arch == Arch::qwen3_5_moe);
  CHECK(c.layer_map() == "GGGA\u00d710");
  CHECK(c.num_experts == 256);
  CHECK(c.experts_per_tok == 8);
  CHECK(c.norm_topk_prob);
  for (int i = 0; i < c.num_layers; ++i) CHECK(c.is_moe_layer(i));
  CHECK_FALSE(c.bos_token_id.has_value());
  // HF ignores norm_topk_prob for qwen3_5_moe: even an explicit false renormalises.
  j["text_config"]["norm_topk_prob"] = false;
  CHECK(parse_model_config(j, "35b").norm_topk_prob);
}

TEST_CASE("config: flat text-only forms and derived layer types") {
  json j = fixture("qwen36-27b.json")["text_config"];
  j["model_type"] = "qwen3_5_text";
  ModelConfig c = parse_model_config(j, "text");
  CHECK(c.arch == Arch::qwen3_5);
  CHECK(c.tensor_prefix == "model.");
  j.erase("layer_types");
  j["full_attention_interval"] = 2;
  c = parse_model_config(j, "text");
  CHECK(c.layer_map() == "GA\u00d732");
  json m = fixture("qwen35-35b-a3b.json")["text_config"];
  m["model_type"] = "qwen3_5_moe_text";
  CHECK(parse_model_config(m, "moe-text").arch == Arch::qwen3_5_moe);
}

TEST_CASE("config: partial_rotary_factor resolution follows HF v5") {
  json j = fixture("qwen36-27b.json");
  j["text_config"]["rope_parameters"].erase("partial_rotary_factor");
  CHECK(parse_model_config(j, "x").rotary_dim == 64);  // class default 0.25
  j["text_config"]["partial_rotary_factor"] = 0.5;
  CHECK(parse_model_config(j, "x").rotary_dim == 128);  // top-level value moves into rope_parameters
  j["text_config"]["rope_parameters"]["partial_rotary_factor"] = 1.0;
  CHECK(parse_model_config(j, "x").rotary_dim == 256);  // rope_parameters wins
}

TEST_CASE("config: invalid values name the field, the expected and the found value") {
  json next = fixture("qwen3next-80b-a3b-instruct.json");
  json j = next;
  j["model_type"] = "llama";
  CHECK(parse_error(j).find("unsupported model_type 'llama'") != std::string::npos);
  j = next;
  j["linear_num_value_heads"] = 33;
  std::string e = parse_error(j);
  CHECK(e.find("linear_num_value_heads") != std::string::npos);
  CHECK(e.find("multiple of linear_num_key_heads = 16") != std::string::npos);
  CHECK(e.find("33") != std::string::npos);
  j = next;
  j["num_key_value_heads"] = 3;
  CHECK(parse_error(j).find("divisor of num_attention_heads") != std::string::npos);
  j = next;
  j["hidden_act"] = "gelu";
  CHECK(parse_error(j).find("hidden_act") != std::string::npos);
  j = next;
  j["hidden_size"] = "2048";
  CHECK(parse_error(j).find("expected an integer, found \"2048\"") != std::string::npos);
  j = next;
  j["partial_rotary_factor"] = 0.001;
  CHECK(parse_error(j).find("rotary dimension") != std::string::npos);
  j = next;
  j["layer_types"] = json::array({"linear_attention"});
  CHECK(parse_error(j).find("layer_types") != std::string::npos);
  j = next;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK(parse_error(j).find("not supported") != std::string::npos);
  j = next;
  j["num_experts_per_tok"] = 600;
  CHECK(parse_error(j).find("num_experts_per_tok") != std::string::npos);
  json q = fixture("qwen36-27b.json");
  q.erase("text_config");
  CHECK(parse_error(q).find("text_config") != std::string::npos);
  q = fixture("qwen36-27b.json");
  q["text_config"]["layer_types"][5] = "sliding_attention";
  CHECK(parse_error(q).find("layer_types[5]") != std::string::npos);
}

TEST_CASE("config: Qwen3-Next mlp_only_layers and decoder_sparse_step") {
  json j = fixture("qwen3next-80b-a3b-instruct.json");
  j["mlp_only_layers"] = {0, 5};
  j["decoder_sparse_step"] = 2;
  ModelConfig c = parse_model_config(j, "x");
  CHECK_FALSE(c.is_moe_layer(0));
  CHECK(c.is_moe_layer(1));
  CHECK_FALSE(c.is_moe_layer(2));   // (2+1) % 2 != 0
  CHECK_FALSE(c.is_moe_layer(5));   // listed
  CHECK(c.is_moe_layer(7));
}

TEST_CASE("config: Qwen3-Next GDN row permutation covers every fused row once") {
  ModelConfig c = parse_model_config(fixture("qwen3next-80b-a3b-instruct.json"), "x");
  auto rows = gdn_qkvz_rows(c);
  CHECK(rows.size() == size_t(2 * c.d_key() + 2 * c.d_val()));
  std::vector<int> seen(rows.size(), 0);
  for (int64_t r : rows) seen.at(size_t(r))++;
  CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  // spec §4.7.1: value head j = g r + i starts at g P + 2 d_k + i d_v, P = 2 d_k + 2 r d_v = 768
  CHECK(rows[size_t(2 * c.d_key() + 3 * c.d_v)] == 1 * 768 + 256 + 1 * 128);  // v of head 3 (g=1, i=1)
  auto ba = gdn_ba_rows(c);
  CHECK(ba.size() == size_t(2 * c.n_v));
  CHECK(ba[3] == 1 * 4 + 1);               // b of head 3
  CHECK(ba[size_t(c.n_v) + 3] == 1 * 4 + 2 + 1);  // a of head 3
}
