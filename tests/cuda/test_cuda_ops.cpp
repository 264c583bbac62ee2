// GPU: every CudaBackend op against CpuBackend (test-backend-ops style). Inputs are seeded, scaled
// like real activations and bf16-exact, so the three backends see the same values:
//   cpu:bf16 — the GPU-storage emulation (the same rounding points): the NMSE limit of
//              tests/tolerances.h (CUDA section) applies to this comparison;
//   cpu:ref  — the fp32 reference: its NMSE is reported, not judged (bf16 storage costs ~1e-6).
// Each check counts NaN/Inf first, then NMSE; odd shapes (not multiples of 32) throughout; every
// buffer the CUDA backend allocates carries sentinel guards (CudaBackend::set_guard_check) and a
// poisoned body, so out-of-bounds writes and unwritten elements fail the test. Faults of the
// catalogue that live in these ops are checked the same way (both backends with the fault on).
// Skips without a device (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "../tolerances.h"
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_counters.h"
#include "cuda/op_cases.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "cuda_test_util.h"

using namespace degen;
using namespace degen::test;

namespace {

// The backend under test and its two CPU references, with the same numerics.
struct Trio {
  CudaBackend gpu{0};
  CpuBackend emu{CpuPrecision::bf16};
  CpuBackend ref{CpuPrecision::ref};
  Trio() { gpu.set_guard_check(true); numerics(LayerNumerics{}); }
  void numerics(LayerNumerics n) {
    n.layer = 0;
    n.ssm_dtype = DType::f32;
    n.conv_dtype = DType::bf16;
    if (n.kv_dtype == DType::f32) n.kv_dtype = DType::bf16;
    gpu.begin_layer(n);
    emu.begin_layer(n);
    LayerNumerics r = n;  // the reference keeps its own fp32 storage
    r.conv_dtype = DType::f32;
    r.kv_dtype = DType::f32;
    ref.begin_layer(r);
  }
  // The same values as a tensor of each backend's activation dtype.
  struct Inputs { Tensor g, e, r; };
  Inputs in(const std::vector<double>& v, std::vector<int64_t> shape) {
    return {gpu.from_host(v, shape, DType::bf16), emu.from_host(v, shape, DType::bf16), ref.from_host(v, shape, DType::f32)};
  }
};

LayerNumerics with_fault(Fault f) {
  LayerNumerics n;
  n.faults.set(static_cast<size_t>(f));
  return n;
}

std::string shape_of(const Tensor& t) { return shape_str(t.shape); }

// NaN/Inf first, then NMSE against the emulation (judged) and the reference (reported).
void check_op(const std::string& op, Trio& t, const Tensor& g, const Tensor& e, const Tensor& r, double limit) {
  const std::vector<float> gv = t.gpu.to_host_f32(g), ev = t.emu.to_host_f32(e), rv = t.ref.to_host_f32(r);
  REQUIRE(gv.size() == ev.size());
  const size_t bad = count_nonfinite(gv);
  CHECK_MESSAGE(bad == 0, op << ": " << bad << " non-finite values in the CUDA output " << shape_of(g));
  CHECK(count_nonfinite(ev) == 0);
  const double ne = nmse(gv, ev), nr = nmse(gv, rv), ex = bf16_exact_fraction(gv, ev);
  const bool pass = bad == 0 && ne <= limit;
  report_op(op, shape_of(g), ne, nr, ex, limit, pass);
  CHECK_MESSAGE(ne <= limit, op << " " << shape_of(g) << ": NMSE vs cpu:bf16 " << ne << " > " << limit);
}

void check_guards(Trio& t, const std::string& op) {
  const std::vector<std::string> bad = t.gpu.check_guards();
  for (const std::string& b : bad) MESSAGE(op << ": guard changed: " << b);
  CHECK_MESSAGE(bad.empty(), op << ": a kernel wrote outside its buffer");
}

// Exact equality of two float vectors (layout ops).
void check_exact(const std::string& op, Trio& t, const Tensor& g, const Tensor& e) {
  const std::vector<float> gv = t.gpu.to_host_f32(g), ev = t.emu.to_host_f32(e);
  REQUIRE(gv.size() == ev.size());
  size_t diff = 0;
  for (size_t i = 0; i < gv.size(); ++i) diff += std::memcmp(&gv[i], &ev[i], 4) != 0;
  report_op(op, shape_of(g), diff ? 1.0 : 0.0, diff ? 1.0 : 0.0, 1.0 - double(diff) / std::max<size_t>(1, gv.size()),
            tol::kExact, diff == 0);
  CHECK_MESSAGE(diff == 0, op << ": " << diff << " elements differ from cpu:bf16");
}

}  // namespace

TEST_CASE("cuda ops: memory, transfers and layout ops equal the CPU bit for bit") {
  Trio t;
  const std::vector<double> v = randn_bf16(37 * 45, 1.0, 1);
  auto x = t.in(v, {37, 45});
  check_exact("from_host/to_host", t, x.g, x.e);
  check_exact("clone", t, t.gpu.clone(x.g), t.emu.clone(x.e));
  check_exact("slice_cols", t, t.gpu.slice_cols(x.g, 7, 29), t.emu.slice_cols(x.e, 7, 29));
  const std::vector<int64_t> cols = {44, 0, 3, 3, 17, 31, 8};
  check_exact("gather_cols", t, t.gpu.gather_cols(x.g, cols), t.emu.gather_cols(x.e, cols));
  auto y = t.in(randn_bf16(37 * 13, 1.0, 2), {37, 13});
  check_exact("concat_cols", t, t.gpu.concat_cols(x.g, y.g), t.emu.concat_cols(x.e, y.e));
  const std::vector<int64_t> rows = {36, 0, 5, 5, 19};
  check_exact("gather_rows", t, t.gpu.gather_rows(x.g, rows), t.emu.gather_rows(x.e, rows));
  check_exact("concat_rows", t, t.gpu.concat_rows({x.g.slice0(3, 5), x.g, x.g.slice0(36, 1)}),
              t.emu.concat_rows({x.e.slice0(3, 5), x.e, x.e.slice0(36, 1)}));
  // other dtypes travel unchanged
  const Tensor f = t.gpu.from_host(v, {37, 45}, DType::f32);
  const std::vector<float> fv = t.gpu.to_host_f32(t.gpu.slice_cols(f, 1, 40));
  CHECK(fv[0] == static_cast<float>(v[1]));
  check_guards(t, "layout");
}

