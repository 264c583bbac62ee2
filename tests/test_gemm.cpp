// The CPU reference's product kernels (src/cpu/gemm.h) under every ISA this machine has: each output
// within the rigorous fp32 error bound of the exact sum, the GEMM's per-element chain independent of
// how rows and tokens are grouped (and the same bits under AVX2 and AVX-512), and CpuBackend::matmul
// the same bits with one thread and with two.
#include <doctest/doctest.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#include "tolerances.h"

using namespace degen;
using namespace degen::cpu;

namespace {

std::vector<Isa> machine_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::baseline, Isa::avx2, Isa::avx512})
    if (static_cast<int>(i) <= static_cast<int>(best_isa())) v.push_back(i);
  return v;
}

struct Problem {
  int64_t N, K, R;
  std::vector<float> x, wf;    // wf: the weight's values (bf16-exact)
  std::vector<uint16_t> wb;    // the same weight stored as bf16
  Problem(int64_t n, int64_t k, int64_t r, unsigned seed) : N(n), K(k), R(r), x(n * k), wf(r * k), wb(r * k) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    for (size_t i = 0; i < wb.size(); ++i) {
      wb[i] = f32_to_bf16(nd(rng));
      wf[i] = bf16_to_f32(wb[i]);
    }
  }
  // y[n][r] through the kernels of `isa` (gemv for N <= kGemvMaxRows, else one gemm tile of all rows).
  std::vector<float> run(Isa isa, bool bf16) const {
    const GemmKernels& k = gemm_kernels(isa);
    std::vector<float> y(static_cast<size_t>(N * R), NAN);
    const void* w = bf16 ? static_cast<const void*>(wb.data()) : static_cast<const void*>(wf.data());
    if (N <= kGemvMaxRows) {
      k.gemv_rows(x.data(), K, N, K, w, bf16, R, y.data(), R);
    } else {
      std::vector<float> xt(static_cast<size_t>(packed_xt_floats(N, K, k.panel)));
      pack_xt(x.data(), N, K, k.panel, xt.data());
      std::vector<float> scratch(static_cast<size_t>(gemm_scratch_floats(N, R, k.panel)));
      k.gemm_tile(xt.data(), N, K, w, bf16, R, y.data(), R, scratch.data());
    }
    return y;
  }
};

}  // namespace

TEST_CASE("gemm: every ISA's kernels are within the fp32 error bound of the exact sums") {
  // |fl(sum) - sum| <= gamma_n * sum |x_k w_k| with gamma_n = n u / (1 - n u), u = 2^-24, for any
  // order of n - 1 additions and n products, fused or not (Higham, Accuracy and Stability of Numerical
  // Algorithms, 2nd ed., §3.1): a bound that holds for every ISA's chain, so no tolerance is guessed.
  // The shapes cover a K tail for every vector width (1, 3, 37, 300), partial register tiles in rows
  // and tokens, and both kernels (N <= 4: gemv).
  for (Isa isa : machine_isas()) {
    CAPTURE(isa_name(isa));
    unsigned seed = 1;
    for (int64_t N : {1, 2, 3, 4, 5, 17, 70})
      for (int64_t K : {1, 3, 16, 37, 300})
        for (int64_t R : {1, 7, 13}) {
          const Problem p(N, K, R, seed++);
          const double u = 0x1p-24, gamma = double(K) * u / (1 - double(K) * u);
          for (bool bf16 : {false, true}) {
            const std::vector<float> y = p.run(isa, bf16);
            for (int64_t n = 0; n < N; ++n)
              for (int64_t r = 0; r < R; ++r) {
                double exact = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                  exact += double(p.x[n * K + k]) * p.wf[r * K + k];
                  mag += std::fabs(double(p.x[n * K + k]) * p.wf[r * K + k]);
                }
                const double err = std::fabs(double(y[n * R + r]) - exact);
                if (!(err <= gamma * mag)) {
                  CAPTURE(N);
                  CAPTURE(K);
                  CAPTURE(R);
                  CAPTURE(bf16);
                  CHECK(err <= gamma * mag);
                  return;
                }
              }
          }
        }
  }
}

TEST_CASE("gemm: an element of the GEMM does not depend on the rows and tokens computed with it") {
  // Row r of token n computed in a tile of 70 tokens x 29 rows, and again in a tile of 5 tokens (n
  // among four others) x 1 row: the same bits, under every ISA. And AVX2 and AVX-512 give the same
  // bits (both one fused multiply-add chain per element).
  const Problem p(70, 257, 29, 7);
  std::vector<std::vector<float>> by_isa;
  for (Isa isa : machine_isas()) {
    CAPTURE(isa_name(isa));
    const GemmKernels& k = gemm_kernels(isa);
    const std::vector<float> y = p.run(isa, true);
    by_isa.push_back(y);
    for (int64_t n : {0, 33, 69})
      for (int64_t r : {0, 11, 28}) {
        std::vector<float> x5(static_cast<size_t>(5 * p.K));
        for (int64_t j = 0; j < 5; ++j)
          std::memcpy(&x5[j * p.K], &p.x[((n + j * 13) % p.N) * p.K], static_cast<size_t>(p.K) * 4);
        std::vector<float> xt(static_cast<size_t>(packed_xt_floats(5, p.K, k.panel)));
        pack_xt(x5.data(), 5, p.K, k.panel, xt.data());
        std::vector<float> scratch(static_cast<size_t>(gemm_scratch_floats(5, 1, k.panel))), y5(5);
        k.gemm_tile(xt.data(), 5, p.K, p.wb.data() + r * p.K, true, 1, y5.data(), 1, scratch.data());
        CHECK(std::memcmp(&y5[0], &y[n * p.R + r], 4) == 0);
      }
  }
  if (by_isa.size() == 3) CHECK(by_isa[1] == by_isa[2]);
  if (by_isa.size() < 3) MESSAGE("this machine lacks AVX-512 or AVX2: the AVX2 = AVX-512 check did not run");
}

TEST_CASE("gemm: CpuBackend::matmul gives the same bits with one thread and with two") {
#ifndef _OPENMP
  MESSAGE("built without OpenMP: one thread only");
#else
  // Shapes large enough to be split over threads (kParallelMinWork), decode (1 row) and prefill (40).
  for (int64_t N : {1, 40}) {
    const Problem p(N, 512, 4100, 3);
    for (bool bf16 : {false, true}) {
      TensorView w;
      w.name = "w";
      w.dtype = bf16 ? DType::bf16 : DType::f32;
      w.shape = {p.R, p.K};
      w.data = bf16 ? reinterpret_cast<const uint8_t*>(p.wb.data()) : reinterpret_cast<const uint8_t*>(p.wf.data());
      w.nbytes = static_cast<size_t>(p.R * p.K) * (bf16 ? 2 : 4);
      std::vector<std::vector<float>> out;
      const int saved = omp_get_max_threads();
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        CpuBackend be(CpuPrecision::ref);
        std::vector<double> xd(p.x.begin(), p.x.end());
        out.push_back(be.to_host_f32(be.matmul(be.from_host(xd, {p.N, p.K}, DType::f32), w)));
      }
      omp_set_num_threads(saved);
      CAPTURE(N);
      CAPTURE(bf16);
      CHECK(out[0] == out[1]);
      // and the backend's product is the active ISA's kernel, element for element
      CHECK(out[0] == p.run(active_isa(), bf16));
    }
  }
#endif
}
