// The typed views of device tensors the CUDA op files pass to the kernels' launchers, and the
// activation-dtype dispatch they share: bf16 on the GPU path, fp32 on the reference
// (precision=ref: CudaBackend::reference()). Weights are bf16, or fp32 where the reference keeps a
// wider stored weight (CudaBackend::weight).
#pragma once
#include <cuda_bf16.h>

#include <stdexcept>

#include "engine/tensor.h"
#include "util/dtype.h"
#include "util/error.h"

namespace degen::cuda {

using bf16 = __nv_bfloat16;
inline const bf16* cbf(const Tensor& t) { return static_cast<const bf16*>(t.raw()); }
inline bf16* mbf(Tensor& t) { return static_cast<bf16*>(t.raw()); }
template <typename T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.raw()); }
template <typename T>
T* mptr(Tensor& t) { return static_cast<T*>(t.raw()); }

// f(T{}) with T = bf16 or float, the device type of an activation (or weight) dtype.
template <typename F>
void with_act(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::bf16: f(bf16{}); return;
    case DType::f32: f(float{}); return;
    default: throw std::logic_error(cat("cuda backend: ", op, " takes bf16 or f32 tensors, got ", dtype_name(d)));
  }
}
// f(T{}, W{}) for activations of dtype `a` and a weight of dtype `w`: (bf16, bf16) on the GPU path,
// (float, bf16) or (float, float) on the reference. Other pairs are a logic error.
template <typename F>
void with_act_weight(DType a, DType w, const char* op, F&& f) {
  if (a == DType::bf16 && w == DType::bf16) return f(bf16{}, bf16{});
  if (a == DType::f32 && w == DType::bf16) return f(float{}, bf16{});
  if (a == DType::f32 && w == DType::f32) return f(float{}, float{});
  throw std::logic_error(cat("cuda backend: ", op, ": activations ", dtype_name(a), " with a weight in ", dtype_name(w)));
}

}  // namespace degen::cuda