TEST_CASE("cuda ops: elementwise (embed, add, sigmoid gate, SwiGLU, logits mask)") {
  Trio t;
  SUBCASE("embed") {
    HostWeight table("embed_tokens.weight", {257, 200}, randn_bf16(257 * 200, 0.02, 3));
    std::vector<int32_t> ids = {0, 256, 5, 5, 100, 17, 3, 250, 1, 99, 42};
    check_op("embed", t, t.gpu.embed(table.view, ids), t.emu.embed(table.view, ids), t.ref.embed(table.view, ids),
             tol::kCudaNmseBf16);
    CHECK_THROWS_AS(t.gpu.embed(table.view, {257}), InputError);
  }
  SUBCASE("add") {
    auto a = t.in(randn_bf16(37 * 200, 3.0, 4), {37, 200});
    auto b = t.in(randn_bf16(37 * 200, 0.5, 5), {37, 200});
    check_op("add", t, t.gpu.add(a.g, b.g), t.emu.add(a.e, b.e), t.ref.add(a.r, b.r), tol::kCudaNmseBf16);
  }
  SUBCASE("sigmoid_mul") {
    auto x = t.in(randn_bf16(37 * 200, 1.0, 6), {37, 200});
    auto g = t.in(randn_bf16(37 * 200, 2.0, 7), {37, 200});
    check_op("sigmoid_mul", t, t.gpu.sigmoid_mul(x.g, g.g), t.emu.sigmoid_mul(x.e, g.e), t.ref.sigmoid_mul(x.r, g.r),
             tol::kCudaNmseBf16);
    auto s = t.in(randn_bf16(37, 2.0, 8), {37, 1});
    check_op("sigmoid_mul[broadcast]", t, t.gpu.sigmoid_mul(x.g, s.g), t.emu.sigmoid_mul(x.e, s.e),
             t.ref.sigmoid_mul(x.r, s.r), tol::kCudaNmseBf16);
  }
  SUBCASE("swiglu") {
    auto g = t.in(randn_bf16(37 * 333, 2.0, 9), {37, 333});
    auto u = t.in(randn_bf16(37 * 333, 1.0, 10), {37, 333});
    check_op("swiglu", t, t.gpu.swiglu(g.g, u.g), t.emu.swiglu(g.e, u.e), t.ref.swiglu(g.r, u.r), tol::kCudaNmseBf16);
  }
  SUBCASE("mask_logits") {
    const int64_t V = 1000;
    std::vector<uint8_t> mask(V, 0);
    for (int64_t i = 900; i < V; ++i) mask[i] = 1;
    mask[3] = 1;
    auto l = t.in(randn_bf16(3 * V, 4.0, 11), {3, V});
    Tensor g = l.g;
    t.gpu.mask_logits(g, mask);
    t.emu.mask_logits(l.e, mask);
    const std::vector<float> gv = t.gpu.to_host_f32(g), ev = t.emu.to_host_f32(l.e);
    size_t diff = 0, masked = 0;
    for (size_t i = 0; i < gv.size(); ++i) {
      diff += std::memcmp(&gv[i], &ev[i], 4) != 0;
      masked += std::isinf(gv[i]) && gv[i] < 0;
    }
    CHECK(diff == 0);
    CHECK(masked == 3 * 101);
    report_op("mask_logits", "[3, 1000]", 0, 0, 1.0 - double(diff) / gv.size(), tol::kExact, diff == 0 && masked == 303);
    CHECK_THROWS_AS(t.gpu.mask_logits(g, std::vector<uint8_t>(V - 1, 0)), InputError);
  }
  check_guards(t, "elementwise");
}

TEST_CASE("cuda ops: RMSNorm (zero-centred, plain), gated RMSNorm, L2 norm, with their faults") {
  Trio t;
  for (auto [R, C] : {std::pair<int64_t, int64_t>{37, 200}, {7, 5120}, {33, 129}}) {
    HostWeight w("norm.weight", {C}, randn_bf16(size_t(C), 0.05, 12));
    auto x = t.in(randn_bf16(size_t(R * C), 2.0, 13), {R, C});
    const std::string sh = cat("[", R, ", ", C, "]");
    for (NormKind k : {NormKind::zero_centred, NormKind::plain, NormKind::shifted_twice})  // (2+w: norm-double-plus-one)
      check_op(cat("rmsnorm[", k == NormKind::zero_centred ? "1+w" : k == NormKind::plain ? "w" : "2+w", "] ", sh), t,
               t.gpu.rmsnorm(x.g, w.view, 1e-6, k),
               t.emu.rmsnorm(x.e, w.view, 1e-6, k), t.ref.rmsnorm(x.r, w.view, 1e-6, k), tol::kCudaNmseBf16);
  }
  // gated norm per value head (d_v = 96), weight around 1; and the fault gdn-norm-plus-one
  HostWeight gw("linear_attn.norm.weight", {96}, [] {
    std::vector<double> v = randn_bf16(96, 0.05, 14);
    for (double& x : v) x += 1.0;
    return v;
  }());
  auto o = t.in(randn_bf16(111 * 96, 0.3, 15), {111, 96});
  auto z = t.in(randn_bf16(111 * 96, 1.5, 16), {111, 96});
  check_op("gated_rmsnorm", t, t.gpu.gated_rmsnorm(o.g, z.g, gw.view, 1e-6), t.emu.gated_rmsnorm(o.e, z.e, gw.view, 1e-6),
           t.ref.gated_rmsnorm(o.r, z.r, gw.view, 1e-6), tol::kCudaNmseBf16);
  const Tensor clean = t.gpu.gated_rmsnorm(o.g, z.g, gw.view, 1e-6);
  t.numerics(with_fault(Fault::gdn_norm_plus_one));
  const Tensor faulty = t.gpu.gated_rmsnorm(o.g, z.g, gw.view, 1e-6);
  check_op("gated_rmsnorm[fault gdn-norm-plus-one]", t, faulty, t.emu.gated_rmsnorm(o.e, z.e, gw.view, 1e-6),
           t.ref.gated_rmsnorm(o.r, z.r, gw.view, 1e-6), tol::kCudaNmseBf16);
  CHECK(nmse(t.gpu.to_host_f32(faulty), t.gpu.to_host_f32(clean)) > 0.1);  // the fault changes the output
  // L2 norm of q/k heads (d_k = 96, scale d_k^-1/2), and the fault gdn-skip-l2norm
  t.numerics(LayerNumerics{});
  auto q = t.in(randn_bf16(37 * 3 * 96, 1.0, 17), {37, 3, 96});
  const double sc = 1.0 / std::sqrt(96.0);
  check_op("l2norm", t, t.gpu.l2norm(q.g, 1e-6, sc), t.emu.l2norm(q.e, 1e-6, sc), t.ref.l2norm(q.r, 1e-6, sc),
           tol::kCudaNmseBf16);
  t.numerics(with_fault(Fault::gdn_skip_l2norm));
  check_op("l2norm[fault gdn-skip-l2norm]", t, t.gpu.l2norm(q.g, 1e-6, sc), t.emu.l2norm(q.e, 1e-6, sc),
           t.ref.l2norm(q.r, 1e-6, sc), tol::kCudaNmseBf16);
  check_guards(t, "norms");
}

TEST_CASE("cuda ops: matmul (the matrix-vector kernel of gemm=auto, cuBLAS and the simple tiled kernel)") {
  for (GemmKind gk : {GemmKind::automatic, GemmKind::cublas, GemmKind::simple}) {
    Trio t;
    CudaBackend gpu(0, gk);
    gpu.set_guard_check(true);
    const char* name = gk == GemmKind::automatic ? "matmul[auto]" : gk == GemmKind::cublas ? "matmul[cublas]" : "matmul[simple]";
    // gemm=auto: N <= 8 rows go to the matrix-vector kernel (16-byte loads when `in` is a multiple of
    // 8, element by element otherwise: in 203), more to cuBLAS
    for (auto [N, in, out] : {std::tuple<int64_t, int64_t, int64_t>{37, 200, 333}, {1, 1000, 515}, {17, 1000, 515},
                              {64, 256, 64}, {2, 5120, 96}, {8, 1000, 515}, {5, 203, 77}, {3, 8, 9}, {7, 1032, 33}}) {
      HostWeight w("w", {out, in}, randn_bf16(size_t(out * in), 1.0 / std::sqrt(double(in)), 18));
      const std::vector<double> xv = randn_bf16(size_t(N * in), 1.0, 19);
      const Tensor xg = gpu.from_host(xv, {N, in}, DType::bf16);
      gpu.matmul(xg, w.view);  // the weight's upload, outside the count
      cuda::counters_start();
      const Tensor g = gpu.matmul(xg, w.view);
      const cuda::DeviceCounters dc = cuda::counters_read();
      cuda::counters_stop();
      if (cuda::counters_supported()) {  // the emulator: which kernel ran
        const bool gemv = gk == GemmKind::automatic && N <= cuda::kGemvMaxRows;
        const std::string want = gemv ? cat("gemv_bf16_kernel<R, ", in % 8 == 0 ? "true" : "false", ">")
                                 : gk == GemmKind::simple ? "matmul_simple_kernel<X, W, Y>" : "cublasGemmEx";
        std::vector<cuda::CallTraffic> ran;  // set_guard_check's memsets of the output's guard aside
        std::string names;
        for (const auto& c : dc.by_name)
          if (c.name != "cudaMemset") { ran.push_back(c); names += c.name + "; "; }
        REQUIRE_MESSAGE(ran.size() == 1, names);
        CHECK_MESSAGE(ran[0].name == want, name << " N " << N << " in " << in << ": ran " << names);
        CHECK(ran[0].calls == 1);
        // every weight byte read once, whatever the kernel (the count's page granularity aside)
        CHECK(ran[0].bytes_read >= out * in * 2);
      }
      const Tensor e = t.emu.matmul(t.emu.from_host(xv, {N, in}, DType::bf16), w.view);
      const Tensor r = t.ref.matmul(t.ref.from_host(xv, {N, in}, DType::f32), w.view);
      const std::vector<float> gv = gpu.to_host_f32(g), ev = t.emu.to_host_f32(e), rv = t.ref.to_host_f32(r);
      CHECK(count_nonfinite(gv) == 0);
      const double ne = nmse(gv, ev);
      report_op(name, shape_str(g.shape), ne, nmse(gv, rv), bf16_exact_fraction(gv, ev), tol::kCudaNmseBf16,
                ne <= tol::kCudaNmseBf16);
      CHECK_MESSAGE(ne <= tol::kCudaNmseBf16, name << " " << shape_str(g.shape) << ": NMSE " << ne);
    }
    // an f32 weight is rounded to bf16 on upload (the GPU path holds every matrix in bf16)
    HostWeight wf("w32", {21, 40}, randn_bf16(21 * 40, 0.1, 20), DType::f32);
    const std::vector<double> xv = randn_bf16(3 * 40, 1.0, 21);
    check_op(cat(name, " f32 weight"), t, gpu.matmul(gpu.from_host(xv, {3, 40}, DType::bf16), wf.view),
             t.emu.matmul(t.emu.from_host(xv, {3, 40}, DType::bf16), wf.view),
             t.ref.matmul(t.ref.from_host(xv, {3, 40}, DType::f32), wf.view), tol::kCudaNmseBf16);
    const std::vector<std::string> bad = gpu.check_guards();
    CHECK_MESSAGE(bad.empty(), name << ": a kernel wrote outside its buffer");
  }
}

