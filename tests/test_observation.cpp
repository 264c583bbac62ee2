// Observe what runs (issue 43): the engine has one path, an observed run calls the same ops as a run
// that is not observed, the steps inside a fused op are written by the op (Backend::TapSink) and
// offered read-only, the observed-equals-unobserved check of compare (judge/observation.h) holds on
// every shipped model and fails on a planted backend whose fused op computes otherwise when asked
// for its taps, and a bug inside a fused op (its prologue or its epilogue) is caught and localised
// to that fused op by the sub-op analysis.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "backends/make_backend.h"
#include "record/cases.h"
#include "diag/golden.h"
#include "judge/observation.h"
#include "diag/subop.h"
#include "engine/fused_ops.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "util/error.h"

using namespace degen;
using namespace degen::test;
namespace fs = std::filesystem;

namespace {

const char* const kPresets[] = {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"};

// A CPU backend with a planted bug in one fused op. `when_observed`: only while the engine asks for
// taps (the mistake an observed path can hide: the observation changes the result); otherwise
// always (a bug inside the fused op, as a fused GPU kernel would have it). `prologue`: the op's
// input z is perturbed before the gated norm (a prologue bug); else its output (an epilogue bug).
class PlantedBackend : public CpuBackend {
 public:
  PlantedBackend(bool when_observed, bool prologue) : when_observed_(when_observed), prologue_(prologue) {}
  Tensor gated_norm_matmul(const Tensor& x, const Tensor& z, const TensorView& norm_w, double eps, const TensorView& w,
                           const Tensor* res) override {
    if (when_observed_ && !taps_wanted()) return CpuBackend::gated_norm_matmul(x, z, norm_w, eps, w, res);
    if (prologue_) return CpuBackend::gated_norm_matmul(x, shifted(z), norm_w, eps, w, res);
    return shifted(CpuBackend::gated_norm_matmul(x, z, norm_w, eps, w, res));
  }

 private:
  Tensor shifted(const Tensor& t) {
    std::vector<double> v = to_host_f64(t);
    for (size_t i = 0; i < v.size(); ++i) v[i] += (i % 3 == 0) ? 0.25 : 0.0;
    return from_host(v, t.shape, t.dtype);
  }
  bool when_observed_, prologue_;
};

struct Synth {
  TempDir dir{"obs"};
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  ModelWeights w;
  std::unique_ptr<CpuBackend> be;
  std::unique_ptr<Engine> eng;
  explicit Synth(const std::string& preset, std::unique_ptr<CpuBackend> backend = nullptr) {
    const SynthPreset& sp = find_synth_preset(preset);
    synth_checkpoint(sp.config, sp.options, dir.path());
    cfg = load_model_config(dir.path());
    ckpt = Checkpoint::open(dir.path());
    w = bind_weights(cfg, *ckpt);
    be = backend ? std::move(backend) : std::make_unique<CpuBackend>();
    eng = std::make_unique<Engine>(cfg, w, *be, EngineOptions{});
  }
};

std::vector<int32_t> ids(int n, int64_t vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  return v;
}

}  // namespace

TEST_CASE("observation: every shipped model's observed prefill equals the unobserved one bit for bit (CPU)") {
  for (const char* preset : kPresets) {
    CAPTURE(std::string(preset));
    Synth m(preset);
    const ObservationCheck c = check_observation(*m.eng, ids(40, m.cfg.vocab_size), nullptr, "ids", 64);
    CHECK(c.positions == 40);
    CHECK(c.values == 40 * m.cfg.vocab_size);
    CHECK(c.steps > 15 * m.cfg.num_layers);  // every layer's steps were offered (17-20 per layer)
    CHECK(c.equal());
    CHECK(c.to_json()["equal"] == true);
  }
}

TEST_CASE("observation: the planted mistake (a fused op that computes otherwise when asked for its taps) is reported") {
  Synth m("tiny-qwen35", std::make_unique<PlantedBackend>(/*when_observed=*/true, /*prologue=*/false));
  const ObservationCheck c = check_observation(*m.eng, ids(12, m.cfg.vocab_size), nullptr, "planted", 64);
  CHECK_FALSE(c.equal());
  CHECK(c.differing > 0);
  CHECK(c.max_abs > 0);
  CHECK(c.reason().find("observing the layers changes the result") != std::string::npos);
  CHECK(c.to_json()["equal"] == false);
}

TEST_CASE("observation: each fused op's steps are offered on the CPU, and the steps inside one are read-only") {
  for (const char* preset : kPresets) {
    CAPTURE(preset);
    Synth m(preset);
    std::set<std::string> seen;
    Trace tr;
    tr.observer = [&](const TraceEvent& ev, Tensor&, Backend&) {
      if (!ev.mtp) seen.insert(ev.name);
    };
    SeqState st = m.eng->new_state();
    m.eng->forward({SeqInput{&st, ids(9, m.cfg.vocab_size)}}, {}, &tr);
    for (int l = 0; l < m.cfg.num_layers; ++l)
      for (const StepInfo& si : trace_steps()) {
        const FusedOp* f = fused_op_of(si.step, m.cfg.layer_types[static_cast<size_t>(l)], m.cfg.is_moe_layer(l));
        if (!f) continue;
        for (Step s : f->steps) CHECK_MESSAGE(seen.count(trace_name(s, l)), trace_name(s, l), " of ", f->op);
      }
  }
  // gdn_conv is inside gdn_inputs: replacing it is refused, naming the op; gdn_q is its output: allowed
  Synth m("tiny-qwen35");
  Trace bad;
  bad.observer = [](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.name == "gdn_conv-0") t = be.clone(t);
  };
  SeqState st = m.eng->new_state();
  CHECK_THROWS_WITH_AS(m.eng->forward({SeqInput{&st, {1, 2, 3}}}, {}, &bad),
                       doctest::Contains("inside the fused op gdn_inputs"), InputError);
  Trace ok;
  ok.observer = [](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.name == "gdn_q-0") t = be.clone(t);
  };
  SeqState st2 = m.eng->new_state();
  CHECK_NOTHROW(m.eng->forward({SeqInput{&st2, {1, 2, 3}}}, {}, &ok));
}

