// Invariants of the CPU reference engine (issue 4, "Invariant tests"; spec model.md §9):
// chunked GDN == recurrent (outputs and final state), prefill == prefill + decode steps (and a
// continued prefill, and a batch of sequences), Qwen3-Next fused layout == Qwen3.5 split layout,
// r = 3 head mapping, RoPE identities, MoE renormalisation, the MTP head against spec §6 computed
// independently here, state snapshots, and the Trace (names, observer, replacement).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "engine_test_util.h"
#include "model/synth.h"
#include "tolerances.h"

using namespace degen;
using test::random_ids;
using namespace degen::test;

namespace {

// A synthetic preset written to a temp folder and loaded.
struct SynthModel {
  TempDir dir{"eng"};
  std::unique_ptr<LoadedModel> m;
  explicit SynthModel(const std::string& preset, CpuPrecision p = CpuPrecision::ref, GdnAlgo a = GdnAlgo::chunked) {
    const SynthPreset& sp = find_synth_preset(preset);
    synth_checkpoint(sp.config, sp.options, dir.path());
    m = std::make_unique<LoadedModel>(dir.path(), p, a);
  }
  LoadedModel* operator->() { return m.get(); }
};

std::vector<double> normal(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Random GDN core inputs scaled like the real ones: unit q/k (q scaled d_k^-1/2), decays spanning
// slow (α ≈ 0.999) to fast, β in (0, 1).
struct GdnIn {
  Tensor q, k, v, g, beta;
};
GdnIn gdn_inputs(CpuBackend& be, int64_t T, int64_t nk, int64_t nv, int64_t dk, int64_t dv, uint32_t seed) {
  GdnIn in;
  in.q = be.l2norm(be.from_host(normal(T * nk * dk, seed), {T, nk, dk}), 1e-6, 1.0 / std::sqrt(double(dk)));
  in.k = be.l2norm(be.from_host(normal(T * nk * dk, seed + 1), {T, nk, dk}), 1e-6, 1.0);
  in.v = be.from_host(normal(T * nv * dv, seed + 2), {T, nv, dv});
  std::mt19937 rng(seed + 3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> g(T * nv), b(T * nv);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = -std::exp(std::log(1e-3) + u(rng) * (std::log(2.0) - std::log(1e-3)));  // [-2, -1e-3]
    b[i] = u(rng);
  }
  in.g = be.from_host(g, {T, nv});
  in.beta = be.from_host(b, {T, nv});
  return in;
}

struct GdnOut {
  std::vector<double> o, S;
};
GdnOut run_gdn(CpuBackend& be, const GdnIn& in, const std::vector<double>& S0, int64_t nv, int64_t dk, int64_t dv,
               GdnAlgo algo) {
  Tensor S = be.from_host(S0, {nv, dk, dv});
  const int64_t T = in.q.shape[0];
  Tensor o = be.gdn(in.q, in.k, in.v, in.g, in.beta, {SeqSpan{0, T, 0}}, {&S}, algo);
  return {be.to_host_f64(o), be.to_host_f64(S)};
}

// All logits rows of one forward over `ids` from a fresh state.
std::vector<double> prefill_logits(LoadedModel& m, const std::vector<int32_t>& ids) {
  SeqState st = m.eng->new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  return m.be->to_host_f64(m.eng->forward({SeqInput{&st, ids}}, fo).logits);
}

std::vector<double> rows_of(const std::vector<double>& v, int64_t r0, int64_t n, int64_t cols) {
  return std::vector<double>(v.begin() + r0 * cols, v.begin() + (r0 + n) * cols);
}

}  // namespace

// ---------------------------------------------------------------- GDN: chunked == recurrent

TEST_CASE("engine: chunked GDN equals recurrent GDN (outputs and final state)") {
  const int64_t nk = 2, nv = 4, dk = 16, dv = 8;
  for (CpuPrecision prec : {CpuPrecision::ref, CpuPrecision::fp64}) {
    CpuBackend be(prec);
    const double tol = prec == CpuPrecision::ref ? tol::kFp32Reorder : tol::kFp64Reorder;
    for (int64_t T : {1, 63, 64, 65, 130}) {
      for (bool init : {false, true}) {
        CAPTURE(T);
        CAPTURE(init);
        CAPTURE(cpu_precision_name(prec));
        GdnIn in = gdn_inputs(be, T, nk, nv, dk, dv, 100 + static_cast<uint32_t>(T));
        std::vector<double> S0 = init ? normal(nv * dk * dv, 7, 0.5) : std::vector<double>(nv * dk * dv, 0.0);
        GdnOut c = run_gdn(be, in, S0, nv, dk, dv, GdnAlgo::chunked);
        GdnOut r = run_gdn(be, in, S0, nv, dk, dv, GdnAlgo::recurrent);
        double eo = rel_l2(c.o, r.o), es = rel_l2(c.S, r.S);
        CHECK(eo <= tol);
        CHECK(es <= tol);
        // gdn=fla: its storage points are in the activation dtype, fp32 / fp64 here (the identity)
        GdnOut f = run_gdn(be, in, S0, nv, dk, dv, GdnAlgo::fla);
        CHECK(rel_l2(f.o, r.o) <= tol);
        CHECK(rel_l2(f.S, r.S) <= tol);
        if (T == 130 && init) MESSAGE("chunked vs recurrent, T=130 with S0 [", std::string(cpu_precision_name(prec)),
                                      "]: out ", eo, ", state ", es);
      }
    }
  }
}

TEST_CASE("engine: gdn=fla under precision=bf16 rounds its intermediates (FLA's storage points), near chunked") {
  const int64_t nk = 2, nv = 4, dk = 16, dv = 8;
  CpuBackend be(CpuPrecision::bf16);
  for (int64_t T : {1, 64, 130}) {
    CAPTURE(T);
    GdnIn in = gdn_inputs(be, T, nk, nv, dk, dv, 300 + static_cast<uint32_t>(T));
    const std::vector<double> S0 = normal(nv * dk * dv, 9, 0.5);
    GdnOut c = run_gdn(be, in, S0, nv, dk, dv, GdnAlgo::chunked);
    GdnOut f = run_gdn(be, in, S0, nv, dk, dv, GdnAlgo::fla);
    const double eo = rel_l2(f.o, c.o), es = rel_l2(f.S, c.S);
    MESSAGE("fla vs chunked at precision=bf16, T=", T, ": out ", eo, ", state ", es);
    CHECK(eo > 0);  // the storage points act (the outputs are bf16 either way: equal bits would mean none did)
    CHECK(eo * eo <= tol::kCpuNmseFlaVsChunked);
    CHECK(es * es <= tol::kCpuNmseFlaVsChunked);
  }
}

TEST_CASE("engine: GDN state carries across calls (one call == two calls)") {
  CpuBackend be;
  const int64_t nk = 2, nv = 4, dk = 16, dv = 8, T = 130, t = 70;
  GdnIn in = gdn_inputs(be, T, nk, nv, dk, dv, 5);
  for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) {
    Tensor S1 = be.zeros({nv, dk, dv}), S2 = be.zeros({nv, dk, dv});
    Tensor whole = be.gdn(in.q, in.k, in.v, in.g, in.beta, {SeqSpan{0, T, 0}}, {&S1}, algo);
    // the same rows as two sequences' spans would see them: first [0, t), then [t, T)
    Tensor a = be.gdn(in.q, in.k, in.v, in.g, in.beta, {SeqSpan{0, t, 0}}, {&S2}, algo);
    Tensor b = be.gdn(in.q, in.k, in.v, in.g, in.beta, {SeqSpan{t, T - t, t}}, {&S2}, algo);
    std::vector<double> w = be.to_host_f64(whole), va = be.to_host_f64(a), vb = be.to_host_f64(b);
    const int64_t row = nv * dv;
    CHECK(rel_l2(rows_of(va, 0, t, row), rows_of(w, 0, t, row)) <= tol::kFp32Reorder);
    CHECK(rel_l2(rows_of(vb, t, T - t, row), rows_of(w, t, T - t, row)) <= tol::kFp32Reorder);
    CHECK(rel_l2(be.to_host_f64(S2), be.to_host_f64(S1)) <= tol::kFp32Reorder);
  }
}

