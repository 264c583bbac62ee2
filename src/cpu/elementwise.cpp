// CPU elementwise ops: embedding gather, residual add, sigmoid gate, SwiGLU, logits padding mask.
// note: each result is computed in double from T operands and rounded to T once; under
// precision=bf16 the operands are the exact fp32 values of the bf16 inputs and the fp32 result is
// rounded to bf16 once more (a fused GPU kernel's single rounding, from fp32).
#include <limits>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

using cpu::dispatch;

Tensor CpuBackend::embed(const TensorView& table, const std::vector<int32_t>& ids) {
  DEGEN_ASSERT(table.shape.size() == 2, "embedding table must be 2-D");
  const int64_t V = table.shape[0], H = table.shape[1];
  const int64_t N = static_cast<int64_t>(ids.size());
  Tensor out = zeros({N, H}, compute_dtype());
  dispatch(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < N; ++i) {
      if (ids[i] < 0 || ids[i] >= V)
        input_error("token id ", ids[i], " at input position ", i, " is outside the embedding table [0, ", V, ")");
      cpu::load_weight(table, static_cast<size_t>(ids[i] * H), static_cast<size_t>(H), out.data<T>() + i * H,
                       gpu_storage());
      if (q8_0() && H % cpu::kQ8Block == 0) cpu::q8_0_round(out.data<T>() + i * H, H);  // a Q8_0 table's row
    }
  });
  stats_.weight_bytes += static_cast<double>(N * H) * dtype_size(table.dtype);
  return store(out);
}

Tensor CpuBackend::add(const Tensor& a0, const Tensor& b0) {
  cpu::check_same_shape(a0, b0, "add");
  const Tensor a = wide(a0), b = wide(b0);
  Tensor out = zeros(a.shape, a.dtype);
  dispatch(a.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *pa = a.data<T>(), *pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
  });
  return store(out);
}

Tensor CpuBackend::sigmoid_mul(const Tensor& x0, const Tensor& gate0) {
  const bool bcast = gate0.cols() == 1 && x0.cols() != 1;
  DEGEN_ASSERT(gate0.dtype == x0.dtype && gate0.rows() == x0.rows() && (bcast || gate0.cols() == x0.cols()),
               "sigmoid_mul: ", shape_str(x0.shape), " and gate ", shape_str(gate0.shape));
  const Tensor x = wide(x0), gate = wide(gate0);
  Tensor out = zeros(x.shape, x.dtype);
  dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *px = x.data<T>(), *pg = gate.data<T>();
    T* po = out.data<T>();
    const int64_t R = x.rows(), C = x.cols();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        double g = bcast ? pg[r] : pg[r * C + c];
        po[r * C + c] = static_cast<T>(px[r * C + c] * cpu::sigmoid(g));
      }
  });
  return store(out);
}

Tensor CpuBackend::swiglu(const Tensor& gate0, const Tensor& up0) {
  cpu::check_same_shape(gate0, up0, "swiglu");
  const Tensor gate = wide(gate0), up = wide(up0);
  Tensor out = zeros(gate.shape, gate.dtype);
  dispatch(gate.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *pg = gate.data<T>(), *pu = up.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = gate.numel(); i < n; ++i) po[i] = static_cast<T>(cpu::silu(pg[i]) * pu[i]);
  });
  return store(out);
}

void CpuBackend::mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) {
  const int64_t V = logits.cols();
  if (static_cast<int64_t>(mask.size()) != V)
    input_error("vocabulary mask has ", mask.size(), " entries, expected the model's vocab_size ", V);
  const double ninf = -std::numeric_limits<double>::infinity();  // exact in every float dtype but e4m3
  for (int64_t r = 0; r < logits.rows(); ++r)
    for (int64_t v = 0; v < V; ++v)
      if (mask[v]) cpu::store_elem(logits.raw(), logits.dtype, static_cast<size_t>(r * V + v), ninf);
}

}  // namespace degen
