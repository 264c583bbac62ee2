// The fault catalogue (DESIGN.md §7, src/engine/faults.cpp) in the forward pass: every fault breaks
// the run it is injected into at its catalogue op, and leaves every layer before its scope bit for
// bit as the clean run; scopes that cannot host a fault are input errors naming the layer kind;
// faults that cannot act on a model or need tensor parallelism are untestable; hand cases for the
// faults whose effect is subtle (fp16 overflow, read-before-decay in the chunked algebra).
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "engine/faults.h"
#include "tolerances.h"
#include "toggle_test_util.h"

using namespace degen;
using namespace degen::test;

namespace {

// Faults applied in the engine's own steps (FaultApplied::engine_step), not as an op flag of the
// forward pass: MTP speculative decoding (engine/spec_decode) and the model-level tensor-parallel one
// (the engine's layer loop; tests/test_tp.cpp).
const std::set<std::string> kNotForwardPass = {"mtp-no-rollback", "mtp-prenorm-hidden", "tp-skip-last-allreduce",
                                               "mtp-concat-order", "spec-stale-slot", "prefix-snapshot-drafts",
                                               "pad-slot-alias", "pad-updates-state", "chunk-state-twice",
                                               "chunk-state-zero"};

struct Injection {
  const char* fault;
  const char* preset;
  int layer;         // the one layer it is injected at
  const char* call;  // where its op first shows: "p" prefill, "d0"/"d1" decode steps
};

// One injection per forward-pass fault, on a layer after layer 0, so that there are earlier layers
// (of both kinds, for every layer >= 3) that must stay untouched.
const Injection kInjections[] = {
    {"rope-interleaved", "tiny-qwen35", 7, "p"},
    {"rope-all-dims", "tiny-qwen35", 7, "p"},
    {"rope-freq-head-dim", "tiny-qwen35", 7, "p"},
    {"norm-no-plus-one", "tiny-qwen35", 2, "p"},
    {"norm-double-plus-one", "tiny-qwen35", 2, "p"},
    {"gdn-norm-plus-one", "tiny-qwen35", 1, "p"},
    {"qgate-split", "tiny-qwen35", 7, "p"},
    {"gdn-read-before-decay", "tiny-qwen35", 4, "p"},
    {"gdn-skip-l2norm", "tiny-qwen35", 2, "p"},
    {"gdn-head-mod", "tiny-qwen35-r3", 4, "p"},  // r = 3: j mod n_k != j / r
    {"gdn-out-fp16", "tiny-qwen35", 1, "p"},
    {"conv-window-stuck", "tiny-qwen35", 2, "d1"},  // d0 still sees the prefill's window, which is right
    {"alog-no-exp", "tiny-qwen35", 4, "p"},
    {"kv-off-by-one", "tiny-qwen35", 3, "d0"},
    {"moe-no-renorm", "tiny-qwen35-moe", 2, "p"},
    {"tp-gdn-no-allreduce", "tiny-qwen35", 2, "p"},       // clean and faulty runs both at tp=2
    {"tp-moe-double-allreduce", "tiny-qwen35-moe", 2, "p"},
    {"tp-ba-midpoint-split", "tiny-qwen3next", 2, "p"},  // the interleaved in_proj_ba of Qwen3-Next only
};

bool is_before(const std::string& call, const std::string& other) {  // "p" < "d0" < "d1" ...
  auto rank = [](const std::string& c) { return c == "p" ? -1 : std::stoi(c.substr(1)); };
  return rank(call) < rank(other);
}

}  // namespace

TEST_CASE("faults: the catalogue and the forward pass name the same faults") {
  std::set<std::string> catalogue;
  for (const FaultInfo& f : fault_catalogue()) {
    CAPTURE(f.name);
    catalogue.insert(f.name);
    CHECK(std::string(f.description).size() > 10);
    CHECK(std::string(f.source).size() > 10);
    bool op_is_a_step = false;
    for (const StepInfo& s : trace_steps()) op_is_a_step = op_is_a_step || std::string(s.name) == f.op;
    CHECK(op_is_a_step);
    CHECK((f.applied == FaultApplied::op_flag) == (kNotForwardPass.count(f.name) == 0));
    CHECK(fault_from_name(f.name) == f.id);
    CHECK(&fault_info(f.id) == &f);  // one row per Fault, in its order
  }
  CHECK(fault_catalogue().size() == static_cast<size_t>(Fault::count));
  for (size_t i = 0; i < static_cast<size_t>(Fault::count); ++i) {
    const Fault f = static_cast<Fault>(i);
    CAPTURE(fault_name(f));
    CHECK(catalogue.count(fault_name(f)) == 1);
    CHECK(fault_from_name(fault_name(f)) == f);
  }
  CHECK(std::string(fault_name(Fault::count)) == "?");
  CHECK_FALSE(fault_from_name("no-such-fault"));
  std::set<std::string> injected;
  for (const Injection& in : kInjections) injected.insert(in.fault);
  // the next test covers every fault of the forward pass
  CHECK(injected.size() + kNotForwardPass.size() == static_cast<size_t>(Fault::count));
}