// ---------------------------------------------------------------- head mapping j -> j / r

TEST_CASE("engine: with r = 3, perturbing key head h changes exactly value heads 3h..3h+2") {
  CpuBackend be;
  const int64_t nk = 2, nv = 6, dk = 8, dv = 8, T = 70;
  GdnIn in = gdn_inputs(be, T, nk, nv, dk, dv, 11);
  for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) {
    std::vector<double> zero(nv * dk * dv, 0.0);
    GdnOut base = run_gdn(be, in, zero, nv, dk, dv, algo);
    for (int64_t h = 0; h < nk; ++h) {
      CAPTURE(h);
      GdnIn p = in;
      std::vector<double> q = be.to_host_f64(in.q), k = be.to_host_f64(in.k);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t a = 0; a < dk; ++a) {
          q[(t * nk + h) * dk + a] *= -1.0;
          k[(t * nk + h) * dk + (a + 1) % dk] = be.to_host_f64(in.k)[(t * nk + h) * dk + a];  // rotate key dims
        }
      p.q = be.from_host(q, in.q.shape);
      p.k = be.from_host(k, in.k.shape);
      GdnOut pert = run_gdn(be, p, zero, nv, dk, dv, algo);
      for (int64_t j = 0; j < nv; ++j) {
        double diff = 0, sdiff = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < dv; ++c)
            diff = std::max(diff, std::abs(pert.o[(t * nv + j) * dv + c] - base.o[(t * nv + j) * dv + c]));
        for (int64_t x = 0; x < dk * dv; ++x) sdiff = std::max(sdiff, std::abs(pert.S[j * dk * dv + x] - base.S[j * dk * dv + x]));
        const bool mapped = j / 3 == h;
        CAPTURE(j);
        if (mapped) {
          CHECK(diff > 1e-3);
          CHECK(sdiff > 1e-3);
        } else {
          CHECK(diff == tol::kExact);
          CHECK(sdiff == tol::kExact);
        }
      }
    }
  }
}

