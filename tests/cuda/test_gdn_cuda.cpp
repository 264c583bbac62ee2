// GPU: the Gated DeltaNet core on the device (issue 10) against the CPU, test-backend-ops style:
//   conv1d_causal — prefill with a carried window, decode (window update), several sequences per
//     call, window dtypes f32 and bf16, fault conv-window-stuck; the window carried across
//     prefill -> decode gives the outputs of one long prefill;
//   gdn — chunked, recurrent and fla (tensor cores), T in {1, 63, 64, 65, 127, 128, 129, 300}, with and without an
//     initial state, every state dtype (f32, bf16, f16): outputs and final states against the CPU's
//     GPU-storage emulation (cpu:bf16, the same storage points; judged) and the fp32 reference
//     (reported); chunked against recurrent and fla against chunked on the device; which kernels
//     ran (fla: its three tensor-core passes); several sequences in one call; the three
//     GDN faults (read-before-decay, head-mod with r = 3, out-fp16 with an overflowing readout, and
//     no overflow without the fault).
// Each check counts NaN/Inf first; every buffer the CUDA backend allocates carries sentinel guards
// and a poisoned body (CudaBackend::set_guard_check). Skips without a device (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "../tolerances.h"
#include "cpu/cpu_backend.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_counters.h"
#include "cuda_test_util.h"

using namespace degen;
using namespace degen::test;

namespace {

struct Backends {
  CudaBackend gpu{0};
  CpuBackend emu{CpuPrecision::bf16};
  CpuBackend ref{CpuPrecision::ref};
  Backends() { gpu.set_guard_check(true); }
  void numerics(LayerNumerics n) {
    n.layer = 0;
    gpu.begin_layer(n);
    emu.begin_layer(n);
    ref.begin_layer(n);
  }
};

// NaN/Inf first, then NMSE against the expected values (judged).
void check_values(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& ref, double limit, const std::string& shape) {
  REQUIRE(got.size() == want.size());
  const size_t bad = count_nonfinite(got);
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " non-finite values in the CUDA output");
  CHECK(count_nonfinite(want) == 0);
  const double ne = nmse(got, want), nr = ref.empty() ? NAN : nmse(got, ref);
  const bool pass = bad == 0 && ne <= limit;
  report_op(what, shape, ne, nr, bf16_exact_fraction(got, want), limit, pass);
  CHECK_MESSAGE(ne <= limit, what << " " << shape << ": NMSE " << ne << " > " << limit);
}

