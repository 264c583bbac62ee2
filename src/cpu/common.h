// Internal helpers of the CPU backend: dtype dispatch, weight-row conversion, shape checks.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "model/safetensors.h"
#include "util/error.h"

namespace degen::cpu {

// Calls f(float{}) or f(double{}) for an activation dtype.
template <typename F>
decltype(auto) dispatch(DType t, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  throw std::logic_error(cat("cpu backend: activation dtype ", dtype_name(t), " is not f32/f64"));
}

// Elements [i0, i0 + n) of a weight (any float dtype) converted to T (exact for bf16/f16/f32 -> f32).
template <typename T>
void load_weight(const TensorView& w, size_t i0, size_t n, T* out) {
  switch (w.dtype) {
    case DType::f32: {
      const float* p = reinterpret_cast<const float*>(w.data) + i0;
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
      return;
    }
    case DType::bf16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data) + i0;
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(bf16_to_f32(p[i]));
      return;
    }
    case DType::f16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(w.data) + i0;
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(f16_to_f32(p[i]));
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(load_as_f32(w.data, w.dtype, i0 + i));
  }
}

// A whole small weight (norm weights, conv taps, gates) as T.
template <typename T>
std::vector<T> weight_vector(const TensorView& w) {
  std::vector<T> v(static_cast<size_t>(w.numel()));
  load_weight(w, 0, v.size(), v.data());
  return v;
}

// note: OpenMP regions are opened only for work worth a fork/join (about 1e6 multiply-adds or more):
// on a loaded machine a spinning barrier around a tiny op costs more than the op. Results do not
// depend on it (work is split by fixed tiles or heads, never by the thread count).
constexpr double kParallelMinWork = 1e6;

inline void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  DEGEN_ASSERT(a.shape == b.shape && a.dtype == b.dtype, op, ": operands differ: ", shape_str(a.shape), " vs ",
               shape_str(b.shape));
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
// torch.nn.functional.softplus(beta=1, threshold=20): x itself above the threshold.
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

}  // namespace degen::cpu
