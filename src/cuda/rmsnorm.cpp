// CudaBackend norms (kernels/rmsnorm.cu; src/cpu/rmsnorm.cpp is the reference): zero-centred and
// plain RMSNorm, the GDN gated RMSNorm, the GDN q/k L2 norm.
// Faults (numerics()): gdn-norm-plus-one (gated norm with 1 + w), gdn-skip-l2norm (x * scale).
#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "rmsnorm.h"

namespace degen {

namespace {
using cuda::bf16;
using cuda::cbf;
using cuda::check_bf16;
using cuda::mbf;
}  // namespace

Tensor CudaBackend::do_rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) {
  require_device(x, "rmsnorm");
  check_bf16(x, "rmsnorm");
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = device_tensor(x.shape, DType::bf16, "rmsnorm");
  cuda::rmsnorm_cuda(cbf(x), cbf(weight(w)), mbf(out), R, C, static_cast<float>(eps), kind == NormKind::zero_centred,
                     context()->stream());
  return out;
}

Tensor CudaBackend::do_gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) {
  require_device(x, "gated_rmsnorm");
  require_device(z, "gated_rmsnorm");
  check_bf16(x, "gated_rmsnorm");
  const int64_t R = x.rows(), C = x.cols();
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
