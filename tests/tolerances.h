// Tolerances of the engine tests, in ONE table. Each says where its value comes from.
// All are relative L2 errors ||a - b|| / ||b|| unless named otherwise.
#pragma once

namespace degen::tol {

// fp32 CPU reference vs Hugging Face transformers run in fp32 (tests/fixtures/hf): the bound issue 4
// sets. HF's own fp32 round-off against an fp64 transcription is <= 3.6e-6 (fixtures README), so a
// correct fp32 reference lands near 1e-6..1e-5.
constexpr double kHfRelL2 = 1e-4;
// Absolute difference in nats of a log-probability (or log-sum-exp) of the fp32 golden record against
// HF's fp32 log_softmax (tests/fixtures/hf-vocab-gap, tiny-qwen35, tests/test_golden_compare.cpp).
// Measured: 2.3e-5 at worst over 43 positions x 1000 ids, largest on the least likely ids, whose
// logits carry the largest fp32 differences against HF; lse_pad 3.9e-7; lse + lse_pad against HF's
// logsumexp 2.6e-6. 4x margin. The offset this guards, lse_pad, is 0.0045 to 0.067 nats there.
constexpr double kHfLogprob = 1e-4;

// Two fp32 evaluations of the same function that differ only in summation order or algorithm
// (chunked vs recurrent GDN, prefill vs decode, fused vs split layout): fp32 unit round-off is
// 6e-8; after a few layers of norms and products with O(1) condition numbers we observed <= 1e-6,
// and allow 10x margin.
constexpr double kFp32Reorder = 1e-5;

// Absolute log-probability difference (nats) between plain generation and generation through the
// serving mechanisms (chunk and block boundaries, padded decode rows; tests/test_serving.cpp): fp32
// reorderings of the same sums. Measured up to 1.04e-5 (tiny-qwen35-moe, whose router amplifies
// them), 1e-6 on the dense presets; 10x margin over the largest.
constexpr double kFp32LogprobReorder = 1e-4;

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

// precision=bf16 (GPU storage emulation) against precision=ref, logits of a 150-token prefill and
// 8 decode steps (tests/test_emulation.cpp): every stored activation rounded to bf16 (unit
// round-off 2^-9), grown through 4-8 layers. Measured 0.020-0.056 on the dense tiny presets and
// HF fixtures (largest: hf/qwen35-dense 0.056); 1.5x margin.
constexpr double kBf16Logits = 0.08;
// precision=q8_0 (ggml Q8_0 emulation: 8-bit weights and matrix inputs, one fp16 scale per 32)
// against precision=ref, the same run on tiny-qwen35 (tests/test_emulation.cpp). Q8_0's relative
// step is 1/127 of a block's largest value (bf16's is 2^-9 of each value). Measured 0.072 (the
// test's message); 1.5x margin.
constexpr double kQ8Logits = 0.11;
// The same for MoE models, whose router top-k gaps lie below the bf16 noise so that some tokens
// take other experts: measured 0.059 (hf/qwen3next) to 0.17 (tiny-qwen3next); 1.5x margin.
constexpr double kBf16LogitsMoe = 0.25;
// attn=flash / splitkv against naive with fp32 activations: the probabilities enter P·V rounded to
// bf16 (relative error <= 2^-9 each), so the attention output moves by about 2^-9 / sqrt(3) ~ 1e-3
// (measured 0.9e-3 - 1.2e-3 on attn_core, 2e-4 on the logits); bound 3e-3.
constexpr double kBf16Probabilities = 3e-3;
// One op computed by two fp32 algorithms that agree to reordering (chunked vs recurrent GDN) and
// rounded to bf16: an element differs by at most one bf16 step, 2^-8 relative (measured 1.3e-5).
constexpr double kBf16Op = 0x1p-8;

// ---- CUDA backend (tests/cuda/test_cuda_ops.cpp) ----
// NMSE = Σ(a - b)² / Σ b² of one op's output: CudaBackend against CpuBackend precision=bf16 (the same
// storage points, the GPU-storage emulation) on identical bf16-exact inputs. The CUDA kernels compute
// in fp32 where the emulation accumulates in double, so an element whose value sits at a bf16
// rounding boundary can round the other way: one bf16 ulp (2^-8 relative) on a few elements,
// NMSE ~ (fraction flipped) · 2^-16 ≈ 1e-7..1e-6 when every storage point matches. A wrong pairing,
// head mapping, weight convention or missing scale gives NMSE ~ 1e-2..1.
// bf16 outputs: llama.cpp test-backend-ops allows 5e-4 for its matrix products with 16-bit operands
// (test_mul_mat::max_nmse_err); the same bound here, for every op with bf16 output.
constexpr double kCudaNmseBf16 = 5e-4;
// fp32 outputs (the GDN log decay g, MoE routing weights): llama.cpp's default for fp32 ops, 1e-7
// (fp32 expf/log1pf against double: relative 1e-7, NMSE ~1e-14).
constexpr double kCudaNmseF32 = 1e-7;
// The GDN recurrent state S after a gdn call (tests/cuda/test_gdn_cuda.cpp), CudaBackend against
// cpu:bf16 and chunked against recurrent on the device. fp32 state: fp32 sums against the
// emulation's double sums, NMSE ~1e-12 (the chunked/recurrent reordering, kFp32Reorder = 1e-5
// relative, is NMSE 1e-10). bf16 / fp16 state: rounded after every token or chunk, an element at a
// rounding boundary goes the other way by one ulp (2^-8 / 2^-11 relative) and the difference then
// decays with the state, as for a bf16 output: the bound of kCudaNmseBf16 (llama.cpp's 5e-4).
constexpr double kCudaNmseGdnState = kCudaNmseBf16;
// gdn=fla's output on the device against its twin (cpu:bf16, gdn_fla_head), judged tighter than
// kCudaNmseBf16 because FLA's storage points themselves move the output by only NMSE 1.0e-5 .. 1.5e-5
// against gdn=chunked (measured on the op tests' shapes): at 5e-4 a kernel that skipped them would
// pass. With every storage point matched only boundary flips remain (the ~1e-7 .. 1e-6 of
// kCudaNmseBf16's note; measured at most 1.8e-8 over the op tests), so the upper end of that, 1e-6.
constexpr double kCudaNmseGdnFla = 1e-6;
// ... and the fraction of its output elements equal to the twin's in bf16: at least 0.99 (measured
// 0.9985 or more over the op tests; a kernel rounding W's operand once where FLA rounds it twice
// measured 0.91 - 0.95, its NMSE 5e-7 - 1.4e-6, inside kCudaNmseGdnFla on most shapes).
constexpr double kGdnFlaBf16Exact = 0.99;
// gdn=fla against gdn=chunked on the CPU at precision=bf16 (tests/test_engine_invariants.cpp), output
// and state: FLA's storage points round w, u, the chunk states, v_new and the decayed QK^T to bf16
// where chunked keeps them fp32; measured NMSE 3e-6 .. 1.5e-5 (rel-L2 1.7e-3 .. 3.9e-3). A rounding
// of that kind is one more bf16 storage point per product, so the bound of a bf16 op output against
// its emulation, llama.cpp's 5e-4 (kCudaNmseBf16). Planted in the twin, measured: W without its e^G,
// state NMSE 6.5e-3 at T = 1, output and state 0.2 - 0.25 at T = 64 and 130; β applied twice in U,
// 1e-2 - 0.1.
constexpr double kCpuNmseFlaVsChunked = kCudaNmseBf16;
// The reference on the GPU (CudaBackend reference mode, backend=cuda,precision=ref) against
// CpuBackend precision=ref, op by op (tests/cuda/test_cuda_reference.cpp): both fp32 storage, the
// kernels summing in fp32 where the CPU sums norms, softmax and attention in double and its GEMM in
// another fp32 order: an fp32 reordering, rel_l2 <= kFp32Reorder, so NMSE <= kFp32Reorder². A weight
// rounded to bf16 on the way (rel 2^-9) or any bf16 storage point gives NMSE ~1e-6, 10^4 over it.
constexpr double kCudaNmseRef = kFp32Reorder * kFp32Reorder;

// An injected fault (tests/test_faults.cpp) must move its catalogue op and the logits by more than
// ten times the fp32 reordering noise (kFp32Reorder). The smallest measured: gdn-out-fp16 without
// overflow, 2e-4 (an fp16 rounding of o); kv-off-by-one's logits, 8e-4 (3 decode rows of 93);
// the others 5e-3 to 2.9.
constexpr double kFaultVisible = 10 * kFp32Reorder;

}  // namespace degen::tol
