// Bisection logic with stand-in evaluators whose ground truth is known: the harmful toggle among
// several, a single culprit layer in log2(L) evaluations, a two-layer interaction, replay.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "diag/bisect.h"
#include "diag/localise.h"
#include "engine/trace.h"
#include "model/weights.h"
#include "util/error.h"
#include "helpers.h"
#include "util/file_io.h"

using namespace degen;

namespace {
ModelConfig model_27b() {  // 64 layers, GGGA x16
  return parse_model_config(nlohmann::json::parse(read_file(test::fixtures_dir() / "configs" / "qwen36-27b.json")), "27b");
}
CellSummary verdict(bool bad) {
  CellSummary s;
  s.verdict = bad ? "bad" : "good";
  return s;
}
}  // namespace

TEST_CASE("bisect: ddmin finds a 1-minimal failing subset") {
  int calls = 0;
  std::function<bool(const std::vector<int>&)> f = [&](const std::vector<int>& s) {
    ++calls;
    bool has3 = std::find(s.begin(), s.end(), 3) != s.end(), has7 = std::find(s.begin(), s.end(), 7) != s.end();
    return has3 && has7;
  };
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(ddmin<int>(all, f) == std::vector<int>{3, 7});
  CHECK(bisect_layers(all, f) == std::vector<int>{3, 7});
}

TEST_CASE("bisect: of three differing toggles, the one harmful toggle is found") {
  ModelConfig cfg = model_27b();
  RunConfig good = parse_run_config("precision=bf16");
  RunConfig bad = parse_run_config("precision=bf16,attn=flash,ssm_dtype=fp16,kv_dtype=fp8");
  // Ground truth: an fp16 state at layer 17 breaks the run; nothing else matters.
  BisectOracle oracle([&](const RunConfig& rc) { return verdict(rc.ssm_dtype_at(17, cfg) == DType::f16); }, std::nullopt);
  BisectOutcome o = bisect(good, true, bad, cfg, oracle);
  CHECK(o.status == "found");
  CHECK(o.differing == std::vector<std::string>{"attn", "ssm_dtype", "kv_dtype"});
  CHECK(o.culprit_toggles == std::vector<std::string>{"ssm_dtype"});
  CHECK(o.layer_specific);
  CHECK(o.culprit_layers == std::vector<int>{17});
  CHECK(o.minimal_bad.str() == "precision=bf16,ssm_dtype=fp16@17");
  REQUIRE(o.patch_fixes.has_value());
  CHECK(*o.patch_fixes);
  CHECK(o.patched.str().find("@17") == std::string::npos);
}

TEST_CASE("bisect: evaluations grow with log2(layers) for a single culprit") {
  ModelConfig cfg = model_27b();
  for (int culprit : {0, 5, 17, 30, 62}) {
    CAPTURE(culprit);
    RunConfig bad = parse_run_config("fault=gdn-head-mod");
    BisectOracle oracle([&](const RunConfig& rc) { return verdict(rc.has_fault("gdn-head-mod", culprit, &cfg)); },
                        std::nullopt);
    BisectOutcome o = bisect(implicit_good(bad), false, bad, cfg, oracle);
    CHECK(o.culprit_layers == std::vector<int>{culprit});
    // 48 GDN candidates: bad, good, the full set, <= 2 per halving (ceil(log2 48) = 6), minimal, patch.
    int bound = 3 + 2 * int(std::ceil(std::log2(48.0))) + 2;
    CHECK(o.evaluations <= bound);
    MESSAGE("culprit " << culprit << ": " << o.evaluations << " evaluations (bound " << bound << ")");
  }
}

TEST_CASE("bisect: a culprit that needs two layers is found by delta debugging") {
  ModelConfig cfg = model_27b();
  RunConfig bad = parse_run_config("precision=bf16,ssm_dtype=bf16");
  auto both = [&](const RunConfig& rc) {
    return verdict(rc.ssm_dtype_at(4, cfg) == DType::bf16 && rc.ssm_dtype_at(50, cfg) == DType::bf16);
  };
  BisectOracle oracle(both, std::nullopt);
  BisectOutcome o = bisect(parse_run_config("precision=bf16,ssm_dtype=fp32"), true, bad, cfg, oracle);
  CHECK(o.culprit_layers == std::vector<int>{4, 50});
  CHECK(o.patch_fixes == std::optional<bool>(true));
}