TEST_CASE("cuda ops: partial rotate-half RoPE, and the fault rope-interleaved") {
  for (bool fault : {false, true}) {
    Trio t;
    if (fault) t.numerics(with_fault(Fault::rope_interleaved));
    for (auto [N, H, D, R] : {std::tuple<int64_t, int64_t, int64_t, int>{37, 5, 64, 16}, {3, 24, 256, 64}}) {
      std::vector<int64_t> pos(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) pos[i] = i * 977 % 131071;  // up to large angles
      const std::vector<double> v = randn_bf16(size_t(N * H * D), 1.0, 22);
      auto x = t.in(v, {N, H, D});
      t.gpu.rope_partial(x.g, pos, R, 1e7);
      t.emu.rope_partial(x.e, pos, R, 1e7);
      t.ref.rope_partial(x.r, pos, R, 1e7);
      check_op(cat("rope_partial", fault ? "[fault rope-interleaved]" : "", " R=", R), t, x.g, x.e, x.r,
               tol::kCudaNmseBf16);
    }
    check_guards(t, "rope");
  }
}

namespace {

// One attention scenario run identically on every backend: call 1 prefills sequences B (20 rows)
// and C (50 rows); call 2 mixes a fresh prefill A (37 rows), a continued prefill B (5 rows at 20)
// and a decode row C (at 50); call 3 decodes B and C once more.
void attention_case(AttnAlgo algo, DType kv, int n_q, int n_kv, int D, bool off_by_one, bool long_ctx = false,
                    int tc_rows_cap = 0) {
  Trio t;
  t.gpu.set_flash_tc_rows_cap(tc_rows_cap);
  LayerNumerics n;
  n.attn = algo;
  n.kv_dtype = kv;
  if (off_by_one) n.faults.set(static_cast<size_t>(Fault::kv_off_by_one));
  t.numerics(n);
  KvCache cg[4], ce[4], cr[4];
  uint32_t seed = 100;
  auto run = [&](const std::vector<SeqSpan>& spans, const std::vector<int>& which, const char* label) {
    int64_t N = 0;
    for (const SeqSpan& s : spans) N += s.rows;
    // q/k post-norm-and-RoPE scale (~1 per element, scores of a few units), v ~ 1
    auto q = t.in(randn_bf16(size_t(N * n_q * D), 1.0, seed++), {N, n_q, D});
    auto k = t.in(randn_bf16(size_t(N * n_kv * D), 1.0, seed++), {N, n_kv, D});
    auto v = t.in(randn_bf16(size_t(N * n_kv * D), 1.0, seed++), {N, n_kv, D});
    std::vector<KvCache*> pg, pe, pr;
    for (int w : which) {
      pg.push_back(&cg[w]);
      pe.push_back(&ce[w]);
      pr.push_back(&cr[w]);
    }
    // which kernels ran (the emulator counts per kernel name): a multi-row sequence of flash (or of
    // splitkv's and grouped's prefill) runs on tensor cores where the head_dim allows, every other row not
    if (cuda::counters_supported()) cuda::counters_start();
    const Tensor g = t.gpu.attention(q.g, k.g, v.g, spans, pg);
    const cuda::DeviceCounters counts = cuda::counters_read();
    cuda::counters_stop();
    const Tensor e = t.emu.attention(q.e, k.e, v.e, spans, pe);
    const Tensor r = t.ref.attention(q.r, k.r, v.r, spans, pr);
    const std::string what = cat("attention[", attn_algo_name(algo), ",kv=", dtype_name(kv),
                                 off_by_one ? ",fault kv-off-by-one" : "", "] ", label, " D=", D,
                                 tc_rows_cap ? cat(" (tensor-core blocks of ", tc_rows_cap, " rows)") : std::string());
    check_op(what, t, g, e, r, tol::kCudaNmseBf16);
    if (cuda::counters_supported()) {
      bool multi_row = false;
      for (const SeqSpan& sp : spans) multi_row |= sp.rows > 1;
      const int64_t tc = calls_named(counts, "attention_flash_tc_kernel");
      const bool want_tc = algo != AttnAlgo::naive && multi_row && D % 16 == 0;  // every D here fits 227 KiB
      CHECK_MESSAGE(tc == (want_tc ? 1 : 0), what << ": " << tc << " tensor-core flash launches");
      // grouped: its one-row sequences in one launch, a row cut in parts merged inside it
      bool one_row = false;
      for (const SeqSpan& sp : spans) one_row |= sp.rows == 1;
      const int64_t grp = calls_named(counts, "attention_grouped");
      CHECK_MESSAGE(grp == (algo == AttnAlgo::grouped && one_row ? 1 : 0), what << ": " << grp << " grouped launches");
    }
  };
  run({{0, 20, 0}, {20, 50, 0}}, {1, 2}, "prefill");
  run({{0, 37, 0}, {37, 5, 20}, {42, 1, 50}}, {0, 1, 2}, "mixed");
  run({{0, 1, 25}, {1, 1, 51}}, {1, 2}, "decode");
  if (long_ctx) {  // a fourth sequence D to 300 keys (prefill), then decode rows at 300 and 301
    run({{0, 300, 0}}, {3}, "prefill to 300");
    run({{0, 1, 300}, {1, 1, 52}}, {3, 2}, "decode at 300");
    run({{0, 1, 301}}, {3}, "decode at 301");
  }
  for (int s = 0; s < 4; ++s) {  // the caches themselves (every row, also one written past len by the fault)
    CHECK(cg[s].len == ce[s].len);
    if (cg[s].k.empty()) continue;
    const int64_t rows = std::min(cg[s].capacity(), ce[s].capacity());
    const std::vector<float> gk = t.gpu.to_host_f32(cg[s].k.slice0(0, rows)), ek = t.emu.to_host_f32(ce[s].k.slice0(0, rows));
    size_t diff = 0;
    for (size_t i = 0; i < gk.size(); ++i) diff += std::memcmp(&gk[i], &ek[i], 4) != 0;
    CHECK_MESSAGE(diff == 0, "KV cache of sequence " << s << ": " << diff << " elements differ from cpu:bf16");
  }
  check_guards(t, "attention");
}

}  // namespace