TEST_CASE("observation: the fused-op table names the op of each step by layer kind") {
  const FusedOp* g = fused_op_of(Step::mixer_out, LayerKind::linear, false);
  const FusedOp* a = fused_op_of(Step::mixer_out, LayerKind::full, false);
  REQUIRE(g);
  REQUIRE(a);
  CHECK(std::string(g->op) == "gated_norm_matmul");
  CHECK(std::string(a->op) == "sigmoid_gate_matmul");
  CHECK(fused_op_words(*g) == "gated_norm_matmul (gdn_norm -> mixer_out -> h_mid: gated RMSNorm, out_proj, + residual)");
  CHECK(fused_op_of(Step::gdn_core, LayerKind::linear, false) == nullptr);
  CHECK(std::string(fused_op_of(Step::ffn_out, LayerKind::full, true)->op) == "matmul_gate_add");
}

namespace {

// A tiny-qwen35 record of one smoke case (all positions), made once for the localisation tests.
struct Record {
  TempDir dir{"obs-rec"};
  fs::path model, record;
  Record() {
    const SynthPreset& sp = find_synth_preset("tiny-qwen35");
    model = dir.path() / "model";
    synth_checkpoint(sp.config, sp.options, model);
    record = dir.path() / "golden";
    std::unique_ptr<Model> mdl = load_model(model);
    std::unique_ptr<Tokenizer> tok = Tokenizer::load(model / "tokenizer.json");
    Suite s = load_suite(source_dir() / "cases" / "smoke.json");
    std::erase_if(s.cases, [](const Case& c) { return c.id != "two-plus-two"; });
    GoldenOptions o;
    o.positions = "all";
    write_golden(*mdl, tok.get(), s, record, o, make_backend);
  }
};
Record& record() {
  static Record r;
  return r;
}

// The sub-op analysis of layer 0 (a GDN layer) for `tested`, whose backend `factory` makes.
std::vector<SubopReport> analyse(const RunConfig& tested, const BackendFactory& factory) {
  GoldenRecord rec = GoldenRecord::open(record().record);
  std::unique_ptr<Model> mdl = load_model(record().model);
  REQUIRE(mdl->config.layer_types[0] == LayerKind::linear);
  return subop_analysis(rec, *mdl, tested, 0, factory, 0, 16);
}

SubopReport prefill(const std::vector<SubopReport>& r) {
  for (const SubopReport& x : r)
    if (x.mode == ForcedMode::prefill) return x;
  FAIL("no prefill report");
  return {};
}

}  // namespace

TEST_CASE("observation: a bug inside a fused op's prologue or epilogue is caught and localised to that op") {
  // tested: a precision-neutral toggle, so the reference ("") and the floor run ("precision=fp64")
  // are other configurations, made by the plain factory
  const RunConfig tested = parse_run_config("gdn=recurrent");
  for (bool prologue : {true, false}) {
    CAPTURE(prologue);
    BackendFactory planted = [&](const RunConfig& rc, const ModelConfig& cfg) -> std::unique_ptr<Backend> {
      if (rc.str() == tested.str()) return std::make_unique<PlantedBackend>(/*when_observed=*/false, prologue);
      return make_backend(rc, cfg);
    };
    const SubopReport r = prefill(analyse(tested, planted));
    REQUIRE(r.first_break);
    // prologue: the gated norm's output (written by the op as its tap) breaks first; epilogue: the
    // op's output after the residual add, while the product inside it is still good
    CHECK(*r.first_break == (prologue ? "gdn_norm" : "h_mid"));
    REQUIRE(r.fused_op);
    CHECK(r.fused_op->rfind("gated_norm_matmul (", 0) == 0);
    CHECK(r.to_json()["fused_op"] == *r.fused_op);
  }
  // The catalogue fault that lives in the same op's prologue (gdn-norm-plus-one), through the real backend.
  const SubopReport f = prefill(analyse(parse_run_config("fault=gdn-norm-plus-one"), make_backend));
  REQUIRE(f.first_break);
  CHECK(*f.first_break == "gdn_norm");
  REQUIRE(f.fused_op);
  CHECK(f.fused_op->rfind("gated_norm_matmul", 0) == 0);
  CHECK(f.inside.empty());  // the CPU composition writes every step of the op
  // And a run without a bug breaks nowhere.
  CHECK_FALSE(prefill(analyse(parse_run_config("gdn=recurrent"), make_backend)).first_break);
}