TEST_CASE("bisect: the replay file resumes without repeating evaluations") {
  ModelConfig cfg = model_27b();
  test::TempDir dir("bisect-replay");
  RunConfig bad = parse_run_config("fault=rope-interleaved");
  int calls = 0;
  auto ev = [&](const RunConfig& rc) { ++calls; return verdict(rc.has_fault("rope-interleaved", 23, &cfg)); };
  BisectOutcome first;
  {
    BisectOracle oracle(ev, dir / "replay.jsonl");
    first = bisect(implicit_good(bad), false, bad, cfg, oracle);
  }
  int first_calls = calls;
  CHECK(first.culprit_layers == std::vector<int>{23});
  // Interrupted: keep only the first half of the log plus a partial line.
  std::string text = read_file(dir / "replay.jsonl");
  size_t lines = size_t(std::count(text.begin(), text.end(), '\n'));
  size_t cut = 0;
  for (size_t i = 0; i < lines / 2; ++i) cut = text.find('\n', cut) + 1;
  std::ofstream(dir / "replay.jsonl", std::ios::trunc) << text.substr(0, cut) << "{\"config\": \"fau";
  calls = 0;
  {
    BisectOracle again(ev, dir / "replay.jsonl");  // scoped: an oracle holds the replay file's lock while it lives
    BisectOutcome second = bisect(implicit_good(bad), false, bad, cfg, again);
    CHECK(second.culprit_layers == first.culprit_layers);
  }
  CHECK(calls == first_calls - int(lines / 2));  // only the evaluations that were lost
  calls = 0;
  BisectOracle third(ev, dir / "replay.jsonl");
  bisect(implicit_good(bad), false, bad, cfg, third);
  CHECK(calls == 0);
}

TEST_CASE("bisect: non-layer toggles and inconsistent inputs") {
  ModelConfig cfg = model_27b();
  BisectOracle mtp_oracle([](const RunConfig& rc) { return verdict(rc.mtp == 2); }, std::nullopt);
  BisectOutcome o = bisect(parse_run_config("precision=bf16"), true, parse_run_config("precision=bf16,mtp=2,attn=flash"), cfg,
                           mtp_oracle);
  CHECK(o.culprit_toggles == std::vector<std::string>{"mtp"});
  CHECK_FALSE(o.layer_specific);
  BisectOracle never([](const RunConfig&) { return verdict(false); }, std::nullopt);
  CHECK(bisect(parse_run_config(""), true, parse_run_config("attn=flash"), cfg, never).status == "bad-is-good");
  BisectOracle always([](const RunConfig&) { return verdict(true); }, std::nullopt);
  CHECK(bisect(parse_run_config(""), true, parse_run_config("attn=flash"), cfg, always).status == "good-is-bad");
}

TEST_CASE("localise: every tensor of the weight table maps to the step that first reads it") {
  // Each config family's full table (fused and per-expert MoE layouts, MTP): every tensor has a step,
  // that step exists, is per-layer exactly when the tensor is in a decoder layer, and the layer is right.
  for (const char* name : {"qwen36-27b.json", "qwen35-35b-a3b.json", "qwen3next-80b-a3b-instruct.json"}) {
    ModelConfig cfg = parse_model_config(nlohmann::json::parse(read_file(test::fixtures_dir() / "configs" / name)), name);
    for (bool fused : {false, true}) {
      CheckpointLayout layout;
      layout.experts_fused = fused;
      layout.mtp_layers = 1;
      for (const WeightSpec& w : weight_table(cfg, layout)) {
        CAPTURE(w.name);
        auto use = tensor_first_use(w.name, cfg);
        REQUIRE(use.has_value());
        const StepInfo* info = nullptr;
        for (const auto& s : trace_steps())
          if (use->step == s.name) info = &s;
        REQUIRE(info != nullptr);
        const std::string layer_tag = cat(cfg.tensor_prefix, "layers.", use->layer, ".");
        if (use->layer >= 0) CHECK(w.name.rfind(layer_tag, 0) == 0);
        CHECK(info->per_layer == (use->layer >= 0));
      }
    }
  }
  ModelConfig cfg = model_27b();
  const std::string p = cfg.tensor_prefix;
  CHECK(tensor_first_use(p + "layers.4.linear_attn.out_proj.weight", cfg)->step == "mixer_out");
  CHECK(tensor_first_use(p + "layers.4.linear_attn.A_log", cfg)->step == "gdn_g");
  CHECK(tensor_first_use(p + "layers.3.self_attn.q_proj.weight", cfg)->step == "attn_q");
  CHECK(tensor_first_use(p + "layers.3.input_layernorm.weight", cfg)->layer == 3);
  CHECK(tensor_first_use(p + "layers.3.mlp.gate_proj.weight", cfg)->step == "ffn_out");
  CHECK(tensor_first_use("lm_head.weight", cfg)->step == "logits");
  CHECK(tensor_first_use("mtp.layers.0.mlp.up_proj.weight", cfg)->step == "mtp_out");
  CHECK_FALSE(tensor_first_use(p + "layers.64.input_layernorm.weight", cfg).has_value());  // 64 layers: 0..63
  CHECK_FALSE(tensor_first_use(p + "layers.x.input_layernorm.weight", cfg).has_value());
  CHECK_FALSE(tensor_first_use("model.visual.blocks.0.attn.qkv.weight", cfg).has_value());
}

