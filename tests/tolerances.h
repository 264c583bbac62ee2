// Tolerances of the engine tests, in ONE table. Each says where its value comes from.
// All are relative L2 errors ||a - b|| / ||b|| unless named otherwise.
#pragma once

namespace degen::tol {

// fp32 CPU reference vs Hugging Face transformers run in fp32 (tests/fixtures/hf): the bound issue 4
// sets. HF's own fp32 round-off against an fp64 transcription is <= 3.6e-6 (fixtures README), so a
// correct fp32 reference lands near 1e-6..1e-5.
constexpr double kHfRelL2 = 1e-4;

// Two fp32 evaluations of the same function that differ only in summation order or algorithm
// (chunked vs recurrent GDN, prefill vs decode, fused vs split layout): fp32 unit round-off is
// 6e-8; after a few layers of norms and products with O(1) condition numbers we observed <= 1e-6,
// and allow 10x margin.
constexpr double kFp32Reorder = 1e-5;

// fp32 reference vs fp64 run of the same model: the fp32 round-off accumulated over a tiny model.
constexpr double kFp32VsFp64 = 1e-5;

// Same computation done twice in fp64 by different routes (test re-derivations of the MTP head,
// chunked vs recurrent in fp64): double unit round-off 1.1e-16, with generous margin.
constexpr double kFp64Reorder = 1e-12;

// KLD (nats) of a path against its own golden top-K record: the record keeps the log-probabilities as
// fp32, so q is off by one fp32 rounding of log q (~3e-8 relative); measured <= 1e-14 on the tiny
// models (tests/test_golden_compare.cpp).
constexpr double kTopkSelfKld = 1e-12;

// "Unchanged" in the head-mapping test: exactly zero difference is expected (no cross-talk at all).
constexpr double kExact = 0.0;

}  // namespace degen::tol