void check_guards(CudaBackend& gpu, const std::string& what) {
  const std::vector<std::string> bad = gpu.check_guards();
  for (const std::string& b : bad) MESSAGE(what << ": guard changed: " << b);
  CHECK_MESSAGE(bad.empty(), what << ": a kernel wrote outside its buffer");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- conv1d ----

TEST_CASE("cuda gdn: conv1d_causal prefill and decode with carried windows, several sequences, window dtypes") {
  for (DType wd : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(wd));
    for (bool stuck : {false, true}) {
      Backends b;
      LayerNumerics n;
      n.conv_dtype = wd;
      if (stuck) n.faults.set(static_cast<size_t>(Fault::conv_window_stuck));
      b.numerics(n);
      const int64_t C = 2 * 3 * 40 + 6 * 36 + 5, K = 4;  // odd channel count
      HostWeight w("conv1d.weight", {C, 1, K}, randn_bf16(size_t(C * K), 0.3, 50));
      Tensor wg[3], we[3];
      for (int s = 0; s < 3; ++s) {
        wg[s] = b.gpu.zeros({K - 1, C}, wd);
        we[s] = b.emu.zeros({K - 1, C}, wd);
      }
      // call 1: prefill A (37 rows) and B (2 rows: shorter than the window); call 2: decode A and B,
      // prefill C (70 rows); call 3: decode all three; call 4: 3, 2 and 1 rows (an MTP verify step;
      // calls 3 and 4 take the one-launch decode kernel, conv1d_fused_kernel)
      const std::vector<std::pair<std::vector<SeqSpan>, std::vector<int>>> calls = {
          {{{0, 37, 0}, {37, 2, 0}}, {0, 1}},
          {{{0, 1, 37}, {1, 1, 2}, {2, 70, 0}}, {0, 1, 2}},
          {{{0, 1, 38}, {1, 1, 3}, {2, 1, 70}}, {0, 1, 2}},
          {{{0, 3, 39}, {3, 2, 4}, {5, 1, 71}}, {0, 1, 2}}};
      uint32_t seed = 60;
      for (size_t ci = 0; ci < calls.size(); ++ci) {
        const auto& [spans, which] = calls[ci];
        int64_t N = 0;
        for (const SeqSpan& s : spans) N += s.rows;
        const std::vector<double> xv = randn_bf16(size_t(N * C), 1.0, seed++);
        std::vector<Tensor*> pg, pe;
        for (int s : which) {
          pg.push_back(&wg[s]);
          pe.push_back(&we[s]);
        }
        const Tensor xg = b.gpu.from_host(xv, {N, C}, DType::bf16);
        cuda::counters_start();
        const Tensor og = b.gpu.conv1d_causal(xg, w.view, spans, pg);
        const cuda::DeviceCounters dc = cuda::counters_read();
        cuda::counters_stop();
        if (cuda::counters_supported()) {  // decode-sized calls (3, 4) take the one-launch kernel
          int64_t max_rows = 0;
          for (const SeqSpan& sp : spans) max_rows = std::max(max_rows, sp.rows);
          const int64_t kernels = calls_named(dc, "conv1d_"), fused = calls_named(dc, "conv1d_fused_kernel");
          CHECK(kernels == (max_rows <= 8 ? 1 : 2));
          CHECK(fused == (max_rows <= 8 ? 1 : 0));
        }
        const Tensor oe = b.emu.conv1d_causal(b.emu.from_host(xv, {N, C}, DType::bf16), w.view, spans, pe);
        const std::string tag = cat("conv1d_causal[window ", dtype_name(wd), stuck ? ",fault conv-window-stuck" : "",
                                    "] call ", ci + 1);
        check_values(tag, b.gpu.to_host_f32(og), b.emu.to_host_f32(oe), {}, tol::kCudaNmseBf16, shape_str(og.shape));
        for (int s : which) {  // windows: exact (copies of bf16 rows, rounded to the window dtype)
          CHECK_MESSAGE(same_bits(b.gpu.to_host_f32(wg[s]), b.emu.to_host_f32(we[s])),
                        tag << ": window of sequence " << s << " differs from cpu:bf16");
        }
      }
      check_guards(b.gpu, "conv1d");
    }
  }
}