TEST_CASE("engine: r = 3 model: injecting a perturbed key head through the trace moves only its value heads") {
  SynthModel sm("tiny-qwen35-r3");
  LoadedModel& m = *sm.m;
  REQUIRE(m.cfg.r() == 3);
  const int64_t nv = m.cfg.n_v, nk = m.cfg.n_k, dk = m.cfg.d_k, dv = m.cfg.d_v;
  const std::vector<int32_t> ids = random_ids(20, m.cfg.vocab_size, 3);
  auto core = [&](int h) {  // gdn_core-0 with key head h of gdn_k-0 perturbed (h < 0: none)
    std::vector<double> out;
    Trace tr;
    tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
      if (ev.name == "gdn_k-0" && h >= 0) {
        std::vector<double> v = be.to_host_f64(t);
        for (int64_t r = 0; r < t.shape[0]; ++r)
          for (int64_t a = 0; a < dk; ++a) v[(r * nk + h) * dk + a] *= (a % 2 ? -1.0 : 1.0);
        t = be.from_host(v, t.shape, t.dtype);
      }
      if (ev.name == "gdn_core-0") out = be.to_host_f64(t);
    };
    SeqState st = m.eng->new_state();
    m.eng->forward({SeqInput{&st, ids}}, ForwardOptions{}, &tr);
    return out;
  };
  std::vector<double> base = core(-1);
  for (int h = 0; h < nk; ++h) {
    std::vector<double> p = core(h);
    REQUIRE(p.size() == base.size());
    for (int64_t j = 0; j < nv; ++j) {
      double diff = 0;
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t c = 0; c < dv; ++c) diff = std::max(diff, std::abs(p[(t * nv + j) * dv + c] - base[(t * nv + j) * dv + c]));
      CAPTURE(h);
      CAPTURE(j);
      if (j / 3 == h) CHECK(diff > 0);
      else CHECK(diff == tol::kExact);
    }
  }
}

// ---------------------------------------------------------------- prefill == prefill + decode

TEST_CASE("engine: prefill of T == prefill of t + T-t decode steps == prefill of t + continued prefill") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"}) {
    SUBCASE(preset) {
      for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent}) {
        SynthModel sm(preset, CpuPrecision::ref, algo);
        LoadedModel& m = *sm.m;
        const int64_t V = m.cfg.vocab_size, T = 70;
        const std::vector<int32_t> ids = random_ids(T, V, 42);
        const std::vector<double> full = prefill_logits(m, ids);
        double worst_dec = 0, worst_cont = 0;
        for (int64_t t : {1, 40, 64}) {
          CAPTURE(t);
          // (a) prefill t, then one token at a time
          SeqState st = m.eng->new_state();
          std::vector<int32_t> head(ids.begin(), ids.begin() + t);
          ForwardOptions all;
          all.logits = LogitsRows::all;
          std::vector<double> got = m.be->to_host_f64(m.eng->forward({SeqInput{&st, head}}, all).logits);
          for (int64_t p = t; p < T; ++p) {
            std::vector<double> lg = m.be->to_host_f64(m.eng->forward({SeqInput{&st, {ids[p]}}}).logits);
            got.insert(got.end(), lg.begin(), lg.end());
          }
          CHECK(st.pos == T);
          double e = rel_l2(got, full);
          CHECK(e <= tol::kFp32Reorder);
          worst_dec = std::max(worst_dec, e);
          // (b) prefill t, then the remaining T-t tokens in one continued (multi-token) call
          SeqState st2 = m.eng->new_state();
          std::vector<double> got2 = m.be->to_host_f64(m.eng->forward({SeqInput{&st2, head}}, all).logits);
          std::vector<int32_t> tail(ids.begin() + t, ids.end());
          std::vector<double> rest = m.be->to_host_f64(m.eng->forward({SeqInput{&st2, tail}}, all).logits);
          got2.insert(got2.end(), rest.begin(), rest.end());
          e = rel_l2(got2, full);
          CHECK(e <= tol::kFp32Reorder);
          worst_cont = std::max(worst_cont, e);
        }
        MESSAGE(std::string(preset), " [", std::string(gdn_algo_name(algo)), "]: prefill vs prefill+decode ", worst_dec,
                ", vs continued prefill ", worst_cont);
      }
    }
  }
}

