// The bf16 views of device tensors and the dtype check that the bf16-only CUDA ops (elementwise,
// norms) share.
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
inline void check_bf16(const Tensor& t, const char* op) {
  if (t.dtype != DType::bf16)
    throw std::logic_error(cat("cuda backend: ", op, " takes bf16 activations, got ", dtype_name(t.dtype)));
}

}  // namespace degen::cuda