// Backend::gdn_inputs: conv + split with the q/k L2 norms + gates. Decode-sized calls take one
// launch (gdn_conv_inputs_kernel) and must store what the three ops store, bit for bit (outputs and
// windows); a prefill call takes the three ops. Every fault of the three ops, both window dtypes.
TEST_CASE("cuda gdn: the layer's inputs (conv, split with q/k norms, gates) in one launch equal the three ops, bit for bit") {
  const Fault faults[] = {Fault::count, Fault::conv_window_stuck, Fault::gdn_skip_l2norm, Fault::alog_no_exp};
  for (DType wd : {DType::bf16, DType::f32}) {
    for (Fault f : faults) {
      const std::string ftag = f == Fault::count ? "" : cat(",fault ", fault_name(f));
      CAPTURE(dtype_name(wd));
      CAPTURE(ftag);
      Backends b;
      LayerNumerics n;
      n.conv_dtype = wd;
      if (f != Fault::count) n.faults.set(static_cast<size_t>(f));
      b.numerics(n);
      const Backend::GdnHeads h{2, 40, 4, 24};  // dk and dv differ; r = 2
      const int64_t C = 2 * h.nk * h.dk + h.nv * h.dv, K = 4;
      HostWeight w("conv1d.weight", {C, 1, K}, randn_bf16(size_t(C * K), 0.3, 150));
      HostWeight A_log("A_log", {h.nv}, randn_bf16(size_t(h.nv), 0.5, 151), DType::f32);
      HostWeight dt_bias("dt_bias", {h.nv}, randn_bf16(size_t(h.nv), 0.5, 152));
      const double eps = 1e-6, qs = 1.0 / std::sqrt(double(h.dk));
      Tensor fused_w[2], plain_w[2], emu_w[2];
      for (int s = 0; s < 2; ++s) {
        fused_w[s] = b.gpu.zeros({K - 1, C}, wd);
        plain_w[s] = b.gpu.zeros({K - 1, C}, wd);
        emu_w[s] = b.emu.zeros({K - 1, C}, wd);
      }
      // prefill (9 and 2 rows: the three ops), decode (1 + 1), an MTP verify step (3 + 1)
      const std::vector<std::vector<SeqSpan>> calls = {
          {{0, 9, 0}, {9, 2, 0}}, {{0, 1, 9}, {1, 1, 2}}, {{0, 3, 10}, {3, 1, 3}}};
      uint32_t seed = 160;
      for (size_t ci = 0; ci < calls.size(); ++ci) {
        const std::vector<SeqSpan>& spans = calls[ci];
        const int64_t N = spans.back().row0 + spans.back().rows;
        const std::vector<double> xv = randn_bf16(size_t(N * C), 1.0, seed++);
        const std::vector<double> av = randn_bf16(size_t(N * h.nv), 1.0, seed++), bv = randn_bf16(size_t(N * h.nv), 1.0, seed++);
        const Tensor x = b.gpu.from_host(xv, {N, C}, DType::bf16);
        const Tensor ag = b.gpu.from_host(av, {N, h.nv}, DType::bf16), bg = b.gpu.from_host(bv, {N, h.nv}, DType::bf16);
        std::vector<Tensor*> fw = {&fused_w[0], &fused_w[1]}, pw = {&plain_w[0], &plain_w[1]}, ew = {&emu_w[0], &emu_w[1]};
        cuda::counters_start();
        const Backend::GdnInputs got = b.gpu.gdn_inputs(x, w.view, spans, fw, ag, bg, A_log.view, dt_bias.view, h, eps, qs);
        const cuda::DeviceCounters dc = cuda::counters_read();
        cuda::counters_stop();
        // the three ops on the same device
        const Tensor conv = b.gpu.conv1d_causal(x, w.view, spans, pw);
        const Backend::GdnQkv split = b.gpu.gdn_split_norm(conv, h.nk, h.dk, h.nv, h.dv, eps, qs);
        Tensor g, beta;
        b.gpu.gdn_gates(ag, bg, A_log.view, dt_bias.view, g, beta);
        const std::string tag = cat("gdn_inputs[window ", dtype_name(wd), ftag, "] call ", ci + 1);
        for (auto [gt, want, what] : {std::tuple<const Tensor*, const Tensor*, const char*>{&got.q, &split.q, "q"},
                                      {&got.k, &split.k, "k"}, {&got.v, &split.v, "v"}, {&got.g, &g, "g"},
                                      {&got.beta, &beta, "beta"}}) {
          REQUIRE(gt->shape == want->shape);
          CHECK_MESSAGE(same_bits(b.gpu.to_host_f32(*gt), b.gpu.to_host_f32(*want)), tag << ": " << what);
        }
        for (int s = 0; s < 2; ++s)
          CHECK_MESSAGE(same_bits(b.gpu.to_host_f32(fused_w[s]), b.gpu.to_host_f32(plain_w[s])), tag << ": window " << s);
        // against the CPU's emulation (the default composition)
        const Backend::GdnInputs e = b.emu.gdn_inputs(b.emu.from_host(xv, {N, C}, DType::bf16), w.view, spans, ew,
                                                      b.emu.from_host(av, {N, h.nv}, DType::bf16),
                                                      b.emu.from_host(bv, {N, h.nv}, DType::bf16), A_log.view,
                                                      dt_bias.view, h, eps, qs);
        check_values(tag + " q", b.gpu.to_host_f32(got.q), b.emu.to_host_f32(e.q), {}, tol::kCudaNmseBf16, shape_str(got.q.shape));
        check_values(tag + " k", b.gpu.to_host_f32(got.k), b.emu.to_host_f32(e.k), {}, tol::kCudaNmseBf16, shape_str(got.k.shape));
        check_values(tag + " v", b.gpu.to_host_f32(got.v), b.emu.to_host_f32(e.v), {}, tol::kCudaNmseBf16, shape_str(got.v.shape));
        check_values(tag + " g", b.gpu.to_host_f32(got.g), b.emu.to_host_f32(e.g), {}, tol::kCudaNmseBf16, shape_str(got.g.shape));
        check_values(tag + " beta", b.gpu.to_host_f32(got.beta), b.emu.to_host_f32(e.beta), {}, tol::kCudaNmseBf16,
                     shape_str(got.beta.shape));
        if (cuda::counters_supported()) {  // decode-sized calls: one launch (plus the sequence table's upload)
          const bool decode = ci > 0;
          CHECK_MESSAGE(dc.launches == (decode ? 1 : 4), tag);
        }
      }
      check_guards(b.gpu, "gdn_inputs");
    }
  }
}