TEST_CASE("engine: several sequences in one batch equal each run alone") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen3next"}) {
    SUBCASE(preset) {
      SynthModel sm(preset);
      LoadedModel& m = *sm.m;
      const int64_t V = m.cfg.vocab_size;
      std::vector<std::vector<int32_t>> prompts = {random_ids(70, V, 1), random_ids(33, V, 2), random_ids(1, V, 3)};
      std::vector<SeqState> states;
      for (size_t i = 0; i < prompts.size(); ++i) states.push_back(m.eng->new_state());
      std::vector<SeqInput> in;
      for (size_t i = 0; i < prompts.size(); ++i) in.push_back({&states[i], prompts[i]});
      ForwardOptions fo;
      fo.logits = LogitsRows::all;
      ForwardOutput out = m.eng->forward(in, fo);
      std::vector<double> batch = m.be->to_host_f64(out.logits);
      // then one decode step for all three together
      std::vector<int32_t> next = {5, 6, 7};
      std::vector<SeqInput> dec;
      for (size_t i = 0; i < prompts.size(); ++i) dec.push_back({&states[i], {next[i]}});
      std::vector<double> batch_dec = m.be->to_host_f64(m.eng->forward(dec).logits);
      for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        std::vector<double> alone = prefill_logits(m, prompts[i]);
        const int64_t n = static_cast<int64_t>(prompts[i].size());
        CHECK(rel_l2(rows_of(batch, out.logits_row0[i], n, V), alone) <= tol::kFp32Reorder);
        std::vector<int32_t> ext = prompts[i];
        ext.push_back(next[i]);
        std::vector<double> alone_ext = prefill_logits(m, ext);
        CHECK(rel_l2(rows_of(batch_dec, static_cast<int64_t>(i), 1, V), rows_of(alone_ext, n, 1, V)) <=
              tol::kFp32Reorder);
      }
    }
  }
}

TEST_CASE("engine: a snapshot restores the state exactly") {
  SynthModel sm("tiny-qwen35");
  LoadedModel& m = *sm.m;
  SeqState st = m.eng->new_state();
  m.eng->forward({SeqInput{&st, random_ids(20, m.cfg.vocab_size, 9)}});
  SeqState snap = m.eng->snapshot(st);
  std::vector<double> a = m.be->to_host_f64(m.eng->forward({SeqInput{&st, {17}}}).logits);
  m.eng->forward({SeqInput{&st, {18, 19}}});  // moves on
  std::vector<double> b = m.be->to_host_f64(m.eng->forward({SeqInput{&snap, {17}}}).logits);
  CHECK(a == b);
  CHECK(snap.pos == 21);
}

// ---------------------------------------------------------------- layouts

