// Internal helpers of the CPU backend: dtype dispatch, storage rounding, weight-row conversion,
// shape checks.
#pragma once
#include <bit>
#include <type_traits>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <algorithm>
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

// The value x takes when stored as dtype d (round to nearest even as the CUDA intrinsics do; e4m3
// saturating at 448), back in double. note: from a double, narrow dtypes round through fp32 first
// (only precision=fp64 with an explicit narrow storage toggle sees the double rounding).
inline double round_to(double x, DType d) {
  switch (d) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);
    case DType::bf16: return round_bf16(static_cast<float>(x));
    case DType::f16: return round_f16(static_cast<float>(x));
    case DType::f8_e4m3: return round_e4m3(static_cast<float>(x));
    default: throw std::logic_error(cat("round_to: ", dtype_name(d), " is not a float dtype"));
  }
}

// ggml's Q8_0 round trip (its quantize_row_q8_0 / dequantize_row_q8_0, as the llama.cpp GGUF format
// documents Q8_0): per block of 32 values, d = max|x| / 127 stored as fp16, q = round(x / d) in
// [-127, 127], value = q * d. Applied to n values with n % 32 == 0 (a row; callers leave rows of
// other lengths as they are, as llama-quantize keeps such tensors in another type).
constexpr int64_t kQ8Block = 32;
template <typename T>
inline void q8_0_round(T* x, int64_t n) {
  for (int64_t b = 0; b + kQ8Block <= n; b += kQ8Block) {
    float amax = 0;
    for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(static_cast<float>(x[b + j])));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float dh = round_f16(d);
    for (int64_t j = 0; j < kQ8Block; ++j)
      x[b + j] = static_cast<T>(std::round(static_cast<float>(x[b + j]) * id) * dh);
  }
}

// Element i of a float buffer of dtype d, exactly, as double.
inline double load_f64(const void* p, DType d, size_t i) {
  return d == DType::f64 ? static_cast<const double*>(p)[i] : static_cast<double>(load_as_f32(p, d, i));
}

// Stores x into element i of a float buffer of dtype d, rounded as round_to does.
inline void store_elem(void* p, DType d, size_t i, double x) {
  switch (d) {
    case DType::f64: static_cast<double*>(p)[i] = x; return;
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(x); return;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(x)); return;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(x)); return;
    case DType::f8_e4m3: static_cast<uint8_t*>(p)[i] = f32_to_e4m3(static_cast<float>(x)); return;
    default: throw std::logic_error(cat("store_elem: ", dtype_name(d), " is not a float dtype"));
  }
}

// Elements [i0, i0 + n) of a weight (any float dtype) converted to T (exact for bf16/f16/f32 -> f32).
// note: the bf16 path is a plain shift written so that the compiler vectorises it; it is the inner
// loop of every decode step (weights are converted tile by tile as they are streamed).
template <typename T>
void load_weight(const TensorView& w, size_t i0, size_t n, T* __restrict out) {
  switch (w.dtype) {
    case DType::f32: {
      const float* __restrict p = reinterpret_cast<const float*>(w.data) + i0;
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
      return;
    }
    case DType::bf16: {
      const uint16_t* __restrict p = reinterpret_cast<const uint16_t*>(w.data) + i0;
      size_t i = 0;
#ifdef __SSE2__
      if constexpr (std::is_same_v<T, float>) {  // interleave zeros below each bf16: exact fp32 bits
        const __m128i zero = _mm_setzero_si128();
        for (; i + 8 <= n; i += 8) {
          const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
          _mm_storeu_ps(out + i, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, h)));
          _mm_storeu_ps(out + i + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, h)));
        }
      }
#endif
      for (; i < n; ++i) out[i] = static_cast<T>(std::bit_cast<float>(static_cast<uint32_t>(p[i]) << 16));
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

// As load_weight, then each value rounded to bf16 when `to_bf16` and the weight is stored in
// another dtype (the GPU path holds every weight in bf16; spec §4.10).
template <typename T>
void load_weight(const TensorView& w, size_t i0, size_t n, T* __restrict out, bool to_bf16) {
  load_weight(w, i0, n, out);
  if (to_bf16 && w.dtype != DType::bf16)
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(round_bf16(static_cast<float>(out[i])));
}

// A whole small weight (norm weights, conv taps, gates) as T, optionally rounded to bf16.
template <typename T>
std::vector<T> weight_vector(const TensorView& w, bool to_bf16 = false) {
  std::vector<T> v(static_cast<size_t>(w.numel()));
  load_weight(w, 0, v.size(), v.data(), to_bf16);
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
