// CPU norms (spec §4.2): zero-centred RMSNorm x̂(1+w), plain RMSNorm x̂w, the GDN gated RMSNorm
// w ⊙ x̂ ⊙ silu(z) (norm before gate), and the GDN q/k L2 norm x / sqrt(Σx² + eps).
// note: sums of squares are accumulated in double; each output is rounded to T once (and under
// precision=bf16 to bf16 from there: computed in fp32, rounded once on output, spec §4.10).
// Faults (numerics()): gdn-norm-plus-one (the gated norm uses 1 + w), gdn-skip-l2norm (x * scale);
// norm-double-plus-one reaches the RMSNorm as NormKind::shifted_twice (2 + w).
#include <cmath>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

using cpu::dispatch;

namespace {
template <typename T>
double inv_rms(const T* x, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  return 1.0 / std::sqrt(ss / double(n) + eps);
}
}  // namespace

Tensor CpuBackend::do_rmsnorm(const Tensor& x0, const TensorView& w, double eps, NormKind kind) {
  const Tensor x = wide(x0);
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = zeros(x.shape, x.dtype);
  dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<double> wv = cpu::weight_vector<double>(w, gpu_storage());
    if (const double shift = norm_weight_shift(kind); shift != 0.0)  // 1 + w (2 + w: fault norm-double-plus-one)
      for (double& v : wv) v += shift;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      const T* xr = px + r * C;
      double s = inv_rms(xr, C, eps);
      for (int64_t c = 0; c < C; ++c) po[r * C + c] = static_cast<T>(double(xr[c]) * s * wv[c]);
    }
  });
  return store(out);
}

Tensor CpuBackend::do_gated_rmsnorm(const Tensor& x0, const Tensor& z0, const TensorView& w, double eps) {
  const Tensor x = wide(x0), z = wide(z0);
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = zeros(x.shape, x.dtype);
  dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<double> wv = cpu::weight_vector<double>(w, gpu_storage());
    if (numerics_.has(Fault::gdn_norm_plus_one))  // fault: the plain weight taken as zero-centred
      for (double& v : wv) v += 1.0;
    const T *px = x.data<T>(), *pz = z.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      double s = inv_rms(px + r * C, C, eps);
      for (int64_t c = 0; c < C; ++c)
        po[r * C + c] = static_cast<T>(wv[c] * (double(px[r * C + c]) * s) * cpu::silu(pz[r * C + c]));
    }
  });
  return store(out);
}

Tensor CpuBackend::l2norm(const Tensor& x0, double eps, double scale) {
  const Tensor x = wide(x0);
  const int64_t R = x.rows(), C = x.cols();
  const bool skip = numerics_.has(Fault::gdn_skip_l2norm);  // fault: scale only, no normalisation
  Tensor out = zeros(x.shape, x.dtype);
  dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(px[r * C + c]) * double(px[r * C + c]);
      double s = skip ? scale : scale / std::sqrt(ss + eps);
      for (int64_t c = 0; c < C; ++c) po[r * C + c] = static_cast<T>(double(px[r * C + c]) * s);
    }
  });
  return store(out);
}

}  // namespace degen