TEST_CASE("engine: Qwen3-Next fused GDN layout equals the Qwen3.5 split layout after row permutation") {
  SynthModel sm("tiny-qwen3next");
  LoadedModel& m = *sm.m;
  REQUIRE(m.w.layers[0].gdn.fused);
  // Split-layout weights made by permuting the fused rows (spec §4.7.1), bound into a second table.
  ModelWeights split = bind_weights(m.cfg, *m.ckpt);
  std::vector<std::vector<uint8_t>> owned;
  std::vector<std::unique_ptr<TensorView>> views;
  auto rows_view = [&](const TensorView& src, const std::vector<int64_t>& rows, int64_t r0, int64_t n) {
    const int64_t H = src.shape[1];
    const size_t rb = static_cast<size_t>(H) * dtype_size(src.dtype);
    owned.emplace_back(static_cast<size_t>(n) * rb);
    for (int64_t i = 0; i < n; ++i) std::memcpy(owned.back().data() + i * rb, src.data + rows[r0 + i] * rb, rb);
    auto v = std::make_unique<TensorView>(src);
    v->name = src.name + "(split)";
    v->shape = {n, H};
    v->data = owned.back().data();
    v->nbytes = owned.back().size();
    views.push_back(std::move(v));
    return views.back().get();
  };
  const std::vector<int64_t> qkvz = gdn_qkvz_rows(m.cfg), ba = gdn_ba_rows(m.cfg);
  const int64_t dconv = m.cfg.d_conv(), dval = m.cfg.d_val(), nv = m.cfg.n_v;
  owned.reserve(4 * split.layers.size());
  for (LayerWeights& lw : split.layers) {
    if (lw.kind != LayerKind::linear) continue;
    GdnWeights& g = lw.gdn;
    g.in_proj_qkv = rows_view(*g.in_proj_qkvz, qkvz, 0, dconv);
    g.in_proj_z = rows_view(*g.in_proj_qkvz, qkvz, dconv, dval);
    g.in_proj_b = rows_view(*g.in_proj_ba, ba, 0, nv);
    g.in_proj_a = rows_view(*g.in_proj_ba, ba, nv, nv);
    g.fused = false;
  }
  Engine split_eng(m.cfg, split, *m.be);
  const std::vector<int32_t> ids = random_ids(70, m.cfg.vocab_size, 4);
  std::vector<double> fused_logits = prefill_logits(m, ids);
  SeqState st = split_eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  std::vector<double> split_logits = m.be->to_host_f64(split_eng.forward({SeqInput{&st, ids}}, fo).logits);
  double e = rel_l2(split_logits, fused_logits);
  MESSAGE("fused vs split layout logits rel-L2 ", e);
  CHECK(e <= tol::kFp32Reorder);
}

// ---------------------------------------------------------------- RoPE

TEST_CASE("engine: RoPE leaves dims >= R untouched, pairs (i, i+R/2), and p then -p is the identity") {
  for (CpuPrecision prec : {CpuPrecision::ref, CpuPrecision::fp64}) {
    CpuBackend be(prec);
    const int64_t N = 5, heads = 3, D = 24;
    const int R = 6;
    const std::vector<double> x0 = normal(N * heads * D, 21);
    std::vector<int64_t> pos = {0, 1, 7, 100, 4095}, neg;
    for (int64_t p : pos) neg.push_back(-p);
    Tensor x = be.from_host(x0, {N, heads, D});
    be.rope_partial(x, pos, R, 1e7);
    std::vector<double> r = be.to_host_f64(x);
    const std::vector<double> x0r = be.to_host_f64(be.from_host(x0, {N, heads, D}));  // x0 rounded to T
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = R; d < D; ++d) CHECK(r[(n * heads + h) * D + d] == x0r[(n * heads + h) * D + d]);
    // position 0 is the identity; position 7, pair (0, 3) with ω_0 = 1: angle 7
    for (int64_t d = 0; d < heads * D; ++d) CHECK(r[d] == doctest::Approx(x0r[d]).epsilon(1e-7));
    {
      const int64_t b = 2 * heads * D;  // row n = 2, head 0
      const double c = std::cos(7.0), s = std::sin(7.0);
      CHECK(r[b + 0] == doctest::Approx(x0r[b + 0] * c - x0r[b + 3] * s).epsilon(1e-6));
      CHECK(r[b + 3] == doctest::Approx(x0r[b + 3] * c + x0r[b + 0] * s).epsilon(1e-6));
    }
    be.rope_partial(x, neg, R, 1e7);
    CHECK(rel_l2(be.to_host_f64(x), x0r) <= (prec == CpuPrecision::ref ? tol::kFp32Reorder : tol::kFp64Reorder));
  }
}

// ---------------------------------------------------------------- MoE routing