TEST_CASE("faults: each fault breaks its op and leaves the layers before its scope bit-identical") {
  std::string report;
  for (const char* precision : {"precision=ref", "precision=bf16"}) {
    for (const Injection& in : kInjections) {
      const FaultInfo* info = find_fault(in.fault);
      REQUIRE(info);
      // tensor-parallel faults: both runs at tp=2
      const std::string base = cat(precision, std::string(in.fault).rfind("tp-", 0) == 0 ? ",tp=2" : "");
      const std::string cfg = cat(base, ",fault=", in.fault, "@", in.layer);
      CAPTURE(cfg);
      CAPTURE(in.preset);
      const auto& dir = synth_model(in.preset);
      ToggledModel clean_m(dir, base), bad_m(dir, cfg);
      const std::vector<int32_t> ids = test_ids(90, clean_m.cfg.vocab_size, 21);
      const RunTrace clean = run_traced(clean_m, ids, 3), bad = run_traced(bad_m, ids, 3);
      REQUIRE(clean.t.size() == bad.t.size());
      // Layers before the faulty one, in every call, and everything in calls before the one where
      // the op shows: bit-identical.
      int same = 0;
      for (const auto& [name, v] : bad.t) {
        const std::string call = name.substr(0, name.find(':'));
        const int l = trace_layer(name);
        if ((l >= 0 && l < in.layer) || name.find(":embed") != std::string::npos || is_before(call, in.call)) {
          CAPTURE(name);
          CHECK(v == clean.t.at(name));
          ++same;
        }
      }
      CHECK(same > 0);
      // The catalogue op at the faulty layer is broken where it shows, and so is the run.
      const std::string op = cat(in.call, ":", info->op, "-", in.layer);
      REQUIRE(bad.t.count(op));
      const double e_op = rel_l2(bad.t.at(op), clean.t.at(op)), e_logits = rel_l2(bad.logits, clean.logits);
      CHECK(e_op > tol::kFaultVisible);
      CHECK(e_logits > tol::kFaultVisible);
      report += cat("\n  ", precision, " ", in.fault, "@", in.layer, " (", in.preset, "): ", op, " ", e_op, ", logits ",
                    e_logits);
    }
  }
  MESSAGE("rel-L2 of the faulty run against the clean run:", report,
          "\n  (gdn-out-fp16 without overflow is only an fp16 rounding, and under precision=bf16 a double rounding "
          "fp32 -> fp16 -> bf16; its failure is the overflow of the hand case)");
}

TEST_CASE("faults: an unscoped fault acts on every layer that can host it, the MTP layer included") {
  const auto& dir = synth_model("tiny-qwen35");  // GGGA GGGA
  struct Want { const char* fault; Fault f; std::vector<int> layers; bool mtp; };
  const Want wants[] = {
      {"rope-interleaved", Fault::rope_interleaved, {3, 7}, true},
      {"alog-no-exp", Fault::alog_no_exp, {0, 1, 2, 4, 5, 6}, false},
      {"norm-no-plus-one", Fault::norm_no_plus_one, {0, 1, 2, 3, 4, 5, 6, 7}, true},
      {"norm-double-plus-one", Fault::norm_double_plus_one, {0, 1, 2, 3, 4, 5, 6, 7}, true},
  };
  for (const Want& w : wants) {
    CAPTURE(w.fault);
    ToggledModel m(dir, cat("fault=", w.fault));
    for (int l = 0; l < 8; ++l) {
      CAPTURE(l);
      CHECK(m.eng->numerics(l, false).has(w.f) == (std::find(w.layers.begin(), w.layers.end(), l) != w.layers.end()));
    }
    CHECK(m.eng->numerics(0, true).has(w.f) == w.mtp);
    CHECK_FALSE(m.eng->numerics(-1, false).has(w.f));  // embedding, final norm, LM head
  }
  // a range over both kinds selects only the layers that can host the fault
  ToggledModel r(dir, "fault=rope-interleaved@0-4");
  for (int l = 0; l < 8; ++l) CHECK(r.eng->numerics(l, false).has(Fault::rope_interleaved) == (l == 3));
  CHECK_FALSE(r.eng->numerics(0, true).has(Fault::rope_interleaved));  // scoped: not the MTP layer
}