TEST_CASE("cuda gdn: conv window carried across prefill -> decode equals one long prefill, bit for bit") {
  for (DType wd : {DType::bf16, DType::f32}) {
    Backends b;
    LayerNumerics n;
    n.conv_dtype = wd;
    b.numerics(n);
    const int64_t C = 300, K = 4, T = 53, D = 7;
    HostWeight w("conv1d.weight", {C, 1, K}, randn_bf16(size_t(C * K), 0.3, 70));
    const std::vector<double> xv = randn_bf16(size_t((T + D) * C), 1.0, 71);
    Tensor whole = b.gpu.zeros({K - 1, C}, wd), carried = b.gpu.zeros({K - 1, C}, wd);
    const Tensor xall = b.gpu.from_host(xv, {T + D, C}, DType::bf16);
    const std::vector<float> one = b.gpu.to_host_f32(b.gpu.conv1d_causal(xall, w.view, {{0, T + D, 0}}, {&whole}));
    std::vector<float> pieces = b.gpu.to_host_f32(b.gpu.conv1d_causal(xall.slice0(0, T), w.view, {{0, T, 0}}, {&carried}));
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<float> r =
          b.gpu.to_host_f32(b.gpu.conv1d_causal(xall.slice0(T + d, 1), w.view, {{0, 1, T + d}}, {&carried}));
      pieces.insert(pieces.end(), r.begin(), r.end());
    }
    CHECK(count_nonfinite(one) == 0);
    CHECK_MESSAGE(same_bits(one, pieces), "window " << dtype_name(wd) << ": prefill + decode != one prefill");
    CHECK(same_bits(b.gpu.to_host_f32(whole), b.gpu.to_host_f32(carried)));
    report_op(cat("conv1d carry prefill->decode [window ", dtype_name(wd), "]"), cat("[", T, "+", D, ", ", C, "]"), 0, 0,
              1.0, tol::kExact, same_bits(one, pieces));
    check_guards(b.gpu, "conv1d carry");
  }
}

// ---- gated delta rule ----

struct GdnDims {
  int64_t nk, nv, dk, dv;
};

// Inputs scaled like the layer's: q, k L2-normalised per head (q also by d_k^-1/2), v ~ N(0, 1)
// (times v_scale), g = -exp(N(-2.5, 1)) (decays 0.7..1), beta = sigmoid(N(0, 1)); all bf16-exact
// (g fp32).
struct GdnInputs {
  std::vector<double> q, k, v, g, beta;
};
GdnInputs gdn_inputs(const GdnDims& d, int64_t N, uint32_t seed, double v_scale = 1.0) {
  GdnInputs in;
  auto heads = [&](uint32_t s, double scale) {
    std::vector<double> x = randn_bf16(size_t(N * d.nk * d.dk), 1.0, s);
    for (int64_t h = 0; h < N * d.nk; ++h) {
      double ss = 0;
      for (int64_t a = 0; a < d.dk; ++a) ss += x[h * d.dk + a] * x[h * d.dk + a];
      for (int64_t a = 0; a < d.dk; ++a)
        x[h * d.dk + a] = round_bf16(static_cast<float>(x[h * d.dk + a] / std::sqrt(ss + 1e-6) * scale));
    }
    return x;
  };
  in.q = heads(seed, 1.0 / std::sqrt(double(d.dk)));
  in.k = heads(seed + 1, 1.0);
  in.v = randn_bf16(size_t(N * d.nv * d.dv), v_scale, seed + 2);
  in.g = randn_bf16(size_t(N * d.nv), 1.0, seed + 3);
  for (double& x : in.g) x = -std::exp(x - 2.5);
  in.beta = randn_bf16(size_t(N * d.nv), 1.0, seed + 4);
  for (double& x : in.beta) x = round_bf16(static_cast<float>(1.0 / (1.0 + std::exp(-x))));
  return in;
}

struct GdnRun {
  std::vector<float> o;
  std::vector<std::vector<float>> S;
};