TEST_CASE("engine: MoE routing takes the top-k of the softmax over all experts and renormalises to 1") {
  CpuBackend be;
  const int64_t N = 16, E = 8;
  const int k = 3;
  Tensor logits = be.from_host(normal(N * E, 31, 2.0), {N, E});
  std::vector<double> l = be.to_host_f64(logits);
  MoeRouting plain = be.moe_route(logits, k, false), renorm = be.moe_route(logits, k, true);
  for (int64_t r = 0; r < N; ++r) {
    double mx = *std::max_element(l.begin() + r * E, l.begin() + (r + 1) * E), z = 0;
    std::vector<double> p(E);
    for (int64_t e = 0; e < E; ++e) z += (p[e] = std::exp(l[r * E + e] - mx));
    for (double& x : p) x /= z;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double sum = 0, sum_plain = 0;
    for (int i = 0; i < k; ++i) {
      CHECK(plain.experts[r * k + i] == order[i]);
      CHECK(renorm.experts[r * k + i] == order[i]);
      CHECK(plain.weights[r * k + i] == doctest::Approx(p[order[i]]).epsilon(1e-12));
      sum += renorm.weights[r * k + i];
      sum_plain += plain.weights[r * k + i];
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(sum_plain < 1.0);
  }
}

// ---------------------------------------------------------------- MTP head vs spec §6

namespace {

// Independent fp64 transcription of spec §6 for the MTP head (dense-MLP MTP layer, fresh cache).
struct SpecMtp {
  const ModelConfig& c;
  const ModelWeights& w;
  using Vec = std::vector<double>;
  Vec linear(const Vec& x, const TensorView& W) const {  // x Wᵀ
    const int64_t out = W.shape[0], in = W.shape[1];
    Vec y(out, 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += x[i] * W.at(o * in + i);
    return y;
  }
  Vec rms1w(const Vec& x, const TensorView& wt, size_t off = 0, size_t n = 0) const {  // zero-centred
    if (!n) n = x.size();
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double s = 1.0 / std::sqrt(ss / n + c.rms_norm_eps);
    Vec y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * s * (1.0 + wt.at(i));
    return y;
  }
  static double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  void rope(double* u, int64_t p) const {
    const int R = c.rotary_dim, m = R / 2;
    for (int i = 0; i < m; ++i) {
      const float inv = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(R));
      const double phi = double(float(p) * inv), cs = std::cos(phi), sn = std::sin(phi);
      const double a = u[i], b = u[i + m];
      u[i] = a * cs - b * sn;
      u[i + m] = b * cs + a * sn;
    }
  }
  // logits [n, V] for rows (hidden[i], next[i]) at positions 0..n-1
  Vec run(const Vec& hidden, const std::vector<int32_t>& next) const {
    const MtpWeights& m = w.mtp.at(0);
    const LayerWeights& lw = m.layer;
    const int64_t H = c.hidden_size, n = static_cast<int64_t>(next.size()), D = c.head_dim, nq = c.n_q, nkv = c.n_kv;
    std::vector<Vec> u(n), K(n), Vv(n), Q(n), G(n);
    for (int64_t i = 0; i < n; ++i) {
      Vec e(H);
      for (int64_t d = 0; d < H; ++d) e[d] = w.embed->at(next[i] * H + d);  // 1. shared embedding
      Vec cat = rms1w(e, *m.pre_fc_norm_embedding);                         // 2. [norm(e) ; norm(h)] W_fcᵀ
      Vec hn = rms1w(hidden, *m.pre_fc_norm_hidden, i * H, H);
      cat.insert(cat.end(), hn.begin(), hn.end());
      u[i] = linear(cat, *m.fc);
      // 3. decoder layer: gated attention
      Vec x = rms1w(u[i], *lw.input_norm);
      Vec qg = linear(x, *lw.attn.q_proj), kk = linear(x, *lw.attn.k_proj);
      Vv[i] = linear(x, *lw.attn.v_proj);
      Q[i].resize(nq * D);
      G[i].resize(nq * D);
      for (int64_t h = 0; h < nq; ++h) {
        Vec qh(qg.begin() + 2 * h * D, qg.begin() + 2 * h * D + D);
        Vec nqh = rms1w(qh, *lw.attn.q_norm);
        rope(nqh.data(), i);
        std::copy(nqh.begin(), nqh.end(), Q[i].begin() + h * D);
        std::copy(qg.begin() + 2 * h * D + D, qg.begin() + 2 * h * D + 2 * D, G[i].begin() + h * D);
      }
      K[i].resize(nkv * D);
      for (int64_t j = 0; j < nkv; ++j) {
        Vec kj = rms1w(kk, *lw.attn.k_norm, j * D, D);
        rope(kj.data(), i);
        std::copy(kj.begin(), kj.end(), K[i].begin() + j * D);
      }
    }
    Vec logits;
    for (int64_t i = 0; i < n; ++i) {
      Vec a(nq * D, 0.0);
      for (int64_t h = 0; h < nq; ++h) {
        const int64_t j = h / (nq / nkv);
        Vec s(i + 1);
        double mx = -1e300, z = 0;
        for (int64_t t = 0; t <= i; ++t) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += Q[i][h * D + e] * K[t][j * D + e];
          mx = std::max(mx, s[t] = d / std::sqrt(double(D)));
        }
        for (double& x : s) z += (x = std::exp(x - mx));
        for (int64_t t = 0; t <= i; ++t)
          for (int64_t e = 0; e < D; ++e) a[h * D + e] += s[t] / z * Vv[t][j * D + e];
        for (int64_t e = 0; e < D; ++e) a[h * D + e] *= sig(G[i][h * D + e]);
      }
      Vec o = linear(a, *lw.attn.o_proj), h1(H);
      for (int64_t d = 0; d < H; ++d) h1[d] = u[i][d] + o[d];
      Vec y = rms1w(h1, *lw.post_norm);  // dense MLP
      Vec gt = linear(y, *lw.mlp.gate), up = linear(y, *lw.mlp.up);
      for (size_t q = 0; q < gt.size(); ++q) gt[q] = gt[q] * sig(gt[q]) * up[q];
      Vec dn = linear(gt, *lw.mlp.down);
      for (int64_t d = 0; d < H; ++d) h1[d] += dn[d];
      Vec hm = rms1w(h1, *m.norm);          // 4. mtp.norm
      Vec lg = linear(hm, *w.lm_head);      // 5. shared lm_head
      logits.insert(logits.end(), lg.begin(), lg.end());
    }
    return logits;
  }
};

}  // namespace

