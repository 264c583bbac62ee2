// CudaBackend norms (kernels/rmsnorm.cu; src/cpu/rmsnorm.cpp is the reference): zero-centred and
// plain RMSNorm, the GDN gated RMSNorm, the GDN q/k L2 norm.
// Faults (numerics()): gdn-norm-plus-one (gated norm with 1 + w), gdn-skip-l2norm (x * scale).
#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "rmsnorm.h"

namespace degen {

namespace {
using cuda::cptr;
using cuda::mptr;
}  // namespace

Tensor CudaBackend::do_rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) {
  require_device(x, "rmsnorm");
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = device_tensor(x.shape, x.dtype, "rmsnorm");
  const Tensor& W = weight(w);
  cuda::with_act_weight(x.dtype, W.dtype, "rmsnorm", [&](auto a, auto b) {
    using T = decltype(a);
    using Wt = decltype(b);
    cuda::rmsnorm_cuda<T, Wt>(cptr<T>(x), cptr<Wt>(W), mptr<T>(out), R, C, static_cast<float>(eps),
                              kind == NormKind::zero_centred, context()->stream());
  });
  return out;
}

Tensor CudaBackend::do_gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) {
  require_device(x, "gated_rmsnorm");
  require_device(z, "gated_rmsnorm");
  DEGEN_ASSERT(z.dtype == x.dtype, "gated_rmsnorm: x ", dtype_name(x.dtype), ", z ", dtype_name(z.dtype));
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = device_tensor(x.shape, x.dtype, "gated_rmsnorm");
  const Tensor& W = weight(w);
  cuda::with_act_weight(x.dtype, W.dtype, "gated_rmsnorm", [&](auto a, auto b) {
    using T = decltype(a);
    using Wt = decltype(b);
    cuda::gated_rmsnorm_cuda<T, Wt>(cptr<T>(x), cptr<T>(z), cptr<Wt>(W), mptr<T>(out), R, C, static_cast<float>(eps),
                                    numerics_.has(Fault::gdn_norm_plus_one), context()->stream());
  });
  return out;
}

Tensor CudaBackend::l2norm(const Tensor& x, double eps, double scale) {
  require_device(x, "l2norm");
  Tensor out = device_tensor(x.shape, x.dtype, "l2norm");
  cuda::with_act(x.dtype, "l2norm", [&](auto a) {
    using T = decltype(a);
    cuda::l2norm_cuda<T>(cptr<T>(x), mptr<T>(out), x.rows(), x.cols(), static_cast<float>(eps),
                         static_cast<float>(scale), numerics_.has(Fault::gdn_skip_l2norm), context()->stream());
  });
  return out;
}

}  // namespace degen
