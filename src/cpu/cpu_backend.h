// CpuBackend: the reference implementation of every Backend op (DESIGN.md §8), and the CPU
// stand-in for the GPU path.
//   precision=ref : activations, caches and the GDN state in fp32; norms, softmax, attention and
//                   recurrence dot products accumulated in fp64; matrix products are Eigen fp32
//                   GEMM/GEMV on weight tiles converted from the memory map (never a whole-model copy).
//   precision=fp64: everything in double (weights upcast exactly), the noise-floor reference.
//   precision=bf16: GPU storage emulation. Every op computes in fp32 (the ref code, fed fp32 copies
//                   of its inputs) and stores its output as a real bf16 tensor, rounded once, where
//                   a CUDA kernel stores it (spec model.md §4.10):
//                     - weights: bf16 (a weight stored wider is rounded on load), except A_log and
//                       dt_bias, which the decay uses as stored (SGLang keeps A_log fp32, spec §8.3);
//                     - activations, residual stream, projections, norm outputs (computed in fp32),
//                       q/k L2 norm, beta, conv output, attention and GDN outputs: bf16;
//                     - g (log decay) and MoE routing weights: fp32;
//                     - RoPE: cos/sin rounded to bf16 (the cos/sin caches of HF and vLLM hold the
//                       model dtype), rotation in fp32, one rounding;
//                     - naive attention materialises scores and probabilities in bf16 around an
//                       fp32 softmax (HF eager);
//                     - MoE: each weighted expert output and the running sum rounded to bf16 (HF
//                       index_add_ in the model dtype);
//                     - logits: bf16, the LM head's matmul output (HF, vLLM and SGLang compute logits
//                       in the model dtype and upcast for sampling);
//                     - GDN state, conv window and KV cache: the dtypes of LayerNumerics (defaults
//                       fp32 state or the checkpoint's mamba_ssm_dtype, bf16 window, bf16 KV).
// Storage toggles and algorithms come through begin_layer (LayerNumerics); they apply under every
// precision (see Engine::numerics for the defaults). Compiled without fast-math. Matrix products,
// attention, conv and GDN use all cores (OpenMP); results do not depend on the number of threads
// (fixed tiling, one thread per output element).
// One op family per file: rmsnorm.cpp, rope.cpp, attention.cpp, conv1d.cpp, gdn.cpp, moe.cpp,
// matmul.cpp, elementwise.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "engine/backend.h"

namespace degen {

enum class CpuPrecision : uint8_t { ref, fp64, bf16, q8_0 };
const char* cpu_precision_name(CpuPrecision p);

// Counters for `bench` (matrix products only).
struct CpuStats {
  double matmul_flops = 0;        // 2 * N * in * out summed
  double matmul_seconds = 0;      // wall time inside matmul()
  double weight_bytes = 0;        // weight bytes read by matmul() and embed()
  int64_t matmul_calls = 0;
  void reset() { *this = CpuStats{}; }
};

// (Not final: tests derive from it to plant a bug in one fused op, tests/test_observation.cpp.)
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuPrecision precision = CpuPrecision::ref);
  std::string name() const override;
  DType act_dtype() const override;
  bool gpu_path() const override { return gpu_storage(); }
  DType state_dtype() const override { return compute_dtype(); }
  // The dtype every op computes in: fp64 under precision=fp64, else fp32.
  DType compute_dtype() const { return precision_ == CpuPrecision::fp64 ? DType::f64 : DType::f32; }
  bool gpu_storage() const { return precision_ == CpuPrecision::bf16; }
  // precision=q8_0: matrices and matrix-product inputs go through ggml's Q8_0 (cpu::q8_0_round).
  bool q8_0() const { return precision_ == CpuPrecision::q8_0; }
  CpuPrecision precision() const { return precision_; }
  CpuStats& stats() { return stats_; }
  static int num_threads();
  // Threads this backend's ops use on a thread that called bind_thread() (0: OpenMP's default).
  // Tensor parallelism gives each of its N rank threads 1/N of the cores.
  void set_threads(int n) { threads_ = n; }
  void prefetch(const TensorView& w) override;
  void bind_thread() override;

  Tensor zeros(std::vector<int64_t> shape, DType dtype) override;
  using Backend::zeros;
  Tensor clone(const Tensor& t) override;
  std::vector<float> to_host_f32(const Tensor& t) override;
  std::vector<double> to_host_f64(const Tensor& t) override;
  Tensor from_host(const std::vector<double>& v, std::vector<int64_t> shape, DType dtype) override;
  using Backend::from_host;

  Tensor slice_cols(const Tensor& x, int64_t c0, int64_t n) override;
  Tensor gather_cols(const Tensor& x, const std::vector<int64_t>& cols) override;
  Tensor concat_cols(const Tensor& a, const Tensor& b) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) override;
  Tensor concat_rows(const std::vector<Tensor>& parts) override;
  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int64_t>& rows,
                        const std::vector<double>& w) override;

  Tensor embed(const TensorView& table, const std::vector<int32_t>& ids) override;
  Tensor add(const Tensor& a, const Tensor& b) override;
  Tensor sigmoid_mul(const Tensor& x, const Tensor& gate) override;
  Tensor swiglu(const Tensor& gate, const Tensor& up) override;
  Tensor do_rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) override;
  Tensor do_gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) override;
  Tensor l2norm(const Tensor& x, double eps, double scale) override;

  Tensor matmul(const Tensor& x, const TensorView& w) override;

  void rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) override;
  Tensor do_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                      const std::vector<KvCache*>& caches) override;

  Tensor do_conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                          const std::vector<Tensor*>& windows) override;
  void gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                 Tensor& g, Tensor& beta) override;
  Tensor gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
             const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) override;

  MoeRouting moe_route(const Tensor& router_logits, int k, bool renormalise) override;
  void mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) override;

 private:
  // x in the compute dtype: x itself when it already is (no copy), else an exact widened copy.
  Tensor wide(const Tensor& x);
  // t (compute dtype) stored in the activation dtype: t itself when equal, else a rounded copy.
  Tensor store(const Tensor& t);
  // An element-wise copy of t in dtype `to`, rounded to nearest (e4m3 saturating).
  Tensor convert(const Tensor& t, DType to);

  CpuPrecision precision_;
  CpuStats stats_;
  int threads_ = 0;
};

}  // namespace degen
