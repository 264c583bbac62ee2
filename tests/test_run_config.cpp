// RunConfig: parsing, canonical printing, layer scopes, validation errors (DESIGN.md §5).
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/faults.h"
#include "engine/run_config.h"
#include "helpers.h"
#include "util/file_io.h"
#include "util/error.h"

using namespace degen;

namespace {
std::string err(const std::string& text) {
  try {
    parse_run_config(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
ModelConfig model_27b() {
  return parse_model_config(nlohmann::json::parse(read_file(test::fixtures_dir() / "configs" / "qwen36-27b.json")), "27b");
}
}  // namespace

TEST_CASE("run_config: canonical printing round-trips and orders keys") {
  CHECK(parse_run_config("").str() == "default");
  CHECK(parse_run_config("backend=cpu,precision=ref").str() == "default");  // defaults are omitted
  RunConfig rc = parse_run_config("seed=3,attn=flash, precision=bf16 ,ssm_dtype=bf16@17,mtp=2");
  CHECK(rc.str() == "precision=bf16,attn=flash,ssm_dtype=bf16@17,mtp=2,seed=3");
  CHECK(parse_run_config(rc.str()) == rc);
  RunConfig s = parse_run_config("temp=0.6,top_p=0.95,top_k=20,min_p=0,rep_pen=1.05,presence_pen=1.5");
  CHECK(s.sampling.temperature == 0.6);
  CHECK(s.sampling.top_k == 20);
  CHECK(s.str() == "temp=0.6,top_p=0.95,top_k=20,rep_pen=1.05,presence_pen=1.5");
  CHECK(parse_run_config(s.str()) == s);
  CHECK(parse_run_config("ssm_dtype=fp32").str() == "ssm_dtype=fp32");  // explicit: overrides the checkpoint
}

TEST_CASE("run_config: layer scopes") {
  ModelConfig c = model_27b();
  RunConfig rc = parse_run_config("ssm_dtype=bf16@12-19+3,attn=flash@full,gdn=recurrent@linear");
  CHECK(rc.ssm_dtype_at(12, c) == DType::bf16);
  CHECK(rc.ssm_dtype_at(19, c) == DType::bf16);
  CHECK(rc.ssm_dtype_at(3, c) == DType::bf16);
  CHECK(rc.ssm_dtype_at(20, c) == DType::f32);  // from the checkpoint's mamba_ssm_dtype float32
  CHECK(rc.attn.at(3, &c) == AttnAlgo::flash);
  CHECK(rc.attn.at(4, &c) == AttnAlgo::naive);
  CHECK(rc.gdn.at(4, &c) == GdnAlgo::recurrent);
  CHECK(rc.gdn.at(3, &c) == GdnAlgo::chunked);
  CHECK(rc.str() == "attn=flash@full,gdn=recurrent@linear,ssm_dtype=bf16@3+12-19");
  const RunConfig fla = parse_run_config("gdn=fla@0-7");
  CHECK(fla.gdn.at(5, &c) == GdnAlgo::fla);
  CHECK(fla.gdn.at(8, &c) == GdnAlgo::chunked);
  CHECK(fla.str() == "gdn=fla@0-7");
  // A later entry wins on the layers it covers; an unscoped one replaces everything before it.
  RunConfig o = parse_run_config("ssm_dtype=bf16@10-20,ssm_dtype=fp16@15");
  CHECK(o.ssm_dtype_at(14, c) == DType::bf16);
  CHECK(o.ssm_dtype_at(15, c) == DType::f16);
  CHECK(parse_run_config("ssm_dtype=bf16@3,ssm_dtype=fp16").ssm_dtype_at(3, c) == DType::f16);
  CHECK(LayerScope::of_layers({5, 6, 7, 9}).str() == "@5-7+9");
  CHECK(LayerScope::parse("linear", "x").layers(8, &c) == std::vector<int>{0, 1, 2, 4, 5, 6});
  RunConfig f = parse_run_config("fault=rope-interleaved@7");
  CHECK(f.has_fault("rope-interleaved", 7, &c));
  CHECK_FALSE(f.has_fault("rope-interleaved", 3, &c));
  CHECK(parse_run_config("fault=moe-no-renorm").has_fault("moe-no-renorm", 0, &c));
}

TEST_CASE("run_config: errors name the key, the value and what is allowed") {
  CHECK(err("atn=flash").find("unknown key 'atn'") != std::string::npos);
  CHECK(err("atn=flash").find("attn") != std::string::npos);
  CHECK(err("attn=fast").find("expected one of naive, flash, splitkv") != std::string::npos);
  CHECK(err("mtp=5").find("[0, 4]") != std::string::npos);
  CHECK(err("temp=-1").find("temp=-1") != std::string::npos);
  CHECK(err("top_p=0").find("(0, 1]") != std::string::npos);
  CHECK(err("backend").find("expected key=value") != std::string::npos);
  CHECK(err("mtp=1@3").find("cannot be scoped") != std::string::npos);
  CHECK(err("ssm_dtype=bf16@").find("empty layer scope") != std::string::npos);
  CHECK(err("ssm_dtype=bf16@5-2").find("bad layer scope") != std::string::npos);
  CHECK(err("fault=rope-sideways").find("unknown fault 'rope-sideways'") != std::string::npos);
  CHECK(err("attn=flash,,mtp=1").find("empty entry") != std::string::npos);
  // A key given twice kept the last silently (issue 21.10): refused, naming the key; fault may repeat,
  // and a scoped toggle may repeat for other layers, not for the same ones (scoped then unscoped: the
  // documented override, tested under "layer scopes").
  CHECK(err("attn=flash,attn=naive").find("key 'attn' is given twice") != std::string::npos);
  CHECK(err("seed=1,temp=0.5,seed=2").find("key 'seed' is given twice") != std::string::npos);
  CHECK(err("attn=flash@3,attn=naive@3").find("key 'attn' is given twice") != std::string::npos);
  CHECK(err("attn=flash@3+4,attn=naive@3-4").find("key 'attn' is given twice") != std::string::npos);  // same layers
  CHECK_NOTHROW(parse_run_config("attn=flash,attn=naive@3"));
  CHECK_NOTHROW(parse_run_config("attn=flash@0-1,attn=naive@3"));
  CHECK(parse_run_config("fault=rope-interleaved@3,fault=kv-off-by-one").faults.size() == 2);
  ModelConfig c = model_27b();
  CHECK_THROWS_WITH_AS(validate_run_config(parse_run_config("ssm_dtype=bf16@64"), c),
                       doctest::Contains("outside the model (layers 0..63)"), InputError);
  CHECK_NOTHROW(validate_run_config(parse_run_config("ssm_dtype=bf16@63"), c));
}

TEST_CASE("run_config: toggles a backend cannot honour give a reason") {
  CHECK(parse_run_config("graphs=on").untestable_reason(true).find("backend=cuda") != std::string::npos);
  CHECK(parse_run_config("backend=cuda,graphs=on,tp=2").untestable_reason(true).find("tp > 1") != std::string::npos);
  CHECK(parse_run_config("backend=cuda,graphs=on").untestable_reason(true).empty());
  CHECK(parse_run_config("gemm=simple").untestable_reason(true).find("CUDA toggle") != std::string::npos);
  CHECK(parse_run_config("backend=cuda").untestable_reason(false).find("no CUDA backend") != std::string::npos);
  // backend=cuda,precision=ref: the fp32 reference on the GPU, kept apart from the bf16 GPU path
  // (whose precision is not given) through str() and the defaults it resolves
  const RunConfig gref = parse_run_config("backend=cuda,precision=ref");
  CHECK(gref.cuda_reference());
  CHECK(gref.str() == "backend=cuda,precision=ref");
  CHECK(parse_run_config(gref.str()).cuda_reference());
  CHECK_FALSE(parse_run_config("backend=cuda").cuda_reference());
  CHECK_FALSE(parse_run_config("precision=ref").cuda_reference());
  CHECK(parse_run_config("precision=ref").str() == "default");
  CHECK(gref.untestable_reason(true).empty());
  CHECK(gref.conv_dtype_at(0, nullptr) == DType::f32);
  CHECK(parse_run_config("backend=cuda").conv_dtype_at(0, nullptr) == DType::bf16);
  CHECK(parse_run_config("backend=cuda,precision=fp64").untestable_reason(true).find("CPU precisions") != std::string::npos);
  CHECK(parse_run_config("backend=cuda,precision=bf16").untestable_reason(true).find("CPU precisions") != std::string::npos);
  CHECK(parse_run_config("backend=cuda").untestable_reason(true).empty());
  CHECK(parse_run_config("precision=bf16,attn=flash").untestable_reason(false).empty());
}

TEST_CASE("run_config: every catalogue fault parses, has an op, a description and a source") {
  for (const auto& f : fault_catalogue()) {
    CAPTURE(f.name);
    CHECK(parse_run_config(std::string("fault=") + f.name).faults.size() == 1);
    CHECK(std::string(f.description).size() > 10);
    CHECK(std::string(f.source).size() > 5);
  }
  CHECK(fault_catalogue().size() >= 15);
}

namespace {
// Every toggle at a value other than its default.
const char* kEveryToggle =
    "backend=cuda,precision=ref,attn=flash,gdn=recurrent@linear,ssm_dtype=bf16,ssm_dtype=fp16@3,conv_dtype=bf16,"
    "kv_dtype=fp8@full,mtp=2,graphs=on,gemm=cublas,tp=2,batch=all,prefill_chunk=16,prefix_cache=on,temp=0.5,top_p=0.9,top_k=5,min_p=0.1,rep_pen=1.1,"
    "presence_pen=-0.5,seed=7,fault=rope-interleaved@3,fault=kv-off-by-one";

std::vector<std::string> printed_keys(const RunConfig& rc) {
  std::vector<std::string> keys;
  std::string s = rc.str();
  for (size_t a = 0; a < s.size();) {
    size_t comma = s.find(',', a);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(a, comma - a);
    keys.push_back(item.substr(0, item.find('=')));
    a = comma + 1;
  }
  return keys;
}
}  // namespace

TEST_CASE("toggles: the registry covers every key print() emits, in its order") {
  const RunConfig rc = parse_run_config(kEveryToggle);
  std::vector<std::string> registry;
  for (const Toggle& t : toggles()) registry.push_back(t.key);
  std::vector<std::string> printed = printed_keys(rc);
  for (const std::string& k : printed) {
    CAPTURE(k);
    CHECK(find_toggle(k) != nullptr);
  }
  printed.erase(std::unique(printed.begin(), printed.end()), printed.end());  // scoped entries repeat a key
  CHECK(printed == registry);  // every toggle printed once it differs, in the registry's order
  CHECK(find_toggle("colour") == nullptr);
}

TEST_CASE("toggles: parse(print(x)) == x") {
  for (const char* text : {"", "precision=bf16,attn=flash", "backend=cuda,precision=ref,tp=2,gemm=simple,graphs=off",
                           "ssm_dtype=fp32,conv_dtype=bf16@0-2,kv_dtype=fp8@3+7,gdn=fla@linear",
                           "temp=0.7,top_p=0.95,top_k=20,seed=18446744073709551615",
                           "batch=4,prefix_cache=16,prefill_chunk=1", kEveryToggle}) {
    CAPTURE(text);
    const RunConfig x = parse_run_config(text);
    const RunConfig y = parse_run_config(x.str());
    CHECK(y.str() == x.str());
    CHECK(y.precision_set == x.precision_set);
    CHECK(y.ssm_dtype_set == x.ssm_dtype_set);
    CHECK(y.conv_dtype_set == x.conv_dtype_set);
    CHECK(y.sampling.seed == x.sampling.seed);
    CHECK(y.faults.size() == x.faults.size());
    // every toggle's whole value (what bisection compares) survives the round trip
    for (const Toggle& t : toggles())
      if (t.fragment) CHECK(t.fragment(y) == t.fragment(x));
  }
}

TEST_CASE("toggles: flags for the floor class and for bench") {
  const RunConfig rc = parse_run_config(kEveryToggle);
  // bench sets mtp, graphs, tp and batch itself and takes no sampling; precision=ref is printed on
  // backend=cuda only, which bench takes
  const RunConfig bench_rest = without_toggles(rc, [](const Toggle& t) { return t.bench; });
  CHECK(bench_rest.str() == "mtp=2,graphs=on,tp=2,batch=all,prefill_chunk=16,prefix_cache=on,temp=0.5,top_p=0.9,top_k=5,min_p=0.1,"
                            "rep_pen=1.1,presence_pen=-0.5,seed=7");
  // on the GPU reference, backend, gemm, graphs and tp are precision-neutral too
  const RunConfig neutral = without_toggles(rc, [&](const Toggle& t) { return t.floor_neutral(rc); });
  CHECK(neutral.str() == "attn=flash,ssm_dtype=bf16,ssm_dtype=fp16@3,conv_dtype=bf16,kv_dtype=fp8@full");
  const RunConfig cpu = parse_run_config("tp=2,gdn=recurrent,attn=flash");
  CHECK(without_toggles(cpu, [&](const Toggle& t) { return t.floor_neutral(cpu); }).str() == "attn=flash,tp=2");
  CHECK(toggle_scopable("gdn"));
  CHECK_FALSE(toggle_scopable("tp"));
  CHECK(toggle_scopable("fault:rope-interleaved"));
}

TEST_CASE("toggles: one precision vocabulary, the older spelling still taken") {
  CHECK(precision_from_word("ref") == Precision::ref);
  CHECK(precision_from_word("fp64") == Precision::fp64);
  CHECK(precision_from_word("q8_0") == Precision::q8_0);
  CHECK(std::string(precision_word(Precision::bf16)) == "bf16");
  CHECK_FALSE(precision_from_word("fp32"));  // not a word of --config precision=
  std::string note;
  CHECK(precision_from_word("ref", &note) == Precision::ref);
  CHECK(note.empty());
  CHECK(precision_from_word("fp32", &note) == precision_from_word("ref"));  // golden's older spelling
  CHECK(note == "--precision fp32 is now spelled ref (the words of --config precision=)");
  CHECK_FALSE(precision_from_word("fp16", &note));
  for (const char* w : {"ref", "fp64", "bf16", "q8_0"})  // the same words as the toggle's
    CHECK(parse_run_config(std::string("precision=") + w).precision == *precision_from_word(w));
}

TEST_CASE("run_config: typed setters build what the text would") {
  CHECK(RunConfig{}.with_precision(Precision::q8_0) == parse_run_config("precision=q8_0"));
  CHECK(RunConfig{}.with_precision(Precision::q8_0).precision_set);
  CHECK(RunConfig{}.with_backend(BackendKind::cuda).with_precision(Precision::ref).str() == "backend=cuda,precision=ref");
  CHECK(RunConfig{}.with_backend(BackendKind::cuda).with_precision(Precision::ref).cuda_reference());
  CHECK(RunConfig{}.with_precision(Precision::fp64).with_tp(4) == parse_run_config("precision=fp64,tp=4"));
  CHECK_THROWS_WITH_AS(RunConfig{}.with_tp(65), "config: tp=65: expected an integer in [1, 64]", InputError);
  CHECK(err("tp=65") == "config: tp=65: expected an integer in [1, 64]");
  CHECK(precision_in_config("bf16") == Precision::bf16);
  CHECK_THROWS_WITH_AS(precision_in_config("fp32"), doctest::Contains("config: precision=fp32: unknown value"), InputError);
}

TEST_CASE("run_config: gemm is a typed value with one word list") {
  CHECK_FALSE(parse_run_config("").gemm);
  CHECK(parse_run_config("gemm=auto").gemm == GemmMode::automatic);
  CHECK(parse_run_config("gemm=auto").str() == "gemm=auto");  // given: printed, unlike unset
  CHECK(parse_run_config("gemm=simple").gemm == GemmMode::simple);
  CHECK(parse_run_config("backend=cuda,gemm=cublas").str() == "backend=cuda,gemm=cublas");
  CHECK(err("gemm=fast") == "config: gemm=fast: unknown value; expected one of auto, cublas, simple");
}

TEST_CASE("toggles: kinds and the typed overlays") {
  CHECK(toggle_keys([](const Toggle& t) { return t.kind == ToggleKind::sampling; }) ==
        "temp, top_p, top_k, min_p, rep_pen, presence_pen, seed");
  CHECK(toggle_keys([](const Toggle& t) { return t.kind == ToggleKind::layer; }) ==
        "attn, gdn, ssm_dtype, conv_dtype, kv_dtype");
  // a case's sampling on top of the configuration's: the fields it sets win, the others stay
  SamplingParams base = parse_run_config("temp=0.6,top_k=20,presence_pen=1.5").sampling;
  SamplingParams over = parse_run_config("temp=0.7,seed=3,presence_pen=-0").sampling;
  RunConfig want = parse_run_config("temp=0.6,top_k=20,presence_pen=1.5");
  want = apply_run_config(want, "temp=0.7,seed=3");
  RunConfig got;
  got.sampling = with_sampling_of(base, over);
  CHECK(got.str() == want.str());
  CHECK(got.str() == "temp=0.7,top_k=20,presence_pen=1.5,seed=3");
  // the toggles a configuration sets, taken onto another
  const RunConfig onto = with_toggles_of(parse_run_config("mtp=3,attn=flash"), parse_run_config("prefix_cache=on,mtp=2"),
                                         [](const Toggle&) { return true; });
  CHECK(onto.str() == "attn=flash,mtp=2,prefix_cache=on");
  for (const FaultInfo& f : fault_catalogue())
    CHECK(fault_needs(f).str() == (f.needs ? parse_run_config(f.needs).str() : std::string("default")));
}
