// CudaBackend matrix product y = x Wᵀ (kernels/matmul.cu; src/cpu/matmul.cpp is the reference):
// the weight's bf16 device copy (uploaded once), cuBLAS or the plain tiled kernel (gemm=simple).
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "matmul.h"

namespace degen {

Tensor CudaBackend::matmul(const Tensor& x, const TensorView& w) {
  require_device(x, "matmul");
  if (w.shape.size() != 2 || w.shape[1] != x.cols())
    input_error("matmul: weight ", w.name, " has shape ", shape_str(w.shape), ", expected [out, ", x.cols(), "]");
  DEGEN_ASSERT(x.dtype == DType::bf16, "matmul: bf16 activations, got ", dtype_name(x.dtype));
  const int64_t N = x.rows(), in = x.cols(), out = w.shape[0];
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  Tensor y = device_tensor(shape, DType::bf16, "matmul");
  if (N == 0 || out == 0) return y;
  const Tensor& W = weight(w);
  const auto* xp = static_cast<const __nv_bfloat16*>(x.raw());
  const auto* wp = static_cast<const __nv_bfloat16*>(W.raw());
  auto* yp = static_cast<__nv_bfloat16*>(y.raw());
  if (gemm_ == GemmKind::cublas)
    cuda::matmul_bf16_cublas(context()->cublas(), xp, wp, yp, N, in, out);
  else
    cuda::matmul_bf16_simple_cuda(xp, wp, yp, N, in, out, context()->stream());
  stats_.matmul_flops += 2.0 * double(N) * double(in) * double(out);
  stats_.weight_bytes += static_cast<double>(W.nbytes());
  return y;
}

}  // namespace degen