TEST_CASE("bisect: a replay file made for another model, record or case set is refused, never replayed") {
  ModelConfig cfg = model_27b();
  test::TempDir dir("bisect-identity");
  RunConfig bad = parse_run_config("fault=rope-interleaved");
  int calls = 0;
  auto ev = [&](const RunConfig& rc) { ++calls; return verdict(rc.has_fault("rope-interleaved", 23, &cfg)); };
  const nlohmann::json id = {{"model", "m1"}, {"golden", "sha256:g1"}, {"cases", {"two-plus-two"}}, {"decode", true}};
  {
    BisectOracle oracle(ev, dir / "replay.jsonl", id);
    bisect(implicit_good(bad), false, bad, cfg, oracle);
  }
  nlohmann::json other = id;
  other["cases"] = {"repeated-pattern"};
  CHECK_THROWS_WITH_AS(BisectOracle(ev, dir / "replay.jsonl", other),
                       doctest::Contains("cases (--case/--cases): expected [\"repeated-pattern\"] (this run), found "
                                         "[\"two-plus-two\"]"),
                       InputError);
  other = id;
  other["golden"] = "sha256:g2";
  CHECK_THROWS_WITH_AS(BisectOracle(ev, dir / "replay.jsonl", other), doctest::Contains("golden record (--golden)"),
                       InputError);
  calls = 0;
  {
    BisectOracle same(ev, dir / "replay.jsonl", id);
    bisect(implicit_good(bad), false, bad, cfg, same);
  }
  CHECK(calls == 0);
  // A replay file from before identities: refused with what to do.
  std::ofstream(dir / "old.jsonl") << "{\"config\": \"default\", \"summary\": {\"verdict\": \"good\"}}\n";
  CHECK_THROWS_WITH_AS(BisectOracle(ev, dir / "old.jsonl", id), doctest::Contains("give a new --replay file"), InputError);
}

TEST_CASE("bisect: a replay file in use by another bisect is refused, naming its PID") {
  test::TempDir dir("bisect-lock");
  auto ev = [](const RunConfig&) { return verdict(false); };
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    BisectOracle oracle(ev, dir / "replay.jsonl");
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  CHECK_THROWS_WITH_AS(BisectOracle(ev, dir / "replay.jsonl"),
                       doctest::Contains(("locked by process " + std::to_string(holder)).c_str()), InputError);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  CHECK_NOTHROW(BisectOracle(ev, dir / "replay.jsonl"));  // released with its holder
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("bisect: the implicit good keeps the engine and sampling toggles, resets the layers' and the faults") {
  const RunConfig bad = parse_run_config(
      "backend=cuda,precision=ref,attn=flash,gdn=recurrent@linear,ssm_dtype=bf16,conv_dtype=bf16,kv_dtype=fp8@full,mtp=2,"
      "graphs=on,gemm=cublas,tp=2,batch=4,prefill_chunk=16,prefix_cache=on,temp=0.5,seed=7,fault=rope-interleaved@3");
  CHECK(implicit_good(bad).str() == "backend=cuda,mtp=2,graphs=on,gemm=cublas,tp=2,batch=4,prefill_chunk=16,prefix_cache=on,"
                                    "temp=0.5,seed=7");
  CHECK(implicit_good(parse_run_config("precision=bf16,attn=flash,fault=kv-off-by-one")).str() == "precision=bf16");
}
