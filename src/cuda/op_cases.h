// The op cases: one list of (op, shapes, dtypes, toggles) that serves both the per-op benchmark
// (`bench --ops`, src/cuda/bench.cpp: counted on the emulator, timed on a GPU) and the op tests'
// correctness loop (tests/cuda/test_op_cases.cpp: each case on the CUDA backend against the CPU
// backend's GPU-storage emulation, cpu:bf16), as llama.cpp's test-backend-ops keeps one list for its
// test and perf modes. The shapes are a model's (its first GDN, attention, MLP and MoE layers' weights)
// at a size: the bench's (--prefill rows, context --prefill) on the benched model, the tests' (a few
// odd row counts) on a tiny synthetic model, so that the emulator runs the whole list in seconds.
// A case is written against the Backend interface only: it uploads its inputs (seeded, bf16-exact,
// scaled like the layer's activations) to whichever backend it is given, so every backend gets the
// same values.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace degen::cuda {

// Which of the CUDA tolerances of tests/tolerances.h an output is judged by (the values live in that
// one table; the tests map these to it).
enum class OpTol {
  bf16,       // tol::kCudaNmseBf16: a bf16 output
  f32,        // tol::kCudaNmseF32: an fp32 output
  gdn_state,  // tol::kCudaNmseGdnState: the GDN recurrent state after the call
  gdn_fla,    // tol::kCudaNmseGdnFla: gdn=fla's output against its twin
};

// One output of a case's call.
struct OpOutput {
  std::string what;
  Tensor t;
  OpTol tol = OpTol::bf16;
};

// The call of a case on the inputs it uploaded; it may be made any number of times (the bench's
// warm-up and repetitions), each returning the op's outputs.
using OpRun = std::function<std::vector<OpOutput>()>;
// Uploads a case's inputs to a backend (whose numerics() are op_case_numerics(), the fp32 reference's
// storage dtypes aside) and returns its call.
using OpPrepare = std::function<OpRun(Backend&)>;

struct OpCase {
  std::string name;        // bench --ops' first column; its first word is the op
  double floor_bytes = 0;  // inputs, weights and outputs, each once
  double flops = 0;
  OpPrepare prepare;
  // The CPU twin's call where it differs from the device's: moe_experts_on_device, which the CPU does
  // not have (it routes on the host: moe_route, then the experts one by one). Empty: `prepare`.
  OpPrepare reference;
};

// The sizes of the two modes: rows of the prefill-sized cases, and the context of the decode
// attention cases.
struct OpSizes {
  int64_t rows = 1;
  int64_t ctx = 1;
};
// bench --ops: --prefill rows at a context of --prefill keys.
inline OpSizes op_sizes_bench(int prefill) { return {prefill, prefill > 1 ? prefill : 1}; }
// The tests (on a tiny model): rows past one GDN chunk and one flash tile of 64 and no multiple of 8;
// a context past the 256 keys of a grouped / split-KV part, so that a decode row is cut in two parts
// and merged.
inline constexpr OpSizes kOpTestSizes{70, 301};

// The layer numerics the cases run under (the attention cases set their own algorithm): layer 0,
// fp32 GDN state, bf16 conv window and KV cache.
LayerNumerics op_case_numerics();

// The cases of a model, in bench --ops' order: its first GDN layer (unfused) and attention layer,
// its first dense MLP, its first MoE layer, the norms and the LM head; a part the model lacks is
// left out.
std::vector<OpCase> op_cases(const ModelConfig& cfg, const ModelWeights& w, OpSizes sizes);

// The routed experts as the engine runs them with the routing on the host (Engine::routed_on_host):
// moe_route, then per expert in increasing id gather_rows, matmul_swiglu, matmul, scatter_add_rows
// into zeros. The CPU twin of moe_experts_on_device (its case's `reference`; tests/cuda).
Tensor moe_routed_on_host(Backend& be, const Tensor& x, const Tensor& logits, const std::vector<MlpWeights>& experts,
                          int k, bool renorm);

}  // namespace degen::cuda
