// compare --dump (src/diag/dump_compare.h) without llama.cpp: our own engine writes a dump the way
// llama.cpp's would (its names, its tiled value-head order, every position in one prefill), with a
// catalogue fault injected at one layer. The dump's judge must say good without a fault and, with
// one, name the fault's layer and the catalogue's first corrupted step: the localiser checked against
// the fault catalogue, as bisect is (tests/test_bisect.cpp, selftest). Faults of one-token calls
// (conv-window-stuck, kv-off-by-one) cannot show in a prefill dump: checked to pass unseen, which is
// what docs/dump-format.md says. tests/cli/llama_engine.sh does the same with the real llama.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "backends/make_backend.h"
#include "diag/dump_compare.h"
#include "diag/golden.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/faults.h"
#include "engine/run_config.h"
#include "helpers.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

using namespace degen;
namespace fs = std::filesystem;

namespace {

const char* const kCase = "two-plus-two";

fs::path trained() { return test::source_dir() / "models" / "tiny-trained"; }
fs::path smoke() { return test::source_dir() / "golden" / "tiny-trained" / "smoke"; }

// Our grouped value heads to llama.cpp's tiled order, written independently of the judge's inverse:
// tiled slot j holds value head (j mod n_k)·r + j / n_k.
std::vector<float> tile(const std::vector<float>& v, int64_t rows, const ModelConfig& c, int64_t off, int64_t block) {
  std::vector<float> out = v;
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c.n_v; ++j) {
      const int64_t grouped = (j % c.n_k) * c.r() + j / c.n_k;
      for (int64_t e = 0; e < block; ++e)
        out[static_cast<size_t>(i * cols + off + j * block + e)] = v[static_cast<size_t>(i * cols + off + grouped * block + e)];
    }
  return out;
}

// Runs `config` over the case's golden sequence (one prefill) and writes what llama-dump would.
void write_dump(const Model& m, const std::vector<int32_t>& seq, const std::string& config, const fs::path& dir,
                const std::string& names = "llama.cpp") {
  const RunConfig rc = parse_run_config(config);
  auto be = make_backend(rc, m.config);
  Engine eng(m.config, m.weights, *be, engine_options(rc));
  std::map<std::string, std::vector<float>> steps;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (!ev.mtp) steps[ev.name] = b.to_host_f32(t);
  };
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  ForwardOutput out = eng.forward({SeqInput{&st, seq}}, fo, &tr);
  const int64_t T = static_cast<int64_t>(seq.size());
  SafetensorsWriter w;
  w.set_metadata("format", "degenbisect-dump");
  w.set_metadata("names", names);
  w.set_metadata("case", kCase);
  w.add_f32("logits", {T, m.config.vocab_size}, be->to_host_f32(out.logits));
  const ModelConfig& c = m.config;
  for (const DumpName& n : names == "degenbisect" ? degenbisect_dump_names() : llama_cpp_dump_names()) {
    for (int l = -1; l < c.num_layers; ++l) {
      const bool model_level = n.kind == 'M';
      if (model_level != (l < 0)) continue;
      if (!model_level && n.kind != '*' && n.kind != (c.layer_types[static_cast<size_t>(l)] == LayerKind::full ? 'A' : 'G'))
        continue;
      auto it = steps.find(trace_name(n.step, l));
      if (it == steps.end()) continue;
      std::vector<float> v = it->second;
      if (n.order == HeadOrder::vheads_tiled) v = tile(v, T, c, n.offset_keys * c.d_key(), n.block_is_dv ? c.d_v : 1);
      if (n.scale_q)
        for (float& x : v) x = static_cast<float>(x * std::sqrt(static_cast<double>(c.d_k)));
      const std::string name = model_level ? std::string(n.engine) : std::string(n.engine) + "-" + std::to_string(l);
      w.add_f32(name, {T, static_cast<int64_t>(v.size()) / T}, v);
    }
  }
  fs::create_directories(dir);
  w.write(dir / (std::string(kCase) + ".safetensors"));
}

struct Judge {
  GoldenRecord rec = GoldenRecord::open(smoke());
  std::unique_ptr<Model> model = load_model(trained());
  std::unique_ptr<Tokenizer> tok = Tokenizer::load(trained() / "tokenizer.json");
  std::vector<int32_t> seq() const {
    for (size_t i = 0; i < rec.cases().size(); ++i)
      if (rec.cases()[i].id == kCase) return rec.load_case(i, false).sequence();
    FAIL("no case");
    return {};
  }
  CompareResult judge(const fs::path& dir, FloorClass fc = FloorClass::fp32) const {
    DumpCompareOptions o;
    o.dir = dir.string();
    o.fclass = fc;
    o.cases = {kCase};
    return compare_dump(rec, *model, tok.get(), o, make_backend);
  }
};

