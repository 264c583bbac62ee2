// Host-side dtype dispatch for the launchers: calls f(T{}) with T the device type of a float DType.
#pragma once
#include <stdexcept>

#include "kernels/common.cuh"
#include "util/dtype.h"
#include "util/error.h"

namespace degen::cuda {

template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(bf16{}); return;
    case DType::f16: f(__half{}); return;
    case DType::f8_e4m3: f(e4m3{}); return;
    default: throw std::logic_error(cat(op, ": dtype ", dtype_name(t), " is not a device float dtype"));
  }
}

}  // namespace degen::cuda
