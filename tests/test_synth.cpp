// Synthetic checkpoints: every preset round-trips through the loader, bytes are identical for a seed,
// weights are scaled like trained ones, and the fingerprints recorded in models/fingerprints.json
// (the shipped models) reproduce on this machine.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "model/synth.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace degen;
using nlohmann::json;

namespace {
struct Stats { double mean = 0, std = 0, min = 1e30, max = -1e30; };
Stats stats(const TensorView& t) {
  Stats s;
  double sum = 0, sq = 0;
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = t.at(size_t(i));
    sum += v; sq += v * v;
    s.min = std::min(s.min, v); s.max = std::max(s.max, v);
  }
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sq / n - s.mean * s.mean));
  return s;
}
bool is_tiny(const SynthPreset& p) { return p.name.rfind("tiny-", 0) == 0; }
}  // namespace

TEST_CASE("synth: every tiny preset loads and validates") {
  for (const auto& p : synth_presets()) {
    if (!is_tiny(p)) continue;
    CAPTURE(p.name);
    test::TempDir dir("synth");
    int64_t params = synth_checkpoint(p.config, p.options, dir.path());
    CHECK(params > 100000);
    auto m = load_model(dir.path());
    const nlohmann::json& text = p.config.contains("text_config") ? p.config["text_config"] : p.config;
    const int layers = text["num_hidden_layers"].get<int>();  // 8, and 4 in tiny-realvocab
    CHECK(m->config.num_layers == layers);
    CHECK(m->weights.layers.size() == static_cast<size_t>(layers));
    CHECK(m->weights.mtp.size() == 1);
    CHECK(m->checkpoint->total_bytes() > 0);
    CHECK(std::filesystem::exists(dir / "tokenizer.json"));
    CHECK(std::filesystem::exists(dir / "generation_config.json"));
    if (p.name == "tiny-qwen3next") {
      CHECK(m->weights.layers[0].gdn.fused);
      CHECK_FALSE(m->weights.layers[1].moe);  // mlp_only_layers [1]
      CHECK(m->weights.layers[2].moe);
    }
    if (p.name == "tiny-qwen35-moe") {
      CHECK(m->weights.experts_fused);
      CHECK(m->weights.layers[0].moe_w.experts.size() == 8);
      CHECK(m->weights.layers[0].gdn.A_log->dtype == DType::f32);
    }
    if (p.name == "tiny-qwen35-r3") CHECK(m->config.r() == 3);
  }
}

TEST_CASE("synth: same seed gives the same bytes, another seed other values") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir a("synth-a"), b("synth-b"), c("synth-c");
  synth_checkpoint(p.config, p.options, a.path());
  synth_checkpoint(p.config, p.options, b.path());
  SynthOptions o = p.options;
  o.seed = 7;
  synth_checkpoint(p.config, o, c.path());
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json", "generation_config.json"}) {
    CAPTURE(f);
    CHECK(read_file(a / f) == read_file(b / f));
  }
  CHECK(read_file(a / "model.safetensors") != read_file(c / "model.safetensors"));
  auto ma = load_model(a.path()), mc = load_model(c.path());
  CHECK(ma->fingerprint == load_model(b.path())->fingerprint);
  // The fingerprint covers config and tensor headers (DESIGN.md §6), not the values: same shapes, same print.
  CHECK(ma->fingerprint == mc->fingerprint);
}

TEST_CASE("synth: the shipped models reproduce their recorded fingerprints and content hashes") {
  json rec = json::parse(read_file(test::source_dir() / "models" / "fingerprints.json"));
  for (const auto& p : synth_presets()) {
    if (!is_tiny(p)) continue;
    CAPTURE(p.name);
    REQUIRE(rec.contains(p.name));
    test::TempDir dir("synth-fp");
    synth_checkpoint(p.config, p.options, dir.path());
    CHECK(load_model(dir.path())->fingerprint == rec[p.name]["fingerprint"].get<std::string>());
    CHECK(sha256_hex(read_file(dir / "model.safetensors")) == rec[p.name]["model.safetensors"].get<std::string>());
  }
}