TEST_CASE("cuda ops: the tensor-core flash kernel's rows per block follow the device's shared memory") {
  const size_t hopper = 227 * 1024, ampere = 99 * 1024;  // sharedMemPerBlockOptin of sm_90 and sm_86
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 256, hopper) == 64);
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 256, ampere) == 16);  // the user's A6000s
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::f8_e4m3, 128, ampere) == 32);
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 512, hopper) == 16);
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 256, hopper, 32) == 32);
  for (int rows : {16, 32, 64})  // the choice fits, and the next larger block would not
    CHECK(cuda::attention_flash_tc_smem(256, rows) <= (rows == 16 ? ampere : hopper));
  CHECK(cuda::attention_flash_tc_smem(256, 32) > ampere);
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 72, hopper) == 0);   // D % 16 != 0
  CHECK(cuda::attention_flash_tc_rows(DType::f32, DType::bf16, 256, hopper) == 0);   // precision=ref
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::f32, 256, hopper) == 0);   // an fp32 cache
  CHECK(cuda::attention_flash_tc_rows(DType::bf16, DType::bf16, 256, 32 * 1024) == 0);  // no block fits
}

TEST_CASE("cuda ops: attention naive / flash (prefill on tensor cores) / splitkv / grouped, KV cache bf16 and fp8, fault kv-off-by-one") {
  for (AttnAlgo a : {AttnAlgo::naive, AttnAlgo::flash, AttnAlgo::splitkv})
    for (DType kv : {DType::bf16, DType::f8_e4m3}) {
      attention_case(a, kv, 6, 2, 64, false);
      attention_case(a, kv, 6, 3, 80, false);
    }
  attention_case(AttnAlgo::naive, DType::bf16, 24, 4, 256, false);  // the 27B's head layout
  // flash's prefill on tensor cores: the 27B's head layout to 300 keys (5 blocks of 64 rows, 5 tiles
  // of 64 keys), fp8 at D=128, and D=72 (not a multiple of 16: the one-block-per-row kernel)
  attention_case(AttnAlgo::flash, DType::bf16, 24, 4, 256, false, true);
  attention_case(AttnAlgo::flash, DType::f8_e4m3, 8, 2, 128, false, true);
  attention_case(AttnAlgo::flash, DType::bf16, 6, 2, 72, false);
  // the blocks of 32 and 16 rows that GPUs with less shared memory get (16 at D=256 on Ampere)
  attention_case(AttnAlgo::flash, DType::bf16, 24, 4, 256, false, true, 16);
  attention_case(AttnAlgo::flash, DType::f8_e4m3, 6, 2, 64, false, true, 32);
  attention_case(AttnAlgo::naive, DType::bf16, 6, 2, 64, true);
  attention_case(AttnAlgo::splitkv, DType::bf16, 6, 2, 64, true);
  // grouped: a group of 6 heads (one block), 3, 1 (n_q = n_kv) and 12 (two blocks per KV head: 8 + 4);
  // decode rows of 301 and 302 keys: at two KV heads both sides cut them into a part of 256 keys and
  // one of the rest (the floor of a part), so the merge launch runs, next to a row of one part; at
  // four KV heads the emulator's 2 SMs want one part and the CPU twin's 132 two (a fp32 difference)
  for (DType kv : {DType::bf16, DType::f8_e4m3}) {
    attention_case(AttnAlgo::grouped, kv, 6, 2, 64, false, true);
    attention_case(AttnAlgo::grouped, kv, 6, 3, 80, false);
  }
  attention_case(AttnAlgo::grouped, DType::bf16, 24, 4, 256, false, true);  // the 27B's head layout
  attention_case(AttnAlgo::grouped, DType::bf16, 4, 4, 64, false);
  attention_case(AttnAlgo::grouped, DType::bf16, 24, 2, 64, true, true);
}

TEST_CASE("cuda ops: MoE routing (fp32 softmax over all experts, top-k, renormalisation) and scatter-add") {
  Trio t;
  for (bool renorm : {true, false})
    for (auto [R, E, k] : {std::tuple<int64_t, int, int>{37, 11, 3}, {5, 512, 10}, {64, 8, 2}}) {
      auto l = t.in(randn_bf16(size_t(R * E), 2.0, 30), {R, E});
      const MoeRouting g = t.gpu.moe_route(l.g, k, renorm), e = t.emu.moe_route(l.e, k, renorm);
      size_t id_diff = 0;
      double num = 0, den = 0;
      for (size_t i = 0; i < g.experts.size(); ++i) {
        id_diff += g.experts[i] != e.experts[i];
        num += (g.weights[i] - e.weights[i]) * (g.weights[i] - e.weights[i]);
        den += e.weights[i] * e.weights[i];
      }
      const double ne = num / den;
      report_op(cat("moe_route[k=", k, renorm ? ",renorm" : ",no-renorm", "]"), cat("[", R, ", ", E, "]"), ne, ne,
                1.0 - double(id_diff) / g.experts.size(), tol::kCudaNmseF32, id_diff == 0 && ne <= tol::kCudaNmseF32);
      CHECK_MESSAGE(id_diff == 0, "moe_route: " << id_diff << " expert ids differ from cpu:bf16");
      CHECK(ne <= tol::kCudaNmseF32);
    }
  // scatter-add of weighted expert outputs: unique rows (parallel) and repeated rows (in order)
  for (bool unique : {true, false}) {
    auto out = t.in(randn_bf16(37 * 200, 1.0, 31), {37, 200});
    auto y = t.in(randn_bf16(20 * 200, 1.0, 32), {20, 200});
    std::vector<int64_t> rows(20);
    for (int i = 0; i < 20; ++i) rows[i] = unique ? (i * 7) % 37 : (i * 3) % 11;
    std::vector<double> w(20);
    for (int i = 0; i < 20; ++i) w[i] = static_cast<float>(0.05 + 0.04 * i);
    t.gpu.scatter_add_rows(out.g, y.g, rows, w);
    t.emu.scatter_add_rows(out.e, y.e, rows, w);
    t.ref.scatter_add_rows(out.r, y.r, rows, w);
    check_op(unique ? "scatter_add_rows[unique]" : "scatter_add_rows[repeated]", t, out.g, out.e, out.r, tol::kCudaNmseBf16);
  }
  check_guards(t, "moe");
}