std::string reasons(const CompareResult& r) {
  std::string s;
  for (const std::string& x : r.cases.at(0).reasons) s += x + "\n";
  return s;
}

}  // namespace

TEST_CASE("compare --dump: an honest fp32-class engine passes, at every layer") {
  Judge j;
  test::TempDir dir("dump-good");
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path());
  const CompareResult r = j.judge(dir.path());
  INFO(reasons(r));
  CHECK(r.exit_code == 0);
  CHECK(r.source == "dump");
  REQUIRE(r.cases.size() == 1);
  for (const LayerRow& row : r.cases[0].layers) {
    CHECK(row.pass[0]);
    CHECK(row.drift[0].has_value());
  }
  CHECK(r.cases[0].logits[0]->pass);
  // A bf16 engine is bad against the fp32 class and good against its own.
  write_dump(*j.model, j.seq(), "precision=bf16", dir.path() / "bf16");
  CHECK(j.judge(dir.path() / "bf16").exit_code == 1);
  CHECK(j.judge(dir.path() / "bf16", FloorClass::bf16).exit_code == 0);
}

TEST_CASE("compare --dump: each catalogue fault of a prefill is named at its layer and its first corrupted step") {
  Judge j;
  const ModelConfig& c = j.model->config;
  int named = 0;
  for (const FaultInfo& f : fault_catalogue()) {
    if (!f.pass || f.needs_tp || f.needs_mtp || f.magnitude_dependent || (f.inert_on && f.inert_on(c))) continue;
    if (f.site == FaultSite::moe_layer || f.site == FaultSite::model) continue;
    const int layer = f.site == FaultSite::full_layer ? 3 : 4;  // layers 3 and 7 attention; 4 the GDN after one
    test::TempDir dir("dump-fault");
    write_dump(*j.model, j.seq(), std::string("precision=fp64,fault=") + f.name + "@" + std::to_string(layer), dir.path());
    const CompareResult r = j.judge(dir.path());
    INFO(f.name, "\n", reasons(r));
    const std::string op = f.op;
    if (f.id == FaultId::conv_window_stuck || f.id == FaultId::kv_off_by_one) {
      CHECK(r.exit_code == 0);  // one-token calls only: a prefill dump cannot see them
      continue;
    }
    CHECK(r.exit_code == 1);
    REQUIRE(r.cases[0].first_break.has_value());
    CHECK(r.cases[0].first_break->second == layer);
    CHECK(reasons(r).find("first step over its floor in layer " + std::to_string(layer) + ": " + op + " ") !=
          std::string::npos);
    ++named;
  }
  CHECK(named >= 7);
}

TEST_CASE("compare --dump: bad dumps are input errors naming what was expected") {
  Judge j;
  test::TempDir dir("dump-bad");
  CHECK_THROWS_WITH_AS(j.judge(dir.path()), doctest::Contains("no dump for case 'two-plus-two'"), InputError);
  CHECK_THROWS_WITH_AS(j.judge(dir.path() / "none"), doctest::Contains("not a folder"), InputError);
  // Another sequence: the first 10 tokens only.
  std::vector<int32_t> s = j.seq();
  s.resize(10);
  write_dump(*j.model, s, "precision=fp64", dir.path());
  CHECK_THROWS_WITH_AS(j.judge(dir.path()), doctest::Contains("logits for 10 positions"), InputError);
}

TEST_CASE("compare --dump: a dump in our own step names (a transformers hook script) is judged the same way") {
  Judge j;
  test::TempDir dir("dump-ours");
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "good", "degenbisect");
  CHECK(j.judge(dir.path() / "good").exit_code == 0);
  write_dump(*j.model, j.seq(), "precision=fp64,fault=gdn-skip-l2norm@5", dir.path() / "bad", "degenbisect");
  const CompareResult r = j.judge(dir.path() / "bad");
  INFO(reasons(r));
  CHECK(r.exit_code == 1);
  CHECK(reasons(r).find("first step over its floor in layer 5: gdn_q (the engine's 'gdn_q-5'") != std::string::npos);
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "other", "vllm");
  CHECK_THROWS_WITH_AS(j.judge(dir.path() / "other"), doctest::Contains("expected 'llama.cpp' or 'degenbisect'"), InputError);
}