TEST_CASE("synth: weights are scaled like trained weights") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35-r3");
  test::TempDir dir("synth-scale");
  synth_checkpoint(p.config, p.options, dir.path());
  auto m = load_model(dir.path());
  const auto& L0 = m->weights.layers[0];
  Stats zn = stats(*L0.input_norm);  // zero-centred: near 0
  CHECK(std::fabs(zn.mean) < 0.02);
  CHECK(zn.std > 0.02);
  CHECK(zn.std < 0.1);
  Stats gn = stats(*L0.gdn.norm);  // plain gated-norm weight: near 1
  CHECK(std::fabs(gn.mean - 1.0) < 0.05);
  Stats qkv = stats(*L0.gdn.in_proj_qkv);  // 1/sqrt(fan_in)
  double expect = 1.0 / std::sqrt(double(m->config.hidden_size));
  CHECK(qkv.std == doctest::Approx(expect).epsilon(0.1));
  CHECK(std::fabs(qkv.mean) < 0.1 * expect);
  Stats al = stats(*L0.gdn.A_log);  // A = exp(A_log) in [1, 16]
  CHECK(al.min >= 0.0);
  CHECK(al.max <= 2.7726);
  Stats dt = stats(*L0.gdn.dt_bias);
  CHECK(dt.min >= -4.5);
  CHECK(dt.max <= -0.5);
  CHECK(L0.gdn.A_log->dtype == DType::f32);  // this preset stores A_log as F32 (as Qwen3.5-35B-A3B does)
  CHECK(L0.gdn.in_proj_qkv->dtype == DType::bf16);
}

TEST_CASE("synth: generator is a fixed function of (seed, key, index)") {
  // Irwin-Hall normal from 4 uniforms: bounded by 2 sqrt(3) and unit variance.
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = synth_normal(1, 2, uint64_t(i));
    CHECK_LE(std::fabs(v), 3.4641017);
    sum += v; sq += v * v;
  }
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(sq / n == doctest::Approx(1.0).epsilon(0.01));
  CHECK(synth_uniform(1, 2, 3) == synth_uniform(1, 2, 3));
  CHECK(synth_uniform(1, 2, 3) != synth_uniform(2, 2, 3));
}

TEST_CASE("synth: sharded output loads through the index, and config-only presets write no weights") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35-moe");
  test::TempDir dir("synth-shard");
  SynthOptions o = p.options;
  o.shard_bytes = 1 << 20;
  synth_checkpoint(p.config, o, dir.path());
  CHECK(std::filesystem::exists(dir / "model.safetensors.index.json"));
  auto m = load_model(dir.path());
  CHECK(m->checkpoint->files().size() > 1);
  const SynthPreset& big = find_synth_preset("qwen36-27b");
  CHECK(big.config_only);
  test::TempDir cfg_only("synth-cfg");
  SynthOptions bo = big.options;
  bo.weights = false;
  synth_checkpoint(big.config, bo, cfg_only.path());
  CHECK(std::filesystem::exists(cfg_only / "config.json"));
  CHECK_FALSE(std::filesystem::exists(cfg_only / "model.safetensors"));
  CHECK(load_model_config(cfg_only.path()).r() == 3);
  CHECK_THROWS_AS(find_synth_preset("tiny-llama"), InputError);
}

TEST_CASE("synth: the published layout: exactly N shards of about equal size, the same tensors as one file") {
  const SynthPreset& p = find_synth_preset("tiny-qwen35");
  test::TempDir one("synth-one"), many("synth-many");
  synth_checkpoint(p.config, p.options, one.path());
  SynthOptions o = p.options;
  o.shards = 3;
  synth_checkpoint(p.config, o, many.path());
  CHECK(std::filesystem::exists(many / "model-00003-of-00003.safetensors"));
  CHECK_FALSE(std::filesystem::exists(many / "model.safetensors"));
  const json index = json::parse(read_file(many / "model.safetensors.index.json"));
  auto a = load_model(one.path()), b = load_model(many.path());
  REQUIRE(b->checkpoint->files().size() == 3);
  // every shard holds a third of the bytes, give or take the largest tensor
  size_t largest = 0;
  for (const TensorView* t : a->checkpoint->tensors()) largest = std::max(largest, t->nbytes);
  const double third = double(a->checkpoint->total_bytes()) / 3;
  for (const auto& f : b->checkpoint->files()) {
    size_t bytes = 0;
    for (const TensorView* t : b->checkpoint->tensors())
      if (index["weight_map"][t->name] == f->path().filename().string()) bytes += t->nbytes;
    CHECK(std::abs(double(bytes) - third) <= double(largest));
  }
  CHECK(index["metadata"]["total_size"].get<size_t>() == a->checkpoint->total_bytes());
  // the same tensors with the same bytes
  REQUIRE(a->checkpoint->tensors().size() == b->checkpoint->tensors().size());
  for (const TensorView* t : a->checkpoint->tensors()) {
    const TensorView& u = b->checkpoint->get(t->name);
    REQUIRE(u.nbytes == t->nbytes);
    CHECK(std::memcmp(u.data, t->data, t->nbytes) == 0);
  }
  // a streamed write that fails part-way leaves no file behind
  test::TempDir bad("synth-bad");
  CHECK_THROWS(write_safetensors_streamed(bad / "x.safetensors", {}, {{"t", DType::f32, {4}}},
                                          [](size_t, uint64_t, uint8_t*, size_t) { throw InputError("stop"); }));
  CHECK(std::filesystem::is_empty(bad.path()));
}
