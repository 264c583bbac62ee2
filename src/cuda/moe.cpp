// CudaBackend MoE routing (kernels/moe.cu; src/cpu/moe.cpp is the reference): softmax over all
// experts in fp32, top-k, optional renormalisation, on the device. moe_route brings the routing back
// to the host (the engine drives the experts: gather_rows, matmul, swiglu, scatter_add_rows);
// moe_experts_on_device (decode sizes) runs the experts where the routing is.
// Fault moe-no-renorm reaches here as renormalise = false (engine level).
#include "cuda/bf16_args.h"
#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"

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

// The block's expert table, built the first time outside a graph step (it uploads every expert);
// null inside one before that (the engine then routes on the host), empty where the experts do not
// suit the kernels.
const Tensor* CudaBackend::moe_table(const std::vector<MlpWeights>& experts) {
  auto it = moe_tables_.find(&experts);
  if (it != moe_tables_.end() && it->second.same(experts)) return &it->second.table;
  if (graphs_segment()) return nullptr;
  MoeTable mt;
  mt.n = experts.size();
  mt.first = experts[0].gate;
  mt.last = experts.back().down;
  mt.first_data = mt.first ? mt.first->data : nullptr;
  mt.last_data = mt.last ? mt.last->data : nullptr;
  bool ok = experts[0].gate && experts[0].gate->shape.size() == 2;
  const int64_t I = ok ? experts[0].gate->shape[0] : 0, H = ok ? experts[0].gate->shape[1] : 0;
  ok = ok && H % 8 == 0 && I % 8 == 0;
  const std::vector<int64_t> gu{I, H}, dn{H, I};
  std::vector<int64_t> ptrs;
  for (const MlpWeights& e : experts) {
    ok = ok && e.gate && e.up && e.down && e.gate->shape == gu && e.up->shape == gu && e.down->shape == dn;
    if (!ok) break;
    for (const TensorView* w : {e.gate, e.up, e.down}) {
      const Tensor& W = weight(*w);
      ok = ok && W.dtype == DType::bf16 && cuda::aligned16(W.raw());
      ptrs.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(W.raw())));
    }
  }
  static_assert(sizeof(cuda::MoeExpertPtrs) == 3 * sizeof(int64_t), "the table's rows are three pointers");
  if (ok) mt.table = upload(ptrs, DType::i64, "moe expert table");
  return &(moe_tables_[&experts] = std::move(mt)).table;
}

std::optional<Tensor> CudaBackend::moe_experts_on_device(const Tensor& x, const Tensor& logits,
                                                         const std::vector<MlpWeights>& experts, int k,
                                                         bool renormalise) {
  if (x.dtype != DType::bf16 || gemm_ != GemmKind::automatic || experts.empty()) return std::nullopt;
  require_device(x, "moe_experts_on_device");
  require_device(logits, "moe_experts_on_device");
  const int64_t N = x.rows(), H = x.cols(), E = logits.cols();
  DEGEN_ASSERT(logits.rows() == N && E == static_cast<int64_t>(experts.size()) && k >= 1 && k <= E &&
                   logits.dtype == x.dtype, "moe_experts_on_device: logits ", shape_str(logits.shape), " for ", N,
               " rows and ", experts.size(), " experts, top-", k);
  const Tensor* table = moe_table(experts);
  if (!table || table->empty() || !gemv_rows(x) || N == 0 || experts[0].gate->shape[1] != H || !cuda::aligned16(x.raw()))
    return std::nullopt;
  const int64_t I = experts[0].gate->shape[0];
  Tensor ex = device_tensor({N, k}, DType::i32, "moe experts");
  Tensor wt = device_tensor({N, k}, DType::f32, "moe weights");
  Tensor h = device_tensor({N * k, I}, DType::bf16, "moe expert swiglu");
  Tensor routed = device_tensor({N, H}, DType::bf16, "moe routed");
  stats_.matmul_flops += 6.0 * double(N * k) * double(H) * double(I);
  // k experts of 3 bf16 matrices per row: what the step reads at most (the routing is not known on
  // the host; rows sharing an expert read it once in the emulator's page count, so bench --count's
  // floor ratio falls under 1 at batch > 1 when they do)
  stats_.weight_bytes += 6.0 * double(N * k) * double(H) * double(I);
  cudaStream_t s = context()->stream();
  cuda::moe_route_cuda<__nv_bfloat16>(cuda::cbf(logits), N, static_cast<int>(E), k, renormalise, ex.data<int32_t>(),
                                      wt.data<float>(), s);
  cuda::moe_experts_cuda(cuda::cbf(x), ex.data<int32_t>(), wt.data<float>(),
                         static_cast<const cuda::MoeExpertPtrs*>(table->raw()), cuda::mbf(h),
                         cuda::mbf(routed), N, H, I, k, s);
  return routed;
}

}  // namespace degen