// The routed experts with the routing on the device (decode sizes under gemm=auto) against what the
// engine does with the routing on the host (Engine::routed_on_host: moe_route, then per expert in
// increasing id gather_rows, matmul_swiglu, matmul, scatter_add_rows into zeros): bit for bit on the
// same device, within the bf16 tolerance of the CPU emulation doing the same; three launches, no
// copy to the host, no host synchronisation.
TEST_CASE("cuda ops: the routed MoE experts on the device equal the host-routed experts bit for bit") {
  // what the engine does with the routing on the host, on backend be (the registry's reference for
  // moe_experts_on_device, src/cuda/op_cases.h)
  const auto on_host = cuda::moe_routed_on_host;
  // (N, H, I, E, k, on the device): one token; a batch; 8 rows of 8 experts of 64; Qwen3-Next's
  // 512 experts, top-10; every expert (k = E); 9 rows and an I that is no multiple of 8 (the host path)
  struct Shape { int64_t N, H, I; int E, k; bool device; };
  for (Shape sh : {Shape{1, 64, 32, 8, 2, true}, Shape{3, 128, 48, 16, 4, true}, Shape{8, 64, 40, 64, 8, true},
                   Shape{2, 64, 16, 512, 10, true}, Shape{4, 32, 16, 4, 4, true}, Shape{9, 64, 32, 8, 2, false},
                   Shape{2, 64, 20, 8, 2, false}}) {
    for (bool renorm : {true, false}) {
      Trio t;  // a backend per shape: its expert tables are the weights' of this iteration only
      const std::string tag = cat("N ", sh.N, " H ", sh.H, " I ", sh.I, " E ", sh.E, " k ", sh.k, renorm ? "" : " no-renorm");
      std::vector<std::unique_ptr<HostWeight>> ws;
      std::vector<MlpWeights> ex(size_t(sh.E));
      for (int e = 0; e < sh.E; ++e) {
        const uint64_t seed = 200 + 3 * uint64_t(e);
        ws.push_back(std::make_unique<HostWeight>(cat("gate", e), std::vector<int64_t>{sh.I, sh.H},
                                                  randn_bf16(size_t(sh.I * sh.H), 1.0 / std::sqrt(double(sh.H)), seed)));
        ex[size_t(e)].gate = &ws.back()->view;
        ws.push_back(std::make_unique<HostWeight>(cat("up", e), std::vector<int64_t>{sh.I, sh.H},
                                                  randn_bf16(size_t(sh.I * sh.H), 1.0 / std::sqrt(double(sh.H)), seed + 1)));
        ex[size_t(e)].up = &ws.back()->view;
        ws.push_back(std::make_unique<HostWeight>(cat("down", e), std::vector<int64_t>{sh.H, sh.I},
                                                  randn_bf16(size_t(sh.H * sh.I), 1.0 / std::sqrt(double(sh.I)), seed + 2)));
        ex[size_t(e)].down = &ws.back()->view;
      }
      const auto x = t.in(randn_bf16(size_t(sh.N * sh.H), 1.0, 190), {sh.N, sh.H});
      const auto l = t.in(randn_bf16(size_t(sh.N * sh.E), 2.0, 191), {sh.N, int64_t(sh.E)});
      const Tensor want = on_host(t.gpu, x.g, l.g, ex, sh.k, renorm);  // (uploads every expert it uses)
      cuda::counters_start();
      std::optional<Tensor> got = t.gpu.moe_experts_on_device(x.g, l.g, ex, sh.k, renorm);
      const cuda::DeviceCounters dc = cuda::counters_read();
      cuda::counters_stop();
      CHECK_MESSAGE(got.has_value() == sh.device, tag);
      CHECK_MESSAGE(!t.emu.moe_experts_on_device(x.e, l.e, ex, sh.k, renorm).has_value(), "the CPU routes on the host");
      if (!got) continue;
      const std::vector<float> a = t.gpu.to_host_f32(*got), b = t.gpu.to_host_f32(want);
      CHECK_MESSAGE(got->shape == want.shape, tag);
      CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, "moe_experts_on_device " << tag);
      CHECK(t.gpu.to_host_f32(want) != std::vector<float>(a.size(), 0.0f));  // the sums are not trivially equal
      check_op(cat("moe_experts_on_device[k=", sh.k, renorm ? "" : ",no-renorm", "]"), t, *got,
               on_host(t.emu, x.e, l.e, ex, sh.k, renorm), on_host(t.ref, x.r, l.r, ex, sh.k, renorm),
               tol::kCudaNmseBf16);
      if (cuda::counters_supported()) {  // the first call built the table (uploads): a second one counts
        cuda::counters_start();
        (void)t.gpu.moe_experts_on_device(x.g, l.g, ex, sh.k, renorm);
        const cuda::DeviceCounters d2 = cuda::counters_read();
        cuda::counters_stop();
        CHECK_MESSAGE(d2.launches == 3, tag);
        CHECK_MESSAGE(d2.copies_d2h + d2.copies_h2d == 0, tag);
        CHECK_MESSAGE(d2.host_syncs == 0, tag);
        CHECK(dc.launches == 3);
      }
    }
  }
}

TEST_CASE("cuda ops: GDN gates on the device (A_log fp32 / bf16, fault alog-no-exp)") {
  for (DType ad : {DType::f32, DType::bf16})
    for (bool fault : {false, true}) {
      Trio t;
      if (fault) t.numerics(with_fault(Fault::alog_no_exp));
      std::vector<double> A = randn_bf16(6, 0.5, 40), dt = randn_bf16(6, 0.5, 41);
      for (double& x : A) x = round_bf16(static_cast<float>(std::log(1.0 + std::abs(x) * 8)));
      HostWeight Aw("A_log", {6}, A, ad), dtw("dt_bias", {6}, dt, ad);
      auto a = t.in(randn_bf16(37 * 6, 2.0, 42), {37, 6});
      auto b = t.in(randn_bf16(37 * 6, 2.0, 43), {37, 6});
      Tensor gg, gb, eg, eb, rg, rb;
      t.gpu.gdn_gates(a.g, b.g, Aw.view, dtw.view, gg, gb);
      t.emu.gdn_gates(a.e, b.e, Aw.view, dtw.view, eg, eb);
      t.ref.gdn_gates(a.r, b.r, Aw.view, dtw.view, rg, rb);
      CHECK(gg.dtype == DType::f32);
      const std::string tag = cat("[A_log ", dtype_name(ad), fault ? ",fault alog-no-exp" : "", "]");
      check_op("gdn_gates g" + tag, t, gg, eg, rg, tol::kCudaNmseF32);
      check_op("gdn_gates beta" + tag, t, gb, eb, rb, tol::kCudaNmseBf16);
      check_guards(t, "gdn_gates");
    }
}

// conv1d_causal and gdn: tests/cuda/test_gdn_cuda.cpp.