// One gdn call on `be` over `spans` from initial states `S0` (host values, one per span; stored
// in `sdt`), returning o and the final states.
GdnRun run_gdn(Backend& be, const GdnDims& d, const GdnInputs& in, int64_t N, const std::vector<SeqSpan>& spans,
               const std::vector<std::vector<double>>& S0, DType sdt, GdnAlgo algo) {
  const DType act = be.act_dtype();
  const Tensor q = be.from_host(in.q, {N, d.nk, d.dk}, act), k = be.from_host(in.k, {N, d.nk, d.dk}, act);
  const Tensor v = be.from_host(in.v, {N, d.nv, d.dv}, act), beta = be.from_host(in.beta, {N, d.nv}, act);
  const Tensor g = be.from_host(in.g, {N, d.nv}, act == DType::bf16 ? DType::f32 : act);
  std::vector<Tensor> states;
  std::vector<Tensor*> ptrs;
  for (const auto& s : S0) states.push_back(be.from_host(s, {d.nv, d.dk, d.dv}, sdt));
  for (Tensor& t : states) ptrs.push_back(&t);
  GdnRun r;
  r.o = be.to_host_f32(be.gdn(q, k, v, g, beta, spans, ptrs, algo));
  for (const Tensor& t : states) r.S.push_back(be.to_host_f32(t));
  return r;
}

// An initial state as a previous prefill would leave it: entries ~ N(0, 0.3²) (bf16-exact, so
// every state dtype holds the same values up to fp16 range, which it is far from).
std::vector<double> initial_state(const GdnDims& d, uint32_t seed) {
  return randn_bf16(size_t(d.nv * d.dk * d.dv), 0.3, seed);
}

std::vector<float> flat(const std::vector<std::vector<float>>& v) {
  std::vector<float> out;
  for (const auto& x : v) out.insert(out.end(), x.begin(), x.end());
  return out;
}


void gdn_case(const GdnDims& d, const std::vector<SeqSpan>& spans, bool with_state, DType sdt, LayerNumerics n,
              const std::string& label, uint32_t seed, double v_scale = 1.0) {
  Backends b;
  n.ssm_dtype = sdt;
  b.numerics(n);
  int64_t N = 0;
  for (const SeqSpan& s : spans) N = std::max(N, s.row0 + s.rows);
  const GdnInputs in = gdn_inputs(d, N, seed, v_scale);
  std::vector<std::vector<double>> S0;
  for (size_t s = 0; s < spans.size(); ++s)
    S0.push_back(with_state ? initial_state(d, seed + 10 + uint32_t(s)) : std::vector<double>(size_t(d.nv * d.dk * d.dv), 0.0));
  const std::string shape = cat("N=", N, " nk=", d.nk, " nv=", d.nv, " dk=", d.dk, " dv=", d.dv);
  GdnRun gpu_runs[3];
  for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) {
    // which kernels ran (the emulator counts per kernel name): gdn=fla's three tensor-core passes
    // once each where a span has rows, the other forms never
    if (cuda::counters_supported()) cuda::counters_start();
    const GdnRun g = run_gdn(b.gpu, d, in, N, spans, S0, sdt, algo);
    if (cuda::counters_supported()) {
      const cuda::DeviceCounters counts = cuda::counters_read();
      cuda::counters_stop();
      bool rows = false;
      for (const SeqSpan& sp : spans) rows |= sp.rows > 0;
      const int64_t want = algo == GdnAlgo::fla && rows ? 1 : 0;
      for (const char* k : {"gdn_fla_prep_kernel", "gdn_fla_state_kernel", "gdn_fla_out_kernel"})
        CHECK_MESSAGE(calls_named(counts, k) == want, gdn_algo_name(algo) << ": " << calls_named(counts, k) << " calls of " << k);
    }
    const GdnRun e = run_gdn(b.emu, d, in, N, spans, S0, sdt, algo);
    // the fp32 reference keeps an fp32 state unless the dtype under test is narrower
    const GdnRun r = run_gdn(b.ref, d, in, N, spans, S0, sdt, algo);
    const std::string tag = cat("gdn[", gdn_algo_name(algo), ",S ", dtype_name(sdt), with_state ? ",S0" : "", label, "]");
    // fla: its storage points are checked by the tighter bound (tests/tolerances.h)
    check_values(tag + " o", g.o, e.o, r.o, algo == GdnAlgo::fla ? tol::kCudaNmseGdnFla : tol::kCudaNmseBf16, shape);
    if (algo == GdnAlgo::fla)
      CHECK_MESSAGE(bf16_exact_fraction(g.o, e.o) >= tol::kGdnFlaBf16Exact,
                    tag << ": " << bf16_exact_fraction(g.o, e.o) << " of the outputs equal to the twin's in bf16");
    check_values(tag + " final S", flat(g.S), flat(e.S), flat(r.S), tol::kCudaNmseGdnState, shape);
    gpu_runs[static_cast<int>(algo)] = g;
  }
  // fla against chunked on the device: the same algebra, fla with bf16 intermediates; its output
  // within the bf16-output bound of the fp32 one (a wrong product or layout is far outside)
  {
    const std::string tag = cat("gdn[fla vs chunked,S ", dtype_name(sdt), with_state ? ",S0" : "", label, "]");
    check_values(tag + " o", gpu_runs[2].o, gpu_runs[0].o, {}, tol::kCudaNmseBf16, shape);
  }
  // chunked against recurrent on the device: the same function up to rounding; with an fp32 state
  // within the bf16-output bound, narrower states round at other points (per chunk vs per token)
  if (sdt == DType::f32) {
    const std::string tag = cat("gdn[chunked vs recurrent,S0=", with_state, label, "]");
    check_values(tag + " o", gpu_runs[0].o, gpu_runs[1].o, {}, tol::kCudaNmseBf16, shape);
    check_values(tag + " final S", flat(gpu_runs[0].S), flat(gpu_runs[1].S), {}, tol::kCudaNmseGdnState, shape);
  }
  check_guards(b.gpu, "gdn");
}

}  // namespace

