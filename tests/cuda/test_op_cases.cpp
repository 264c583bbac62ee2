// The op-case registry (src/cuda/op_cases.h), the list `bench --ops` counts and times, checked for
// correctness: every case at its test size on tiny synthetic models, on the CUDA backend against the
// CPU backend's GPU-storage emulation (cpu:bf16, judged, the NMSE limits of tests/tolerances.h' CUDA
// section) and the fp32 reference (cpu:ref, reported), as test_cuda_ops.cpp judges each op; NaN/Inf
// counted first; every CUDA buffer guarded (out-of-bounds writes fail). What the registry does not
// express (faults, edge shapes, which kernel ran, bit-equality of fused ops with their compositions)
// stays in test_cuda_ops.cpp and test_gdn_cuda.cpp. Skips without a device (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <chrono>

#include "../tolerances.h"
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/op_cases.h"
#include "cuda_test_util.h"

using namespace degen;
using namespace degen::test;

namespace {

double limit_of(cuda::OpTol t) {
  switch (t) {
    case cuda::OpTol::bf16: return tol::kCudaNmseBf16;
    case cuda::OpTol::f32: return tol::kCudaNmseF32;
    case cuda::OpTol::gdn_state: return tol::kCudaNmseGdnState;
    case cuda::OpTol::gdn_fla: return tol::kCudaNmseGdnFla;
  }
  return 0;
}

// Every case of `m` whose name starts with one of `ops` (all when empty), on the three backends.
// Returns the number of cases checked.
int check_cases(SynthModel& m, const std::vector<std::string>& ops) {
  CudaBackend gpu(0);
  gpu.set_guard_check(true);
  CpuBackend emu(CpuPrecision::bf16), ref(CpuPrecision::ref);
  const LayerNumerics n = cuda::op_case_numerics();
  LayerNumerics rn = n;  // the reference keeps its own fp32 storage
  rn.conv_dtype = DType::f32;
  rn.kv_dtype = DType::f32;
  int checked = 0;
  for (const cuda::OpCase& c : cuda::op_cases(m.cfg, m.w, cuda::kOpTestSizes)) {
    bool wanted = ops.empty();
    for (const std::string& op : ops) wanted |= c.name.rfind(op, 0) == 0;
    if (!wanted) continue;
    CAPTURE(c.name);
    gpu.begin_layer(n);
    emu.begin_layer(n);
    ref.begin_layer(rn);
    const cuda::OpPrepare& twin = c.reference ? c.reference : c.prepare;
    const std::vector<cuda::OpOutput> g = c.prepare(gpu)(), e = twin(emu)(), r = twin(ref)();
    REQUIRE(g.size() == e.size());
    REQUIRE(g.size() == r.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const std::vector<float> gv = gpu.to_host_f32(g[i].t), ev = emu.to_host_f32(e[i].t), rv = ref.to_host_f32(r[i].t);
      REQUIRE(gv.size() == ev.size());
      const size_t bad = count_nonfinite(gv);
      CHECK_MESSAGE(bad == 0, g[i].what << ": " << bad << " non-finite values in the CUDA output");
      CHECK(count_nonfinite(ev) == 0);
      const double limit = limit_of(g[i].tol), ne = nmse(gv, ev);
      report_op(c.name + " " + g[i].what, shape_str(g[i].t.shape), ne, nmse(gv, rv),
                bf16_exact_fraction(gv, ev), limit, bad == 0 && ne <= limit);
      CHECK_MESSAGE(ne <= limit, g[i].what << " " << shape_str(g[i].t.shape) << ": NMSE vs cpu:bf16 " << ne << " > "
                                           << limit);
    }
    ++checked;
  }
  const std::vector<std::string> bad = gpu.check_guards();
  for (const std::string& b : bad) MESSAGE("guard changed: " << b);
  CHECK_MESSAGE(bad.empty(), "a kernel wrote outside its buffer");
  return checked;
}

}  // namespace

TEST_CASE("cuda op cases: every case of bench --ops at its test size equals the CPU within the op tolerances") {
  const auto t0 = std::chrono::steady_clock::now();
  SynthModel dense("tiny-qwen35");
  // the dense model has every case but the MoE ones (GDN, attention, MLP, norms, LM head)
  const int n_dense = check_cases(dense, {});
  CHECK(n_dense >= 25);
  SynthModel moe("tiny-qwen35-moe");
  CHECK(check_cases(moe, {"moe_experts_on_device", "matmul_gate_add"}) == 2);
  MESSAGE("op cases checked in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                                 << " s");
}
