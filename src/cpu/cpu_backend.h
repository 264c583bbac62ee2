// CpuBackend: the reference implementation of every Backend op (DESIGN.md §8).
//   precision=ref : activations, caches and the GDN state in fp32; norms, softmax, attention and
//                   recurrence dot products accumulated in fp64; matrix products are Eigen fp32
//                   GEMM/GEMV on weight tiles converted from the memory map (never a whole-model copy).
//   precision=fp64: everything in double (weights upcast exactly), the noise-floor reference.
// Compiled without fast-math. Matrix products, attention, conv and GDN use all cores (OpenMP);
// results do not depend on the number of threads (fixed tiling, one thread per output element).
// One op family per file: rmsnorm.cpp, rope.cpp, attention.cpp, conv1d.cpp, gdn.cpp, moe.cpp,
// matmul.cpp, elementwise.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "engine/backend.h"

namespace degen {

enum class CpuPrecision : uint8_t { ref, fp64 };
const char* cpu_precision_name(CpuPrecision p);

// Counters for `bench` (matrix products only).
struct CpuStats {
  double matmul_flops = 0;        // 2 * N * in * out summed
  double matmul_seconds = 0;      // wall time inside matmul()
  double weight_bytes = 0;        // weight bytes read by matmul() and embed()
  int64_t matmul_calls = 0;
  void reset() { *this = CpuStats{}; }
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuPrecision precision = CpuPrecision::ref) : precision_(precision) {}
  std::string name() const override;
  DType act_dtype() const override { return precision_ == CpuPrecision::fp64 ? DType::f64 : DType::f32; }
  DType state_dtype() const override { return act_dtype(); }
  CpuPrecision precision() const { return precision_; }
  CpuStats& stats() { return stats_; }
  static int num_threads();

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
  Tensor rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) override;
  Tensor gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) override;
  Tensor l2norm(const Tensor& x, double eps, double scale) override;

  Tensor matmul(const Tensor& x, const TensorView& w) override;

  void rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) override;
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                   const std::vector<KvCache*>& caches) override;

  Tensor conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                       const std::vector<Tensor*>& windows) override;
  void gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                 Tensor& g, Tensor& beta) override;
  Tensor gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
             const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) override;

  MoeRouting moe_route(const Tensor& router_logits, int k, bool renormalise) override;
  void mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) override;

 private:
  CpuPrecision precision_;
  CpuStats stats_;
};

}  // namespace degen