TEST_CASE("engine: MTP head matches spec §6 computed independently, and its KV cache carries over calls") {
  for (CpuPrecision prec : {CpuPrecision::fp64, CpuPrecision::ref}) {
    SynthModel sm("tiny-qwen35", prec);
    LoadedModel& m = *sm.m;
    REQUIRE(m.eng->has_mtp());
    REQUIRE_FALSE(m.w.mtp[0].layer.moe);
    const int64_t H = m.cfg.hidden_size, n = 5;
    const std::vector<double> hidden = normal(n * H, 77);
    const std::vector<int32_t> next = random_ids(n, m.cfg.vocab_size, 78);
    const std::vector<double> want = SpecMtp{m.cfg, m.w}.run(hidden, next);
    const double tol = prec == CpuPrecision::fp64 ? tol::kFp64Reorder : tol::kFp32VsFp64;
    // all rows in one call
    SeqState st = m.eng->new_state();
    std::vector<double> got = m.be->to_host_f64(m.eng->mtp({MtpInput{&st, m.be->from_host(hidden, {n, H}), next}}));
    double e = rel_l2(got, want);
    MESSAGE("MTP vs spec §6 [", std::string(cpu_precision_name(prec)), "]: rel-L2 ", e);
    CHECK(e <= tol);
    CHECK(st.mtp_pos == n);
    // 3 rows, then 2 rows through the MTP KV cache
    SeqState s2 = m.eng->new_state();
    std::vector<double> h3(hidden.begin(), hidden.begin() + 3 * H), h2(hidden.begin() + 3 * H, hidden.end());
    std::vector<double> a = m.be->to_host_f64(
        m.eng->mtp({MtpInput{&s2, m.be->from_host(h3, {3, H}), {next.begin(), next.begin() + 3}}}));
    std::vector<double> b = m.be->to_host_f64(
        m.eng->mtp({MtpInput{&s2, m.be->from_host(h2, {2, H}), {next.begin() + 3, next.end()}}}));
    a.insert(a.end(), b.begin(), b.end());
    CHECK(rel_l2(a, want) <= tol);
  }
}

TEST_CASE("engine: MTP drafts from the target's post-norm hidden states") {
  SynthModel sm("tiny-qwen35");
  LoadedModel& m = *sm.m;
  const std::vector<int32_t> ids = random_ids(12, m.cfg.vocab_size, 5);
  SeqState st = m.eng->new_state();
  ForwardOptions fo;
  fo.keep_hidden = true;
  std::vector<double> final_norm;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.step == Step::final_norm) final_norm = be.to_host_f64(t);
  };
  ForwardOutput out = m.eng->forward({SeqInput{&st, ids}}, fo, &tr);
  CHECK(m.be->to_host_f64(out.hidden) == final_norm);
  // rows (ĥ_i, x_{i+1}) for the prompt, as engines fill the MTP cache during prefill
  Tensor h = m.be->gather_rows(out.hidden, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  Tensor d = m.eng->mtp({MtpInput{&st, h, {ids.begin() + 1, ids.end()}}});
  CHECK(d.rows() == 11);
  CHECK(d.cols() == m.cfg.vocab_size);
}