TEST_CASE("faults: a scope that cannot host the fault is an input error naming the layer kind") {
  const ModelConfig dense = load_model_config(synth_model("tiny-qwen35"));  // GGGA GGGA, dense MLP
  struct Bad { const char* cfg; const char* says; };
  const Bad bad[] = {
      {"fault=rope-interleaved@0", "layer 0 is a GDN (linear_attention) layer"},
      {"fault=kv-off-by-one@0-2", "layers 0, 1, 2 are GDN (linear_attention) layers"},
      {"fault=gdn-head-mod@3", "layer 3 is a full-attention layer"},
      {"fault=conv-window-stuck@full", "layers 3, 7 are full-attention layers"},
      {"fault=moe-no-renorm@2", "layer 2 is a dense-MLP layer"},
      {"fault=moe-no-renorm", "dense-MLP layers"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.cfg);
    const RunConfig rc = parse_run_config(b.cfg);
    CHECK_THROWS_WITH_AS(make_backend(rc, dense), doctest::Contains(b.says), InputError);
    CHECK_THROWS_WITH_AS(check_faults(rc, dense), doctest::Contains(b.says), InputError);
  }
  // and a fault on a layer that hosts it is fine
  CHECK_NOTHROW(check_faults(parse_run_config("fault=rope-interleaved@3,fault=gdn-head-mod@linear"), dense));
}

TEST_CASE("faults: untestable where the fault cannot act") {
  ModelConfig cfg = load_model_config(synth_model("tiny-qwen35"));
  // tensor-parallel faults need ranks
  for (const char* f : {"fault=tp-skip-last-allreduce", "fault=tp-gdn-no-allreduce@0"})
    CHECK_THROWS_WITH_AS(make_backend(parse_run_config(f), cfg), doctest::Contains("needs tp > 1"), UntestableError);
  // faults that change nothing on a model are refused, not silently clean
  ModelConfig r1 = cfg;
  r1.n_v = r1.n_k;
  CHECK_THROWS_WITH_AS(check_faults(parse_run_config("fault=gdn-head-mod"), r1), doctest::Contains("changes nothing"),
                       UntestableError);
  ModelConfig full_rope = cfg;
  full_rope.rotary_dim = full_rope.head_dim;
  CHECK_THROWS_AS(check_faults(parse_run_config("fault=rope-all-dims@7"), full_rope), UntestableError);
  ModelConfig one_head = cfg;
  one_head.n_q = 1;
  CHECK_THROWS_AS(check_faults(parse_run_config("fault=qgate-split"), one_head), UntestableError);
  ModelConfig no_renorm = load_model_config(synth_model("tiny-qwen35-moe"));
  no_renorm.norm_topk_prob = false;
  CHECK_THROWS_AS(check_faults(parse_run_config("fault=moe-no-renorm"), no_renorm), UntestableError);
  // the MTP faults belong to speculative decoding: the forward pass accepts them
  CHECK_NOTHROW(check_faults(parse_run_config("fault=mtp-no-rollback,fault=mtp-prenorm-hidden"), cfg));
}

TEST_CASE("faults: gdn-out-fp16 overflows the readout to inf and the gated norm turns it into NaN") {
  // An unnormalised state (3e4 in every entry, as after a long context) read by q = (1, 1, 1, 1):
  // o = S^T q = 1.2e5, beyond fp16's 65504. k = v = 0 leave the state as it is (beta (v - S^T k)
  // is written along k = 0). Clean: finite in fp32 and bf16; with the fault: inf, and the gated
  // norm of that row is NaN (inf / inf), which is how the reported bug degenerates.
  const int64_t dk = 4, dv = 4;
  const std::vector<uint16_t> ones(dv, 0x3f80);  // a plain norm weight of bf16 1.0
  TensorView w;
  w.name = "linear_attn.norm.weight";
  w.dtype = DType::bf16;
  w.shape = {dv};
  w.data = reinterpret_cast<const uint8_t*>(ones.data());
  w.nbytes = ones.size() * 2;
  for (CpuPrecision p : {CpuPrecision::ref, CpuPrecision::bf16}) {
    for (bool fault : {false, true}) {
      CAPTURE(cpu_precision_name(p));
      CAPTURE(fault);
      CpuBackend be(p);
      LayerNumerics n = be.numerics();
      n.faults.set(static_cast<size_t>(Fault::gdn_out_fp16), fault);
      be.begin_layer(n);
      Tensor q = be.from_host(std::vector<double>(dk, 1.0), {1, 1, dk});
      Tensor k = be.from_host(std::vector<double>(dk, 0.0), {1, 1, dk});
      Tensor v = be.from_host(std::vector<double>(dv, 0.0), {1, 1, dv});
      Tensor g = be.from_host({0.0}, {1, 1}, be.compute_dtype()), beta = be.from_host({1.0}, {1, 1});
      Tensor S = be.from_host(std::vector<double>(dk * dv, 3e4), {1, dk, dv}, DType::f32);
      Tensor o = be.gdn(q, k, v, g, beta, {SeqSpan{0, 1, 5}}, {&S}, GdnAlgo::recurrent);
      const std::vector<double> ov = be.to_host_f64(o);
      for (double x : ov) {
        if (fault) CHECK(std::isinf(x));
        else CHECK(x == doctest::Approx(1.2e5).epsilon(1e-2));
      }
      const std::vector<double> y =
          be.to_host_f64(be.gated_rmsnorm(o.reshape({1, dv}), be.from_host(std::vector<double>(dv, 1.0), {1, dv}), w, 1e-6));
      for (double x : y) CHECK(std::isnan(x) == fault);
    }
  }
}

