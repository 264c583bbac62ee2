// CudaBackend norms (kernels/rmsnorm.cu; src/cpu/rmsnorm.cpp is the reference): zero-centred and
// plain RMSNorm, the GDN gated RMSNorm, the GDN q/k L2 norm.
// Faults (numerics()): gdn-norm-plus-one (gated norm with 1 + w), gdn-skip-l2norm (x * scale);
// norm-double-plus-one reaches the RMSNorm as NormKind::shifted_twice (weight 2 + w).
#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/rmsnorm.h"

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
                              norm_weight_shift(kind), context()->stream());
  });
  return out;
}

std::pair<Tensor, Tensor> CudaBackend::add_rmsnorm(const Tensor& a, const Tensor& b, const TensorView& w, double eps,
                                                   NormKind kind) {
  require_device(a, "add_rmsnorm");
  require_device(b, "add_rmsnorm");
  DEGEN_ASSERT(a.shape == b.shape && a.dtype == b.dtype, "add_rmsnorm: operands differ: ", shape_str(a.shape), " vs ",
               shape_str(b.shape));
  DEGEN_ASSERT(w.numel() == a.cols(), "rmsnorm weight ", w.name, " has ", w.numel(), " elements, rows have ", a.cols());
  const int64_t R = a.rows(), C = a.cols();
  Tensor u = device_tensor(a.shape, a.dtype, "add");
  Tensor out = device_tensor(a.shape, a.dtype, "rmsnorm");
  const Tensor& W = weight(w);
  cuda::with_act_weight(a.dtype, W.dtype, "add_rmsnorm", [&](auto x, auto y) {
    using T = decltype(x);
    using Wt = decltype(y);
    cuda::add_rmsnorm_cuda<T, Wt>(cptr<T>(a), cptr<T>(b), cptr<Wt>(W), mptr<T>(u), mptr<T>(out), R, C,
                                  static_cast<float>(eps), norm_weight_shift(kind), context()->stream());
  });
  return {std::move(u), std::move(out)};
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
                                    numerics_.has(Fault::gdn_norm_plus_one) ? 1.0f : 0.0f, context()->stream());
  });
  return out;
}

Backend::GdnQkv CudaBackend::gdn_split_norm(const Tensor& conv, int64_t nk, int64_t dk, int64_t nv, int64_t dv,
                                            double eps, double q_scale) {
  require_device(conv, "gdn_split_norm");
  const int64_t N = conv.rows();
  DEGEN_ASSERT(conv.cols() == 2 * nk * dk + nv * dv, "gdn_split_norm: conv has ", conv.cols(), " columns, expected ",
               2 * nk * dk + nv * dv);
  GdnQkv r;
  r.q = device_tensor({N, nk, dk}, conv.dtype, "l2norm");
  r.k = device_tensor({N, nk, dk}, conv.dtype, "l2norm");
  r.v = device_tensor({N, nv, dv}, conv.dtype, "slice_cols");
  cuda::with_act(conv.dtype, "gdn_split_norm", [&](auto a) {
    using T = decltype(a);
    cuda::gdn_split_norm_cuda<T>(cptr<T>(conv), mptr<T>(r.q), mptr<T>(r.k), mptr<T>(r.v), N, nk, dk, nv, dv,
                                 static_cast<float>(eps), static_cast<float>(q_scale),
                                 numerics_.has(Fault::gdn_skip_l2norm), context()->stream());
  });
  return r;
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