TEST_CASE("engine: the MTP head runs with a MoE MTP layer (Qwen3.5-MoE, Qwen3-Next)") {
  for (const char* preset : {"tiny-qwen35-moe", "tiny-qwen3next"}) {
    SUBCASE(preset) {
      SynthModel sm(preset);
      LoadedModel& m = *sm.m;
      REQUIRE(m.eng->has_mtp());
      CHECK(m.w.mtp[0].layer.moe);
      const int64_t H = m.cfg.hidden_size;
      SeqState st = m.eng->new_state();
      std::vector<double> d = m.be->to_host_f64(
          m.eng->mtp({MtpInput{&st, m.be->from_host(normal(4 * H, 3), {4, H}), random_ids(4, m.cfg.vocab_size, 4)}}));
      CHECK(d.size() == static_cast<size_t>(4 * m.cfg.vocab_size));
      CHECK(std::all_of(d.begin(), d.end(), [](double x) { return std::isfinite(x); }));
    }
  }
}

// ---------------------------------------------------------------- Trace

TEST_CASE("engine: trace names are unique, every layer step is offered, and an observer may replace a tensor") {
  std::set<std::string> names;
  for (const StepInfo& s : trace_steps()) CHECK(names.insert(s.name).second);
  CHECK(trace_name(Step::attn_norm, 3) == "attn_norm-3");
  CHECK(trace_name(Step::logits, -1) == "logits");

  SynthModel sm("tiny-qwen35");
  LoadedModel& m = *sm.m;
  const std::vector<int32_t> ids = random_ids(9, m.cfg.vocab_size, 8);
  std::map<std::string, int> seen;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend&) {
    seen[ev.name]++;
    CHECK(ev.seqs.size() == 1);
    if (ev.step != Step::logits) CHECK(t.shape[0] == 9);
  };
  SeqState st = m.eng->new_state();
  std::vector<double> base = m.be->to_host_f64(m.eng->forward({SeqInput{&st, ids}}, {}, &tr).logits);
  for (const char* n : {"embed", "l_in-0", "attn_norm-0", "gdn_conv-0", "gdn_core-0", "gdn_norm-0", "l_out-0",
                        "attn_q-3", "attn_core-3", "attn_gated-3", "l_out-7", "final_norm", "logits"})
    CHECK_MESSAGE(seen[n] == 1, n);
  CHECK(seen.count("attn_q-0") == 0);

  // Replace layer 5's input with layer 4's input: the output changes; with a wrong shape: InputError.
  Tensor saved;
  Trace inject;
  inject.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.name == "l_in-4") saved = be.clone(t);
    if (ev.name == "l_in-5") t = saved;
  };
  SeqState s2 = m.eng->new_state();
  std::vector<double> changed = m.be->to_host_f64(m.eng->forward({SeqInput{&s2, ids}}, {}, &inject).logits);
  CHECK(rel_l2(changed, base) > 1e-3);
  Trace bad;
  bad.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.name == "l_in-2") t = be.zeros({1, 2});
  };
  SeqState s3 = m.eng->new_state();
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&s3, ids}}, {}, &bad), InputError);
}

TEST_CASE("engine: bad input is an InputError, not a crash") {
  SynthModel sm("tiny-qwen35");
  LoadedModel& m = *sm.m;
  SeqState st = m.eng->new_state();
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&st, {}}}), InputError);
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&st, {static_cast<int32_t>(m.cfg.vocab_size)}}}), InputError);
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&st, {-1}}}), InputError);
  SeqState big = m.eng->new_state();
  big.pos = m.cfg.max_position_embeddings;
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&big, {1}}}), InputError);
  std::vector<uint8_t> short_mask(3, 0);
  ForwardOptions fo;
  fo.vocab_mask = &short_mask;
  SeqState s2 = m.eng->new_state();
  CHECK_THROWS_AS(m.eng->forward({SeqInput{&s2, {1}}}, fo), InputError);
}

TEST_CASE("engine: padding ids are masked to -inf") {
  SynthModel sm("tiny-qwen35");
  LoadedModel& m = *sm.m;
  std::vector<uint8_t> mask(static_cast<size_t>(m.cfg.vocab_size), 0);
  for (size_t i = 1000; i < mask.size(); ++i) mask[i] = 1;
  ForwardOptions fo;
  fo.vocab_mask = &mask;
  SeqState st = m.eng->new_state();
  std::vector<double> lg = m.be->to_host_f64(m.eng->forward({SeqInput{&st, {1, 2, 3}}}, fo).logits);
  for (size_t i = 0; i < lg.size(); ++i) {
    if (mask[i]) CHECK(std::isinf(lg[i]));
    else CHECK(std::isfinite(lg[i]));
  }
}
