// CudaBackend partial RoPE (kernels/rope.cu; src/cpu/rope.cpp is the reference).
// note: ω_i = 1 / θ^(2i/R) is computed here in fp32 with the CPU's expression, so both backends
// rotate by the same fp32 angles. Fault rope-interleaved (numerics()) reaches the kernel as a flag.
#include <cmath>

#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "rope.h"

namespace degen {

void CudaBackend::rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) {
  require_device(x, "rope_partial");
  DEGEN_ASSERT(x.shape.size() == 3, "rope_partial expects [N, heads, D], got ", shape_str(x.shape));
  const int64_t N = x.shape[0], heads = x.shape[1], D = x.shape[2];
  DEGEN_ASSERT(static_cast<int64_t>(pos.size()) == N, "rope_partial: ", pos.size(), " positions for ", N, " rows");
  DEGEN_ASSERT(rotary_dim % 2 == 0 && rotary_dim <= D, "rotary_dim ", rotary_dim, " for head dim ", D);
  const int m = rotary_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  Tensor p = upload(pos, DType::i64, "rope positions");
  Tensor f = upload(inv_freq, DType::f32, "rope frequencies");
  cuda::with_act(x.dtype, "rope_partial", [&](auto a) {
    using T = decltype(a);
    cuda::rope_partial_cuda<T>(cuda::mptr<T>(x), p.data<int64_t>(), f.data<float>(), N, heads, D, rotary_dim,
                               numerics_.has(Fault::rope_interleaved), context()->stream());
  });
}

}  // namespace degen
