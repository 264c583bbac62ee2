// CudaBackend norms (kernels/rmsnorm.cu; src/cpu/rmsnorm.cpp is the reference): zero-centred and
// plain RMSNorm, the GDN gated RMSNorm, the GDN q/k L2 norm.
// Faults (numerics()): gdn-norm-plus-one (gated norm with 1 + w), gdn-skip-l2norm (x * scale).
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "rmsnorm.h"

namespace degen {

namespace {
using bf16 = __nv_bfloat16;
const bf16* cbf(const Tensor& t) { return static_cast<const bf16*>(t.raw()); }
bf16* mbf(Tensor& t) { return static_cast<bf16*>(t.raw()); }
void check_bf16(const Tensor& t, const char* op) {
  if (t.dtype != DType::bf16)
    throw std::logic_error(cat("cuda backend: ", op, " takes bf16 activations, got ", dtype_name(t.dtype)));
}
}  // namespace

Tensor CudaBackend::rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) {
  require_device(x, "rmsnorm");
  check_bf16(x, "rmsnorm");
  const int64_t R = x.rows(), C = x.cols();
  DEGEN_ASSERT(w.numel() == C, "rmsnorm weight ", w.name, " has ", w.numel(), " elements, rows have ", C);
  Tensor out = device_tensor(x.shape, DType::bf16, "rmsnorm");
  cuda::rmsnorm_cuda(cbf(x), cbf(weight(w)), mbf(out), R, C, static_cast<float>(eps), kind == NormKind::zero_centred,
                     context()->stream());
  return out;
}

Tensor CudaBackend::gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) {
  require_device(x, "gated_rmsnorm");
  require_device(z, "gated_rmsnorm");
  DEGEN_ASSERT(x.shape == z.shape && x.dtype == z.dtype, "gated_rmsnorm: ", shape_str(x.shape), " vs ", shape_str(z.shape));
  check_bf16(x, "gated_rmsnorm");
  const int64_t R = x.rows(), C = x.cols();
  DEGEN_ASSERT(w.numel() == C, "gated norm weight ", w.name, " has ", w.numel(), " elements, rows have ", C);
  Tensor out = device_tensor(x.shape, DType::bf16, "gated_rmsnorm");
  cuda::gated_rmsnorm_cuda(cbf(x), cbf(z), cbf(weight(w)), mbf(out), R, C, static_cast<float>(eps),
                           numerics_.has(Fault::gdn_norm_plus_one), context()->stream());
  return out;
}

Tensor CudaBackend::l2norm(const Tensor& x, double eps, double scale) {
  require_device(x, "l2norm");
  check_bf16(x, "l2norm");
  Tensor out = device_tensor(x.shape, DType::bf16, "l2norm");
  cuda::l2norm_cuda(cbf(x), mbf(out), x.rows(), x.cols(), static_cast<float>(eps), static_cast<float>(scale),
                    numerics_.has(Fault::gdn_skip_l2norm), context()->stream());
  return out;
}

}  // namespace degen