// The fused ops of gemm=auto's decode path: each equals the ops it replaces on the same device bit
// for bit (the same sums in the same order, the same storage points), and the CPU emulation of
// those ops within the bf16 tolerance; the emulator also shows that each ran as one launch.
TEST_CASE("cuda ops: fused decode ops (projections of one input, gate/up with SwiGLU, residual add + RMSNorm)") {
  Trio t;
  const auto bits_equal = [&](const Tensor& a, const Tensor& b) {
    const std::vector<float> x = t.gpu.to_host_f32(a), y = t.gpu.to_host_f32(b);
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  const auto launches = [](const cuda::DeviceCounters& d) {
    int64_t n = 0;
    for (const auto& c : d.by_name)
      if (c.name != "cudaMemset") n += c.calls;
    return n;
  };
  for (auto [N, in] : {std::pair<int64_t, int64_t>{1, 256}, {3, 1000}, {8, 264}, {5, 203}, {9, 256}}) {
    const int64_t outs[4] = {96, 40, 7, 7};
    std::vector<std::unique_ptr<HostWeight>> ws;
    for (int j = 0; j < 4; ++j)
      ws.push_back(std::make_unique<HostWeight>(cat("w", j), std::vector<int64_t>{outs[j], in},
                                                randn_bf16(size_t(outs[j] * in), 1.0 / std::sqrt(double(in)), 30 + j)));
    const TensorView* const views[4] = {&ws[0]->view, &ws[1]->view, &ws[2]->view, &ws[3]->view};
    const auto x = t.in(randn_bf16(size_t(N * in), 1.0, 40), {N, in});
    for (const TensorView* v : views) t.gpu.matmul(x.g, *v);  // uploads, outside the counts
    cuda::counters_start();
    const std::vector<Tensor> many = t.gpu.matmul_many(x.g, views);
    const cuda::DeviceCounters dm = cuda::counters_read();
    cuda::counters_stop();
    const std::vector<Tensor> many_e = t.emu.matmul_many(x.e, views), many_r = t.ref.matmul_many(x.r, views);
    REQUIRE(many.size() == 4);
    for (int j = 0; j < 4; ++j) {
      CHECK_MESSAGE(bits_equal(many[size_t(j)], t.gpu.matmul(x.g, *views[j])), "matmul_many N " << N << " in " << in
                                                                                                 << " product " << j);
      check_op(cat("matmul_many[", j, "]"), t, many[size_t(j)], many_e[size_t(j)], many_r[size_t(j)], tol::kCudaNmseBf16);
    }
    // gate/up + SwiGLU
    HostWeight up("up", {96, in}, randn_bf16(size_t(96 * in), 1.0 / std::sqrt(double(in)), 50));
    t.gpu.matmul(x.g, up.view);
    cuda::counters_start();
    const Tensor sw = t.gpu.matmul_swiglu(x.g, *views[0], up.view);
    const cuda::DeviceCounters ds = cuda::counters_read();
    cuda::counters_stop();
    CHECK_MESSAGE(bits_equal(sw, t.gpu.swiglu(t.gpu.matmul(x.g, *views[0]), t.gpu.matmul(x.g, up.view))),
                  "matmul_swiglu N " << N << " in " << in);
    check_op("matmul_swiglu", t, sw, t.emu.matmul_swiglu(x.e, *views[0], up.view),
             t.ref.matmul_swiglu(x.r, *views[0], up.view), tol::kCudaNmseBf16);
    if (cuda::counters_supported()) {  // one launch each where the fused kernels apply (N <= 8)
      CHECK(launches(dm) == (N <= cuda::kGemvMaxRows ? 1 : 4));
      CHECK(launches(ds) == (N <= cuda::kGemvMaxRows ? 1 : 3));
    }
  }
  // residual add + RMSNorm, both norm kinds, bf16 and f32 weights
  for (NormKind kind : {NormKind::zero_centred, NormKind::plain}) {
    for (DType wd : {DType::bf16, DType::f32}) {
      const int64_t R = 5, C = 300;
      HostWeight w("norm", {C}, randn_bf16(size_t(C), 0.1, 60), wd);
      const auto a = t.in(randn_bf16(size_t(R * C), 1.0, 61), {R, C});
      const auto b = t.in(randn_bf16(size_t(R * C), 1.0, 62), {R, C});
      t.gpu.rmsnorm(a.g, w.view, 1e-6, kind);
      cuda::counters_start();
      auto [u, y] = t.gpu.add_rmsnorm(a.g, b.g, w.view, 1e-6, kind);
      const cuda::DeviceCounters d = cuda::counters_read();
      cuda::counters_stop();
      const Tensor u2 = t.gpu.add(a.g, b.g);
      CHECK(bits_equal(u, u2));
      CHECK(bits_equal(y, t.gpu.rmsnorm(u2, w.view, 1e-6, kind)));
      auto [ue, ye] = t.emu.add_rmsnorm(a.e, b.e, w.view, 1e-6, kind);
      auto [ur, yr] = t.ref.add_rmsnorm(a.r, b.r, w.view, 1e-6, kind);
      check_op("add_rmsnorm sum", t, u, ue, ur, tol::kCudaNmseBf16);
      check_op("add_rmsnorm norm", t, y, ye, yr, tol::kCudaNmseBf16);
      if (cuda::counters_supported()) CHECK(launches(d) == 1);
    }
  }
  check_guards(t, "fused decode ops");
}

TEST_CASE("cuda ops: the norm in the products' prologue and the residual add in the product's epilogue") {
  Trio t;
  const auto bits_equal = [&](const Tensor& a, const Tensor& b) {
    const std::vector<float> x = t.gpu.to_host_f32(a), y = t.gpu.to_host_f32(b);
    return a.shape == b.shape && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  // (N, in): row lengths under row_threads' 256 (the prologue's extra threads add zeros), odd (the
  // element-by-element kernel), the shared-memory limit exactly (8 x 3072 x 2 bytes = 48 KiB) and
  // past it, and 9 rows (cuBLAS): the last two go to the composition.
  struct Shape { int64_t N, in; bool fused; };
  for (Shape sh : {Shape{1, 128, true}, Shape{2, 200, true}, Shape{3, 1000, true}, Shape{5, 203, true},
                   Shape{8, 3072, true}, Shape{7, 4000, false}, Shape{9, 256, false}}) {
    const int64_t N = sh.N, in = sh.in;
    const int64_t outs[3] = {48, 24, 5};
    std::vector<std::unique_ptr<HostWeight>> ws;
    for (int j = 0; j < 3; ++j)
      ws.push_back(std::make_unique<HostWeight>(cat("w", j), std::vector<int64_t>{outs[j], in},
                                                randn_bf16(size_t(outs[j] * in), 1.0 / std::sqrt(double(in)), 90 + j)));
    HostWeight up("up", {48, in}, randn_bf16(size_t(48 * in), 1.0 / std::sqrt(double(in)), 93));
    HostWeight down("down", {in, 48}, randn_bf16(size_t(48 * in), 1.0 / std::sqrt(48.0), 94));
    const TensorView* const views[3] = {&ws[0]->view, &ws[1]->view, &ws[2]->view};
    const auto h = t.in(randn_bf16(size_t(N * in), 1.0, 95), {N, in});
    for (NormKind kind : {NormKind::zero_centred, NormKind::plain}) {
      for (DType wd : {DType::bf16, DType::f32}) {  // an fp32 checkpoint weight: bf16 on the device for both
        HostWeight nw("norm", {in}, randn_bf16(size_t(in), 0.1, 96), wd);
        const Backend::PreNorm pre{&nw.view, 1e-6, kind};
        const std::string tag = cat("N ", N, " in ", in, kind == NormKind::plain ? " plain" : "", " ", dtype_name(wd));
        const Tensor x = t.gpu.rmsnorm(h.g, nw.view, 1e-6, kind);
        const std::vector<Tensor> plain = t.gpu.matmul_many(x, views);  // (uploads, outside the counts)
        const Tensor plain_sw = t.gpu.matmul_swiglu(x, *views[0], up.view);
        cuda::counters_start();
        const std::vector<Tensor> many = t.gpu.norm_matmul_many(h.g, pre, views);
        const cuda::DeviceCounters dm = cuda::counters_read();
        cuda::counters_stop();
        cuda::counters_start();
        const Tensor sw = t.gpu.norm_matmul_swiglu(h.g, pre, *views[0], up.view);
        const cuda::DeviceCounters ds = cuda::counters_read();
        cuda::counters_stop();
        REQUIRE(many.size() == 3);
        const std::vector<Tensor> many_e = t.emu.norm_matmul_many(h.e, pre, views);
        const std::vector<Tensor> many_r = t.ref.norm_matmul_many(h.r, pre, views);
        for (int j = 0; j < 3; ++j) {
          CHECK_MESSAGE(bits_equal(many[size_t(j)], plain[size_t(j)]), "norm_matmul_many " << tag << " product " << j);
          check_op(cat("norm_matmul_many[", j, "]"), t, many[size_t(j)], many_e[size_t(j)], many_r[size_t(j)],
                   tol::kCudaNmseBf16);
        }
        CHECK_MESSAGE(bits_equal(sw, plain_sw), "norm_matmul_swiglu " << tag);
        check_op("norm_matmul_swiglu", t, sw, t.emu.norm_matmul_swiglu(h.e, pre, *views[0], up.view),
                 t.ref.norm_matmul_swiglu(h.r, pre, *views[0], up.view), tol::kCudaNmseBf16);
        if (cuda::counters_supported()) {  // one launch where the prologue applies, else norm + product(s)
          const bool fused = sh.fused;
          CHECK_MESSAGE(dm.calls() == (fused ? 1 : sh.N <= cuda::kGemvMaxRows ? 2 : 4), tag);
          CHECK_MESSAGE(ds.calls() == (fused ? 1 : sh.N <= cuda::kGemvMaxRows ? 2 : 4), tag);
        }
      }
    }
    // the output projections' prologues: the GDN gated norm in groups of 8 (16 for in = 128..), the
    // attention output gate; with and without the residual add; fault gdn-norm-plus-one
    if (in % 8 == 0) {
      const int64_t g = in % 16 == 0 ? 16 : 8;
      const auto z = t.in(randn_bf16(size_t(N * in), 1.0, 98), {N, in});
      const auto r = t.in(randn_bf16(size_t(N * 48), 1.0, 99), {N, 48});
      HostWeight gw("gated_norm", {g}, randn_bf16(size_t(g), 0.1, 100));
      HostWeight ow("o_proj", {48, in}, randn_bf16(size_t(48 * in), 1.0 / std::sqrt(double(in)), 101));
      for (bool plus_one : {false, true}) {
        t.numerics(plus_one ? with_fault(Fault::gdn_norm_plus_one) : LayerNumerics{});
        for (bool with_res : {false, true}) {
          const Tensor* rg = with_res ? &r.g : nullptr;
          const std::string tag = cat("N ", N, " in ", in, plus_one ? " fault gdn-norm-plus-one" : "", with_res ? " +res" : "");
          const Tensor y0 = t.gpu.gated_rmsnorm(h.g.reshape({N * in / g, g}), z.g.reshape({N * in / g, g}), gw.view, 1e-6)
                                .reshape({N, in});
          const Tensor plain = with_res ? t.gpu.add(r.g, t.gpu.matmul(y0, ow.view)) : t.gpu.matmul(y0, ow.view);
          cuda::counters_start();
          const Tensor got = t.gpu.gated_norm_matmul(h.g, z.g, gw.view, 1e-6, ow.view, rg);
          const cuda::DeviceCounters dg = cuda::counters_read();
          cuda::counters_stop();
          CHECK_MESSAGE(bits_equal(got, plain), "gated_norm_matmul " << tag);
          check_op("gated_norm_matmul", t, got,
                   t.emu.gated_norm_matmul(h.e, z.e, gw.view, 1e-6, ow.view, with_res ? &r.e : nullptr),
                   t.ref.gated_norm_matmul(h.r, z.r, gw.view, 1e-6, ow.view, with_res ? &r.r : nullptr), tol::kCudaNmseBf16);
          const Tensor s0 = t.gpu.sigmoid_mul(h.g, z.g);
          const Tensor plain_s = with_res ? t.gpu.add(r.g, t.gpu.matmul(s0, ow.view)) : t.gpu.matmul(s0, ow.view);
          cuda::counters_start();
          const Tensor got_s = t.gpu.sigmoid_gate_matmul(h.g, z.g, ow.view, rg);
          const cuda::DeviceCounters dsg = cuda::counters_read();
          cuda::counters_stop();
          CHECK_MESSAGE(bits_equal(got_s, plain_s), "sigmoid_gate_matmul " << tag);
          check_op("sigmoid_gate_matmul", t, got_s,
                   t.emu.sigmoid_gate_matmul(h.e, z.e, ow.view, with_res ? &r.e : nullptr),
                   t.ref.sigmoid_gate_matmul(h.r, z.r, ow.view, with_res ? &r.r : nullptr), tol::kCudaNmseBf16);
          if (cuda::counters_supported()) {  // one launch with the prologue, else the op + the product (+ add)
            const int64_t unfused = 2 + (with_res && N > cuda::kGemvMaxRows ? 1 : 0);
            CHECK_MESSAGE(dg.calls() == (sh.fused ? 1 : unfused), tag);
            CHECK_MESSAGE(dsg.calls() == (sh.fused ? 1 : unfused), tag);
          }
        }
      }
      t.numerics(LayerNumerics{});
    }
    // the residual add: res + x Wᵀ (down: [in, 48], so res has in columns)
    const auto s = t.in(randn_bf16(size_t(N * 48), 1.0, 97), {N, 48});
    const Tensor plain = t.gpu.add(h.g, t.gpu.matmul(s.g, down.view));
    cuda::counters_start();
    const Tensor y = t.gpu.matmul_add(s.g, down.view, h.g);
    const cuda::DeviceCounters d = cuda::counters_read();
    cuda::counters_stop();
    CHECK_MESSAGE(bits_equal(y, plain), "matmul_add N " << N << " in " << in);
    check_op("matmul_add", t, y, t.emu.matmul_add(s.e, down.view, h.e), t.ref.matmul_add(s.r, down.view, h.r),
             tol::kCudaNmseBf16);
    if (cuda::counters_supported()) CHECK(d.calls() == (N <= cuda::kGemvMaxRows ? 1 : 2));
    // the MoE shared expert's tail: res + sigmoid(gate) * x Wᵀ with a one-column gate (gate logits
    // of both signs and a large one: the sigmoid saturates)
    std::vector<double> gv = randn_bf16(size_t(N), 3.0, 96);
    gv[0] = 20.0;
    const auto gate = t.in(gv, {N, 1});
    const Tensor plain_g = t.gpu.add(h.g, t.gpu.sigmoid_mul(t.gpu.matmul(s.g, down.view), gate.g));
    cuda::counters_start();
    const Tensor yg = t.gpu.matmul_gate_add(s.g, down.view, gate.g, h.g);
    const cuda::DeviceCounters dg = cuda::counters_read();
    cuda::counters_stop();
    CHECK_MESSAGE(bits_equal(yg, plain_g), "matmul_gate_add N " << N << " in " << in);
    check_op("matmul_gate_add", t, yg, t.emu.matmul_gate_add(s.e, down.view, gate.e, h.e),
             t.ref.matmul_gate_add(s.r, down.view, gate.r, h.r), tol::kCudaNmseBf16);
    if (cuda::counters_supported()) CHECK(dg.calls() == (N <= cuda::kGemvMaxRows ? 1 : 3));
  }
  check_guards(t, "prologue norm, epilogue add");
}

TEST_CASE("cuda ops: the GDN conv output's split with the q/k L2 norms in one launch, and the fault gdn-skip-l2norm") {
  for (bool fault : {false, true}) {
    Trio t;
    if (fault) t.numerics(with_fault(Fault::gdn_skip_l2norm));
    const int64_t nk = 2, dk = 40, nv = 4, dv = 24;  // dk and dv differ; nv = 2 nk (head groups)
    for (int64_t N : {int64_t(1), int64_t(7)}) {
      const int64_t C = 2 * nk * dk + nv * dv;
      const auto conv = t.in(randn_bf16(size_t(N * C), 1.0, 70), {N, C});
      const double qs = 1.0 / std::sqrt(double(dk));
      cuda::counters_start();
      const Backend::GdnQkv g = t.gpu.gdn_split_norm(conv.g, nk, dk, nv, dv, 1e-6, qs);
      const cuda::DeviceCounters d = cuda::counters_read();
      cuda::counters_stop();
      // the composition on the same device, bit for bit
      const Backend::GdnQkv u = t.gpu.Backend::gdn_split_norm(conv.g, nk, dk, nv, dv, 1e-6, qs);
      for (auto [a, b, what] : {std::tuple<const Tensor*, const Tensor*, const char*>{&g.q, &u.q, "q"}, {&g.k, &u.k, "k"},
                                {&g.v, &u.v, "v"}}) {
        REQUIRE(a->shape == b->shape);
        const std::vector<float> x = t.gpu.to_host_f32(*a), y = t.gpu.to_host_f32(*b);
        CHECK_MESSAGE(std::memcmp(x.data(), y.data(), x.size() * 4) == 0, what << " N " << N << " fault " << fault);
      }
      const Backend::GdnQkv e = t.emu.gdn_split_norm(conv.e, nk, dk, nv, dv, 1e-6, qs);
      const Backend::GdnQkv r = t.ref.gdn_split_norm(conv.r, nk, dk, nv, dv, 1e-6, qs);
      const std::string tag = fault ? "[fault gdn-skip-l2norm]" : "";
      check_op("gdn_split_norm q" + tag, t, g.q, e.q, r.q, tol::kCudaNmseBf16);
      check_op("gdn_split_norm k" + tag, t, g.k, e.k, r.k, tol::kCudaNmseBf16);
      check_op("gdn_split_norm v" + tag, t, g.v, e.v, r.v, tol::kCudaNmseBf16);
      if (cuda::counters_supported()) CHECK(d.launches == 1);
    }
    check_guards(t, "gdn_split_norm");
  }
}

TEST_CASE("cuda ops: the attention inputs (q/gate split, q/k norms, partial RoPE) in one launch, faults included") {
  for (bool interleaved : {false, true}) {
    for (NormKind kind : {NormKind::zero_centred, NormKind::plain}) {
      Trio t;
      if (interleaved) t.numerics(with_fault(Fault::rope_interleaved));
      const int64_t nq = 4, nkv = 2, D = 40;
      const int rotary = 16;  // partial: dims 16..39 are only normed
      HostWeight qn("q_norm", {D}, randn_bf16(size_t(D), 0.1, 80));
      HostWeight kn("k_norm", {D}, randn_bf16(size_t(D), 0.1, 81));
      for (int64_t N : {int64_t(1), int64_t(5)}) {
        std::vector<int64_t> pos;
        for (int64_t i = 0; i < N; ++i) pos.push_back(1000 + 7 * i);
        const auto qg = t.in(randn_bf16(size_t(N * nq * 2 * D), 1.0, 82), {N, nq * 2 * D});
        const auto k = t.in(randn_bf16(size_t(N * nkv * D), 1.0, 83), {N, nkv * D});
        t.gpu.attn_inputs(qg.g, k.g, qn.view, kn.view, 1e-6, kind, pos, rotary, 1e7, nq, nkv, D);  // uploads
        cuda::counters_start();
        const Backend::AttnInputs g = t.gpu.attn_inputs(qg.g, k.g, qn.view, kn.view, 1e-6, kind, pos, rotary, 1e7, nq, nkv, D);
        const cuda::DeviceCounters d = cuda::counters_read();
        cuda::counters_stop();
        const Backend::AttnInputs u =
            t.gpu.Backend::attn_inputs(qg.g, k.g, qn.view, kn.view, 1e-6, kind, pos, rotary, 1e7, nq, nkv, D);
        const Backend::AttnInputs e = t.emu.attn_inputs(qg.e, k.e, qn.view, kn.view, 1e-6, kind, pos, rotary, 1e7, nq, nkv, D);
        const Backend::AttnInputs r = t.ref.attn_inputs(qg.r, k.r, qn.view, kn.view, 1e-6, kind, pos, rotary, 1e7, nq, nkv, D);
        const std::string tag = cat(interleaved ? "[fault rope-interleaved]" : "", kind == NormKind::plain ? "[plain]" : "");
        for (auto [a, b, what] : {std::tuple<const Tensor*, const Tensor*, const char*>{&g.q, &u.q, "q"},
                                  {&g.gate, &u.gate, "gate"}, {&g.k, &u.k, "k"}}) {
          REQUIRE(a->shape == b->shape);
          const std::vector<float> x = t.gpu.to_host_f32(*a), y = t.gpu.to_host_f32(*b);
          CHECK_MESSAGE(std::memcmp(x.data(), y.data(), x.size() * 4) == 0, what << tag << " N " << N);
        }
        check_op("attn_inputs q" + tag, t, g.q, e.q, r.q, tol::kCudaNmseBf16);
        check_op("attn_inputs gate" + tag, t, g.gate, e.gate, r.gate, tol::kCudaNmseBf16);
        check_op("attn_inputs k" + tag, t, g.k, e.k, r.k, tol::kCudaNmseBf16);
        if (cuda::counters_supported()) CHECK(d.launches == 1);
      }
      check_guards(t, "attn_inputs");
    }
  }
}

// attn_inputs_attention: the K/V rows stored by the attention inputs' kernel, then the attention
// launches. Against attn_inputs + attention on the same device, bit for bit: the output, the gate
// and every cache row; every algorithm, fp8 and bf16 caches, faults kv-off-by-one and
// rope-interleaved; two sequences through prefill, decode and an MTP-verify-sized call.
TEST_CASE("cuda ops: the attention inputs storing the K/V rows, then attention, equal attn_inputs + attention bit for bit") {
  struct Variant { AttnAlgo algo; DType kv; Fault fault; };
  const Variant variants[] = {{AttnAlgo::naive, DType::bf16, Fault::count},
                              {AttnAlgo::flash, DType::f8_e4m3, Fault::count},
                              {AttnAlgo::splitkv, DType::bf16, Fault::count},
                              {AttnAlgo::naive, DType::bf16, Fault::kv_off_by_one},
                              {AttnAlgo::splitkv, DType::f8_e4m3, Fault::rope_interleaved},
                              {AttnAlgo::grouped, DType::bf16, Fault::count}};
  for (const Variant& var : variants) {
    Trio t;
    LayerNumerics n = var.fault == Fault::count ? LayerNumerics{} : with_fault(var.fault);
    n.attn = var.algo;
    n.kv_dtype = var.kv;
    t.numerics(n);
    const std::string tag = cat("[", attn_algo_name(var.algo), ",", dtype_name(var.kv),
                                var.fault == Fault::count ? "" : cat(",fault ", fault_name(var.fault)), "]");
    CAPTURE(tag);
    const int64_t nq = 4, nkv = 2, D = 40;
    const int rotary = 16;
    HostWeight qn("q_norm", {D}, randn_bf16(size_t(D), 0.1, 180));
    HostWeight kn("k_norm", {D}, randn_bf16(size_t(D), 0.1, 181));
    KvCache fused[2], plain[2];
    const std::vector<std::vector<SeqSpan>> calls = {{{0, 6, 0}, {6, 3, 0}}, {{0, 1, 6}, {1, 1, 3}}, {{0, 3, 7}, {3, 1, 4}}};
    uint32_t seed = 190;
    for (size_t ci = 0; ci < calls.size(); ++ci) {
      const std::vector<SeqSpan>& spans = calls[ci];
      const int64_t N = spans.back().row0 + spans.back().rows;
      std::vector<int64_t> pos;
      for (const SeqSpan& s : spans)
        for (int64_t i = 0; i < s.rows; ++i) pos.push_back(s.pos0 + i);
      const Tensor qg = t.gpu.from_host(randn_bf16(size_t(N * nq * 2 * D), 1.0, seed++), {N, nq * 2 * D}, DType::bf16);
      const Tensor k = t.gpu.from_host(randn_bf16(size_t(N * nkv * D), 1.0, seed++), {N, nkv * D}, DType::bf16);
      const Tensor v = t.gpu.from_host(randn_bf16(size_t(N * nkv * D), 1.0, seed++), {N, nkv, D}, DType::bf16);
      std::vector<KvCache*> fc = {&fused[0], &fused[1]}, pc = {&plain[0], &plain[1]};
      cuda::counters_start();
      const Backend::AttnCore got = t.gpu.attn_inputs_attention(qg, k, v, qn.view, kn.view, 1e-6, NormKind::zero_centred,
                                                                pos, rotary, 1e7, nq, nkv, D, spans, fc);
      const cuda::DeviceCounters d = cuda::counters_read();
      cuda::counters_stop();
      const Backend::AttnInputs in =
          t.gpu.attn_inputs(qg, k, qn.view, kn.view, 1e-6, NormKind::zero_centred, pos, rotary, 1e7, nq, nkv, D);
      cuda::counters_start();
      const Tensor want = t.gpu.attention(in.q, in.k, v, spans, pc);
      const cuda::DeviceCounters dp = cuda::counters_read();
      cuda::counters_stop();
      const auto same = [&](const Tensor& a, const Tensor& b) {
        const std::vector<float> x = t.gpu.to_host_f32(a), y = t.gpu.to_host_f32(b);
        return a.shape == b.shape && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
      };
      CHECK_MESSAGE(same(got.out, want), "attention output, call " << ci + 1);
      CHECK_MESSAGE(same(got.gate, in.gate), "gate, call " << ci + 1);
      for (int s = 0; s < 2; ++s) {
        CHECK(fused[s].len == plain[s].len);
        CHECK_MESSAGE(same(fused[s].k, plain[s].k), "K cache of sequence " << s << ", call " << ci + 1);
        CHECK_MESSAGE(same(fused[s].v, plain[s].v), "V cache of sequence " << s << ", call " << ci + 1);
      }
      // no K/V store launch of its own: the inputs' kernel and the attention's launches, as many
      // as attention() alone makes with its store (splitkv: two for decode rows, flash for longer)
      if (cuda::counters_supported()) {
        CHECK(calls_named(d, "kv_append") == 0);
        CHECK(calls_named(dp, "kv_append") == 1);
        CHECK(d.launches == dp.launches);
      }
    }
    check_guards(t, "attn_inputs_attention");
  }
}
