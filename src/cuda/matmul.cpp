// CudaBackend matrix product y = x Wᵀ (kernels/matmul.cu; src/cpu/matmul.cpp is the reference):
// the weight's device copy (uploaded once); the matrix-vector kernel up to kGemvMaxRows rows and
// cuBLAS above (gemm=auto), cuBLAS (gemm=cublas) or the plain tiled kernel (gemm=simple).
// GPU path: bf16 x bf16 -> bf16 with fp32 sums. Reference (precision=ref): fp32 x and y; a weight
// kept in fp32 goes to the fp32 GEMM as it is, a bf16 one is widened exactly to fp32 a block of
// rows at a time (kRefWidenBytes of scratch), so the device holds the weights as stored, not twice.
#include <algorithm>

#include "cuda/bf16_args.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "engine/run_config.h"
#include "kernels/layout.h"
#include "kernels/matmul.h"
#include "util/error.h"

namespace degen {

GemmKind gemm_kind(const std::optional<GemmMode>& gemm) {
  switch (gemm.value_or(GemmMode::automatic)) {
    case GemmMode::automatic: return GemmKind::automatic;
    case GemmMode::cublas: return GemmKind::cublas;
    case GemmMode::simple: return GemmKind::simple;
  }
  return GemmKind::automatic;
}

namespace {
// Scratch of one block of widened weight rows on the reference path: large enough that cuBLAS sees
// long products (a 5120-wide row is 20 KiB: 3,276 rows), small beside the model.
constexpr int64_t kRefWidenBytes = int64_t(64) << 20;
// A product's weight must be [out, in] for rows of `in`.
void check_product_weight(const TensorView& w, int64_t in) {
  if (w.shape.size() != 2 || w.shape[1] != in)
    input_error("matmul: weight ", w.name, " has shape ", shape_str(w.shape), ", expected [out, ", in, "]");
}
}  // namespace

// Whether the products of x go to the fused matrix-vector kernels: the bf16 path under gemm=auto
// with decode-sized x.
bool CudaBackend::gemv_rows(const Tensor& x) const {
  return gemm_ == GemmKind::automatic && x.dtype == DType::bf16 && x.rows() <= cuda::kGemvMaxRows;
}

bool CudaBackend::gemv_prologue_fits(const Tensor& x) const {
  return gemv_rows(x) && x.rows() * x.cols() * 2 <= cuda::kGemvPrologueSmemBytes;
}

bool CudaBackend::gemv_norm(const Tensor& h, const PreNorm& pre, cuda::GemvPrologue& p) {
  if (!gemv_prologue_fits(h)) return false;
  DEGEN_ASSERT(pre.w && pre.w->numel() == h.cols(), "rmsnorm weight ", pre.w ? pre.w->name : "(none)", " for rows of ",
               h.cols());
  const Tensor& W = weight(*pre.w);
  if (W.dtype != DType::bf16) return false;
  p.kind = cuda::GemvPrologue::rmsnorm;
  p.w = cuda::cbf(W);
  p.eps = static_cast<float>(pre.eps);
  p.w_shift = norm_weight_shift(pre.kind);
  return true;
}

Tensor CudaBackend::matmul(const Tensor& x, const TensorView& w) {
  require_device(x, "matmul");
  check_product_weight(w, x.cols());
  DEGEN_ASSERT(x.dtype == act_dtype(), "matmul: ", dtype_name(act_dtype()), " activations, got ", dtype_name(x.dtype));
  if (gemv_rows(x)) return gemv_one(x, w, cuda::GemvPrologue{}, nullptr);
  const int64_t N = x.rows(), in = x.cols(), out = w.shape[0];
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  Tensor y = device_tensor(shape, x.dtype, "matmul");
  if (N == 0 || out == 0) return y;
  const Tensor& W = weight(w);
  stats_.matmul_flops += 2.0 * double(N) * double(in) * double(out);
  stats_.weight_bytes += static_cast<double>(W.nbytes());
  if (x.dtype == DType::bf16) {
    if (gemm_ != GemmKind::simple)
      cuda::matmul_bf16_cublas(context()->cublas(), cuda::cbf(x), cuda::cbf(W), cuda::mbf(y), N, in, out);
    else
      cuda::matmul_simple_cuda(cuda::cbf(x), cuda::cbf(W), cuda::mbf(y), N, in, out, context()->stream());
    return y;
  }
  // the reference: fp32 activations
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (gemm_ == GemmKind::simple) {
    cuda::with_act(W.dtype, "matmul weight", [&](auto z) {
      using Wt = decltype(z);
      cuda::matmul_simple_cuda(xp, cuda::cptr<Wt>(W), yp, N, in, out, context()->stream());
    });
  } else if (W.dtype == DType::f32) {
    cuda::matmul_f32_cublas(context()->cublas(), xp, W.data<float>(), yp, N, in, out, out);
  } else {
    DEGEN_ASSERT(W.dtype == DType::bf16, "matmul: weight ", w.name, " on the device in ", dtype_name(W.dtype));
    const int64_t rows = std::clamp<int64_t>(kRefWidenBytes / (in * 4), 1, out);
    Tensor wide = device_tensor({rows, in}, DType::f32, "matmul widened weight rows");
    for (int64_t o0 = 0; o0 < out; o0 += rows) {
      const int64_t n = std::min(rows, out - o0);
      cuda::convert_cuda(cuda::cbf(W) + o0 * in, DType::bf16, wide.raw(), DType::f32, n * in, context()->stream());
      cuda::matmul_f32_cublas(context()->cublas(), xp, wide.data<float>(), yp + o0, N, in, n, out);
    }
  }
  return y;
}

Tensor CudaBackend::matmul_add(const Tensor& x, const TensorView& w, const Tensor& res) {
  if (!gemv_rows(x)) return Backend::matmul_add(x, w, res);
  return gemv_one(x, w, cuda::GemvPrologue{}, &res);
}

Tensor CudaBackend::matmul_gate_add(const Tensor& x, const TensorView& w, const Tensor& gate, const Tensor& res) {
  if (!gemv_rows(x) || gate.dtype != x.dtype || gate.shape != std::vector<int64_t>{x.rows(), 1})
    return Backend::matmul_gate_add(x, w, gate, res);
  require_device(gate, "sigmoid_mul");
  return gemv_one(x, w, cuda::GemvPrologue{}, &res, &gate);
}

Tensor CudaBackend::gated_norm_matmul(const Tensor& x, const Tensor& z, const TensorView& norm_w, double eps,
                                      const TensorView& w, const Tensor* res) {
  const int64_t g = norm_w.numel();
  if (!gemv_prologue_fits(x) || z.shape != x.shape || z.dtype != x.dtype || g <= 0 || x.cols() % g != 0)
    return Backend::gated_norm_matmul(x, z, norm_w, eps, w, res);
  require_device(z, "gated_rmsnorm");
  const Tensor& W = weight(norm_w);
  if (W.dtype != DType::bf16) return Backend::gated_norm_matmul(x, z, norm_w, eps, w, res);
  cuda::GemvPrologue p;
  p.kind = cuda::GemvPrologue::gated_rmsnorm;
  p.w = cuda::cbf(W);
  p.z = cuda::cbf(z);
  p.group = g;
  p.eps = static_cast<float>(eps);
  p.w_shift = numerics_.has(Fault::gdn_norm_plus_one) ? 1.0f : 0.0f;
  return gemv_one(x, w, p, res);
}

Tensor CudaBackend::sigmoid_gate_matmul(const Tensor& x, const Tensor& gate, const TensorView& w, const Tensor* res) {
  if (!gemv_prologue_fits(x) || gate.shape != x.shape || gate.dtype != x.dtype)
    return Backend::sigmoid_gate_matmul(x, gate, w, res);
  require_device(gate, "sigmoid_mul");
  cuda::GemvPrologue p;
  p.kind = cuda::GemvPrologue::sigmoid_gate;
  p.z = cuda::cbf(gate);
  return gemv_one(x, w, p, res);
}

// One matrix-vector product with a prologue and (res) the residual add in its epilogue, (row_gate)
// its scalar sigmoid gate before the add.
Tensor CudaBackend::gemv_one(const Tensor& x, const TensorView& w, const cuda::GemvPrologue& p, const Tensor* res,
                             const Tensor* row_gate) {
  require_device(x, "matmul");
  check_product_weight(w, x.cols());
  const int64_t N = x.rows(), in = x.cols(), out = w.shape[0];
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  if (res) {
    require_device(*res, "add");
    DEGEN_ASSERT(res->shape == shape && res->dtype == x.dtype, "matmul_add: residual ", shape_str(res->shape),
                 ", product ", shape_str(shape));
  }
  Tensor y = device_tensor(shape, x.dtype, res ? "matmul_add" : "matmul");
  if (N == 0 || out == 0) return y;
  const Tensor& W = weight(w);
  stats_.matmul_flops += 2.0 * double(N) * double(in) * double(out);
  stats_.weight_bytes += static_cast<double>(W.nbytes());
  cuda::matmul_gemv_bf16(cuda::cbf(x), cuda::cbf(W), cuda::mbf(y), N, in, out, p, res ? cuda::cbf(*res) : nullptr,
                         context()->stream(), row_gate ? cuda::cbf(*row_gate) : nullptr);
  return y;
}

std::vector<Tensor> CudaBackend::matmul_many(const Tensor& x, std::span<const TensorView* const> ws) {
  if (!gemv_rows(x) || ws.empty() || ws.size() > size_t(cuda::kGemvMaxMats)) return Backend::matmul_many(x, ws);
  return gemv_many(x, ws, cuda::GemvPrologue{});
}

std::vector<Tensor> CudaBackend::norm_matmul_many(const Tensor& h, const PreNorm& pre,
                                                  std::span<const TensorView* const> ws) {
  cuda::GemvPrologue nm;
  if (ws.empty() || ws.size() > size_t(cuda::kGemvMaxMats) || !gemv_norm(h, pre, nm))
    return Backend::norm_matmul_many(h, pre, ws);
  return gemv_many(h, ws, nm);
}

std::vector<Tensor> CudaBackend::gemv_many(const Tensor& x, std::span<const TensorView* const> ws,
                                           const cuda::GemvPrologue& nm) {
  require_device(x, "matmul");
  const int64_t N = x.rows(), in = x.cols();
  cuda::GemvMany m;
  std::vector<Tensor> out;
  int64_t rows = 0;
  for (const TensorView* w : ws) {
    check_product_weight(*w, in);
    const Tensor& W = weight(*w);
    std::vector<int64_t> shape = x.shape;
    shape.back() = w->shape[0];
    out.push_back(device_tensor(shape, x.dtype, "matmul"));
    stats_.matmul_flops += 2.0 * double(N) * double(in) * double(w->shape[0]);
    stats_.weight_bytes += static_cast<double>(W.nbytes());
    m.w[m.n] = cuda::cbf(W);
    m.y[m.n] = cuda::mbf(out.back());
    m.out[m.n] = w->shape[0];
    rows += w->shape[0];
    m.rows_end[m.n] = rows;
    m.n++;
  }
  cuda::matmul_gemv_many_bf16(cuda::cbf(x), m, N, in, nm, context()->stream());
  return out;
}

Tensor CudaBackend::matmul_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up) {
  if (!gemv_rows(x) || gate.shape != up.shape) return Backend::matmul_swiglu(x, gate, up);
  return gemv_swiglu(x, gate, up, cuda::GemvPrologue{});
}

Tensor CudaBackend::norm_matmul_swiglu(const Tensor& h, const PreNorm& pre, const TensorView& gate,
                                       const TensorView& up) {
  cuda::GemvPrologue nm;
  if (gate.shape != up.shape || !gemv_norm(h, pre, nm)) return Backend::norm_matmul_swiglu(h, pre, gate, up);
  return gemv_swiglu(h, gate, up, nm);
}

Tensor CudaBackend::gemv_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up,
                                const cuda::GemvPrologue& nm) {
  require_device(x, "matmul");
  const int64_t N = x.rows(), in = x.cols();
  check_product_weight(gate, in);
  check_product_weight(up, in);
  const Tensor& G = weight(gate);
  const Tensor& U = weight(up);
  const int64_t out = gate.shape[0];
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  Tensor y = device_tensor(shape, x.dtype, "swiglu");
  stats_.matmul_flops += 4.0 * double(N) * double(in) * double(out);
  stats_.weight_bytes += static_cast<double>(G.nbytes() + U.nbytes());
  cuda::matmul_gemv_swiglu_bf16(cuda::cbf(x), cuda::cbf(G), cuda::cbf(U), cuda::mbf(y), N, in, out, nm,
                                context()->stream());
  return y;
}

}  // namespace degen