TEST_CASE("faults: gdn-read-before-decay is the same function in the chunked and the recurrent algebra") {
  // The chunked form takes the fault as read keys k_i e^{-g_i} (src/cpu/gdn.cpp); it must agree
  // with the token-by-token recurrence to fp32 round-off, and differ from the clean rule.
  CpuBackend be(CpuPrecision::ref);
  const int64_t T = 150, nk = 2, nv = 4, dk = 16, dv = 8;  // three chunks, the last partial
  std::vector<double> qv(T * nk * dk), kv(T * nk * dk), vv(T * nv * dv), gv(T * nv), bv(T * nv);
  for (size_t i = 0; i < qv.size(); ++i) qv[i] = std::sin(0.7 * double(i) + 0.3), kv[i] = std::cos(0.53 * double(i));
  for (size_t i = 0; i < vv.size(); ++i) vv[i] = std::sin(0.19 * double(i));
  for (size_t i = 0; i < gv.size(); ++i) gv[i] = -0.02 - 0.3 * (0.5 + 0.5 * std::sin(double(i)));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.2 + 0.6 * (0.5 + 0.5 * std::cos(double(i)));
  Tensor q = be.l2norm(be.from_host(qv, {T, nk, dk}), 1e-6, 0.25), k = be.l2norm(be.from_host(kv, {T, nk, dk}), 1e-6, 1.0);
  Tensor v = be.from_host(vv, {T, nv, dv}), g = be.from_host(gv, {T, nv}), b = be.from_host(bv, {T, nv});
  auto run = [&](bool fault, GdnAlgo algo) {
    LayerNumerics n = be.numerics();
    n.faults.set(static_cast<size_t>(Fault::gdn_read_before_decay), fault);
    be.begin_layer(n);
    Tensor S = be.zeros({nv, dk, dv}, DType::f32);
    std::vector<double> o = be.to_host_f64(be.gdn(q, k, v, g, b, {SeqSpan{0, T, 0}}, {&S}, algo));
    const std::vector<double> s = be.to_host_f64(S);
    o.insert(o.end(), s.begin(), s.end());
    return o;
  };
  const std::vector<double> fc = run(true, GdnAlgo::chunked), fr = run(true, GdnAlgo::recurrent),
                            cc = run(false, GdnAlgo::chunked);
  CHECK(rel_l2(fc, fr) <= tol::kFp32Reorder);
  CHECK(rel_l2(fc, cc) > tol::kFaultVisible);
}

TEST_CASE("faults: kv-off-by-one and conv-window-stuck act on decode steps only") {
  const auto& dir = synth_model("tiny-qwen35");
  const std::vector<int32_t> ids = test_ids(20, 1024, 22);
  ToggledModel clean(dir, ""), kv(dir, "fault=kv-off-by-one@3"), conv(dir, "fault=conv-window-stuck@1");
  RunTrace c = run_traced(clean, ids, 2), k = run_traced(kv, ids, 2), w = run_traced(conv, ids, 2);
  // prefill: nothing changes
  for (const auto& [name, v] : c.t)
    if (name.rfind("p:", 0) == 0) {
      CHECK(k.t.at(name) == v);
      CHECK(w.t.at(name) == v);
    }
  // kv-off-by-one: the decode rows sit one position late, row 20 is still zero after step 0
  const KvCache& kc = k.state.kv[3];
  CHECK(kc.len == 22);
  const int64_t row = kc.k.numel() / kc.k.shape[0];
  const std::vector<double> keys = kv.be->to_host_f64(kc.k.slice0(0, 23));
  const std::vector<double>& k20 = k.t.at("d0:attn_k-3");  // the key of position 20 ...
  CHECK(std::vector<double>(keys.begin() + 21 * row, keys.begin() + 22 * row) == k20);  // ... stored at 21
  // conv-window-stuck: the window still holds the prefill's last rows
  const std::vector<double>& qkv = w.t.at("p:gdn_qkv-1");
  const int64_t C = conv.cfg.d_conv(), K = conv.cfg.conv_kernel;
  const std::vector<double> win = conv.be->to_host_f64(w.state.gdn[1].conv);
  CHECK(win == std::vector<double>(qkv.end() - (K - 1) * C, qkv.end()));
}
