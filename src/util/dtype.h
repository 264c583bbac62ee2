// Storage dtypes and exact conversions to and from fp32.
// bf16 and f16 rounding is round-to-nearest-even, as the CUDA intrinsics do
// (__float2bfloat16_rn, __float2half_rn); fp8 e4m3 is the OCP "e4m3fn" variant
// (no infinities, max 448, NaN = S.1111.111), saturating like __nv_cvt_float_to_fp8 with __NV_SATFINITE.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace degen {

enum class DType : uint8_t { f32, f64, bf16, f16, f8_e4m3, i32, i64, u8 };

// Bytes per element.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::f8_e4m3: case DType::u8: return 1;
  }
  return 0;
}

// safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses the safetensors spelling; returns false for an unknown name.
bool dtype_from_name(std::string_view s, DType* out);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- bf16 ----
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- f16 (IEEE binary16) ----
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// ---- fp8 e4m3fn ----
uint8_t f32_to_e4m3(float f);
float e4m3_to_f32(uint8_t v);
inline float round_e4m3(float f) { return e4m3_to_f32(f32_to_e4m3(f)); }

// Read element i of a raw buffer of dtype t as float (f32, f64, bf16, f16, f8_e4m3).
float load_as_f32(const void* data, DType t, size_t i);

}  // namespace degen