TEST_CASE("cuda gdn: chunked and recurrent against the CPU at chunk boundaries, with and without a state, every ssm dtype") {
  const GdnDims d{2, 6, 48, 40};  // r = 3, head sizes not multiples of 32
  for (DType sdt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t T : {1, 63, 64, 65, 127, 128, 129, 300})
      for (bool st : {false, true}) {
        CAPTURE(T);
        CAPTURE(dtype_name(sdt));
        CAPTURE(st);
        gdn_case(d, {{0, T, st ? 17 : 0}}, st, sdt, LayerNumerics{}, cat(",T=", T), 100 + uint32_t(T));
      }
}

TEST_CASE("cuda gdn: the 27B head shape (d_k = d_v = 128, r = 3), odd head dims and several sequences in one call") {
  gdn_case(GdnDims{2, 6, 128, 128}, {{0, 129, 0}}, true, DType::f32, LayerNumerics{}, ",27B heads", 200);
  // head dims not multiples of 8: gdn=fla stages its tiles element by element (16-byte loads otherwise)
  gdn_case(GdnDims{1, 2, 20, 12}, {{0, 70, 0}}, true, DType::f32, LayerNumerics{}, ",d 20/12", 205);
  // a batch: fresh prefill, continued prefill, decode rows, an empty span
  const std::vector<SeqSpan> spans = {{0, 65, 0}, {65, 1, 40}, {66, 130, 12}, {196, 0, 5}, {196, 3, 7}};
  for (DType sdt : {DType::f32, DType::bf16}) gdn_case(GdnDims{2, 4, 64, 96}, spans, true, sdt, LayerNumerics{}, ",batch", 210);
}

