// CudaBackend elementwise ops (kernels/elementwise.cu; src/cpu/elementwise.cpp is the reference):
// embedding gather, residual add, sigmoid gate, SwiGLU, logits padding mask.
#include "cuda/bf16_args.h"
#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/elementwise.h"

namespace degen {

namespace {
using cuda::cptr;
using cuda::mptr;
using cuda::with_act;

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape != b.shape || a.dtype != b.dtype)
    throw std::logic_error(cat("cuda backend: ", op, ": ", shape_str(a.shape), " ", dtype_name(a.dtype), " vs ",
                               shape_str(b.shape), " ", dtype_name(b.dtype)));
}
}  // namespace

Tensor CudaBackend::embed(const TensorView& table, const std::vector<int32_t>& ids) {
  DEGEN_ASSERT(table.shape.size() == 2, "embedding table must be 2-D");
  const int64_t V = table.shape[0], H = table.shape[1];
  const int64_t N = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      input_error("token id ", ids[i], " at input position ", i, " is outside the embedding table [0, ", V, ")");
  const Tensor& t = weight(table);
  Tensor idx = upload(ids, DType::i32, "embed ids");
  Tensor out = device_tensor({N, H}, act_dtype(), "embed");
  cuda::with_act_weight(act_dtype(), t.dtype, "embed", [&](auto a, auto w) {
    using T = decltype(a);
    using W = decltype(w);
    cuda::embed_cuda<T, W>(cptr<W>(t), H, idx.data<int32_t>(), N, mptr<T>(out), context()->stream());
  });
  stats().weight_bytes += static_cast<double>(N * H * static_cast<int64_t>(dtype_size(t.dtype)));
  return out;
}

Tensor CudaBackend::add(const Tensor& a, const Tensor& b) {
  require_device(a, "add");
  require_device(b, "add");
  check_same(a, b, "add");
  Tensor out = device_tensor(a.shape, a.dtype, "add");
  with_act(a.dtype, "add", [&](auto z) {
    using T = decltype(z);
    cuda::add_cuda<T>(cptr<T>(a), cptr<T>(b), mptr<T>(out), a.numel(), context()->stream());
  });
  return out;
}

Tensor CudaBackend::sigmoid_mul(const Tensor& x, const Tensor& gate) {
  require_device(x, "sigmoid_mul");
  require_device(gate, "sigmoid_mul");
  const bool bcast = gate.cols() == 1 && x.cols() != 1;
  DEGEN_ASSERT(gate.dtype == x.dtype && gate.rows() == x.rows() && (bcast || gate.cols() == x.cols()),
               "sigmoid_mul: ", shape_str(x.shape), " and gate ", shape_str(gate.shape));
  Tensor out = device_tensor(x.shape, x.dtype, "sigmoid_mul");
  with_act(x.dtype, "sigmoid_mul", [&](auto z) {
    using T = decltype(z);
    cuda::sigmoid_mul_cuda<T>(cptr<T>(x), cptr<T>(gate), mptr<T>(out), x.rows(), x.cols(), bcast, context()->stream());
  });
  return out;
}

Tensor CudaBackend::swiglu(const Tensor& gate, const Tensor& up) {
  require_device(gate, "swiglu");
  require_device(up, "swiglu");
  check_same(gate, up, "swiglu");
  Tensor out = device_tensor(gate.shape, gate.dtype, "swiglu");
  with_act(gate.dtype, "swiglu", [&](auto z) {
    using T = decltype(z);
    cuda::swiglu_cuda<T>(cptr<T>(gate), cptr<T>(up), mptr<T>(out), gate.numel(), context()->stream());
  });
  return out;
}

void CudaBackend::mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) {
  require_device(logits, "mask_logits");
  const int64_t V = logits.cols();
  if (static_cast<int64_t>(mask.size()) != V)
    input_error("vocabulary mask has ", mask.size(), " entries, expected the model's vocab_size ", V);
  Tensor m = upload(mask, DType::u8, "logits mask");
  cuda::mask_logits_cuda(logits.raw(), logits.dtype, logits.rows(), V, m.data<uint8_t>(), context()->stream());
}

}  // namespace degen
