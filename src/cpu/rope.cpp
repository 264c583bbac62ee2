// CPU partial rotary embedding, rotate-half (NeoX) pairing (spec §4.5): for i < R/2,
//   u'_i = u_i c_i - u_{i+R/2} s_i,   u'_{i+R/2} = u_{i+R/2} c_i + u_i s_i,   dims >= R untouched.
// note: ω_i = 1 / θ^(2i/R) and the angle p·ω_i are computed in fp32 exactly as HF does (the angle's
// fp32 rounding is part of the model's definition); cos/sin of that angle are then exact to T.
// Under precision=bf16, cos/sin are rounded to bf16 (HF and vLLM keep their cos/sin caches in the
// model dtype), the rotation is computed in fp32 and the result rounded to bf16 once.
// Fault rope-interleaved (numerics()): the GPT-J pairing (2i, 2i+1), frequency i, instead.
#include <cmath>
#include <cstring>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

void CpuBackend::rope_partial(Tensor& x0, const std::vector<int64_t>& pos, int rotary_dim, double theta) {
  DEGEN_ASSERT(x0.shape.size() == 3, "rope_partial expects [N, heads, D], got ", shape_str(x0.shape));
  Tensor x = wide(x0);  // x0 itself in fp32/fp64; a working copy of a bf16 tensor
  const bool interleaved = numerics_.has(Fault::rope_interleaved);
  const bool cs_bf16 = gpu_storage();
  const int64_t N = x.shape[0], heads = x.shape[1], D = x.shape[2];
  DEGEN_ASSERT(static_cast<int64_t>(pos.size()) == N, "rope_partial: ", pos.size(), " positions for ", N, " rows");
  DEGEN_ASSERT(rotary_dim % 2 == 0 && rotary_dim <= D, "rotary_dim ", rotary_dim, " for head dim ", D);
  const int m = rotary_dim / 2;
  const std::vector<float> inv_freq =  // fault rope-freq-head-dim: the exponent counts head_dim
      rope_inv_freq(rotary_dim, theta, numerics_.has(Fault::rope_freq_head_dim) ? static_cast<int>(D) : 0);
  cpu::dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = x.data<T>();
    std::vector<double> c(static_cast<size_t>(m)), s(static_cast<size_t>(m));
    for (int64_t n = 0; n < N; ++n) {
      for (int i = 0; i < m; ++i) {
        float phi = static_cast<float>(pos[n]) * inv_freq[i];
        c[i] = static_cast<T>(std::cos(static_cast<double>(phi)));
        s[i] = static_cast<T>(std::sin(static_cast<double>(phi)));
        if (cs_bf16) {
          c[i] = round_bf16(static_cast<float>(c[i]));
          s[i] = round_bf16(static_cast<float>(s[i]));
        }
      }
      for (int64_t h = 0; h < heads; ++h) {
        T* u = p + (n * heads + h) * D;
        for (int i = 0; i < m; ++i) {
          const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + m;  // the rotated pair
          double a = u[i0], b = u[i1];
          u[i0] = static_cast<T>(a * c[i] - b * s[i]);
          u[i1] = static_cast<T>(b * c[i] + a * s[i]);
        }
      }
    }
  });
  if (x.raw() != x0.raw()) {  // back into the caller's (narrower) tensor, rounded once
    const Tensor r = convert(x, x0.dtype);
    std::memcpy(x0.raw(), r.raw(), r.nbytes());
  }
}

}  // namespace degen
