// CudaBackend MoE routing (kernels/moe.cu; src/cpu/moe.cpp is the reference): softmax over all
// experts in fp32, top-k, optional renormalisation, on the device; the routing comes back to the
// host (the engine drives the experts: gather_rows, matmul, swiglu, scatter_add_rows).
// Fault moe-no-renorm reaches here as renormalise = false (engine level).
#include "cuda/bf16_args.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "moe.h"

namespace degen {

MoeRouting CudaBackend::moe_route(const Tensor& logits, int k, bool renormalise) {
  require_device(logits, "moe_route");
  const int64_t R = logits.rows(), E = logits.cols();
  DEGEN_ASSERT(k >= 1 && k <= E, "moe_route: top-", k, " of ", E, " experts");
  Tensor ex = device_tensor({R, k}, DType::i32, "moe experts");
  Tensor wt = device_tensor({R, k}, DType::f32, "moe weights");
  cuda::with_act(logits.dtype, "moe_route", [&](auto a) {
    using T = decltype(a);
    cuda::moe_route_cuda<T>(cuda::cptr<T>(logits), R, static_cast<int>(E), k, renormalise, ex.data<int32_t>(),
                            wt.data<float>(), context()->stream());
  });
  const Tensor hx = to_host(ex), hw = to_host(wt);
  MoeRouting out;
  out.k = k;
  out.experts.assign(hx.data<int32_t>(), hx.data<int32_t>() + R * k);
  out.weights.assign(hw.data<float>(), hw.data<float>() + R * k);
  return out;
}

}  // namespace degen