TEST_CASE("cuda gdn: faults gdn-read-before-decay, gdn-head-mod, gdn-out-fp16 as the CPU has them") {
  const GdnDims d{2, 6, 48, 40};
  for (Fault f : {Fault::gdn_read_before_decay, Fault::gdn_head_mod}) {
    LayerNumerics n;
    n.faults.set(static_cast<size_t>(f));
    gdn_case(d, {{0, 129, 0}, {129, 1, 9}}, true, DType::f32, n, cat(",fault ", fault_name(f)), 300);
  }
  // gdn-out-fp16: a readout beyond 65504 is inf with the fault, at the CPU's places, and stays
  // finite (bf16) without it. note: |o| ~ |v| β (q·k) / sqrt(d_k) summed over a few decayed tokens,
  // about |v| / 30 here: v ~ 3e5 stayed below 65504 (found on the CUDA emulator), v ~ 1e7 does not.
  for (bool fault : {false, true}) {
    Backends b;
    LayerNumerics n;
    if (fault) n.faults.set(static_cast<size_t>(Fault::gdn_out_fp16));
    b.numerics(n);
    const int64_t N = 70;
    const GdnInputs in = gdn_inputs(d, N, 310, 1e7);
    const std::vector<std::vector<double>> S0 = {std::vector<double>(size_t(d.nv * d.dk * d.dv), 0.0)};
    for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) {
      const GdnRun g = run_gdn(b.gpu, d, in, N, {{0, N, 0}}, S0, DType::f32, algo);
      const GdnRun e = run_gdn(b.emu, d, in, N, {{0, N, 0}}, S0, DType::f32, algo);
      size_t inf_g = 0, inf_e = 0, where_differs = 0;
      std::vector<float> fg, fe;
      for (size_t i = 0; i < g.o.size(); ++i) {
        inf_g += std::isinf(g.o[i]);
        inf_e += std::isinf(e.o[i]);
        where_differs += std::isinf(g.o[i]) != std::isinf(e.o[i]);
        if (std::isfinite(g.o[i]) && std::isfinite(e.o[i])) {
          fg.push_back(g.o[i]);
          fe.push_back(e.o[i]);
        }
      }
      CHECK(count_nonfinite(g.o) == inf_g);  // no NaN either way
      if (fault) {
        CHECK_MESSAGE(inf_e > 0, "the test's readout should overflow fp16");
        CHECK_MESSAGE(where_differs == 0, gdn_algo_name(algo) << ": inf at other places than the CPU's (" << inf_g << " vs "
                                                          << inf_e << ")");
      } else {
        CHECK_MESSAGE(inf_g == 0, gdn_algo_name(algo) << ": the readout must stay out of fp16 overflow without the fault");
      }
      const double ne = nmse(fg, fe);
      report_op(cat("gdn[", gdn_algo_name(algo), fault ? ",fault gdn-out-fp16" : ",|o|>65504 no fault", "] o"),
                cat("N=", N, " inf ", inf_g), ne, NAN, bf16_exact_fraction(fg, fe), tol::kCudaNmseBf16,
                ne <= tol::kCudaNmseBf16 && where_differs == 0);
      CHECK(ne <= tol::kCudaNmseBf16);
    }
    check_guards(b.gpu, "gdn out-fp16");
  }
}

TEST_CASE("cuda gdn: the backend runs the GDN core on the device (no CPU fallback) and binds its device to a thread") {
  CudaBackend gpu(0);
  CHECK(gpu.name().find("fallback") == std::string::npos);
  CHECK(gpu.name().rfind("cuda:", 0) == 0);
  std::string err;
  std::thread th([&] {
    try {
      gpu.bind_thread();
      int dev = -1;
      if (cudaGetDevice(&dev) != cudaSuccess || dev != gpu.context()->device()) err = "wrong device current";
      const Tensor t = gpu.zeros({3, 5}, DType::bf16);
      if (gpu.to_host_f32(t).size() != 15) err = "transfer";
    } catch (const std::exception& e) {
      err = e.what();
    }
  });
  th.join();
  CHECK_MESSAGE(err.empty(), err);
}

TEST_CASE("cuda gdn: the GPU reference (fp32 activations and state) against the CPU reference, chunked and recurrent") {
  CudaBackend gpu(0, GemmKind::cublas, false, /*reference=*/true);
  gpu.set_guard_check(true);
  CpuBackend ref(CpuPrecision::ref);
  LayerNumerics n;
  n.layer = 0;
  n.ssm_dtype = DType::f32;
  n.conv_dtype = DType::f32;
  n.kv_dtype = DType::f32;
  gpu.begin_layer(n);
  ref.begin_layer(n);
  const GdnDims d{2, 6, 48, 40};
  for (int64_t T : {1, 65, 129}) {
    const std::vector<SeqSpan> spans = {{0, T, 17}, {T, 7, 0}};
    const int64_t N = T + 7;
    const GdnInputs in = gdn_inputs(d, N, 500 + uint32_t(T));
    const std::vector<std::vector<double>> S0 = {initial_state(d, 600), std::vector<double>(size_t(d.nv * d.dk * d.dv), 0.0)};
    for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::recurrent, GdnAlgo::fla}) {
      const GdnRun g = run_gdn(gpu, d, in, N, spans, S0, DType::f32, algo);
      const GdnRun r = run_gdn(ref, d, in, N, spans, S0, DType::f32, algo);
      const std::string tag = cat("gdn[reference,", gdn_algo_name(algo), ",T=", T, "]");
      check_values(tag + " o", g.o, r.o, r.o, tol::kCudaNmseRef, cat("N=", N));
      check_values(tag + " final S", flat(g.S), flat(r.S), flat(r.S), tol::kCudaNmseRef, cat("N=", N));
    }
  }
  check_guards(gpu, "gdn reference");
}
