// Conversions between fp32 and the narrow storage dtypes (see dtype.h).
#include "util/dtype.h"

#include "util/error.h"

namespace degen {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

bool dtype_from_name(std::string_view s, DType* out) {
  static const struct { std::string_view n; DType t; } table[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"BF16", DType::bf16}, {"F16", DType::f16},
      {"F8_E4M3", DType::f8_e4m3}, {"I32", DType::i32}, {"I64", DType::i64}, {"U8", DType::u8}};
  for (const auto& e : table)
    if (e.n == s) { *out = e.t; return true; }
  return false;
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: scale to units of 2^-24 and round
    float a = bits_f32(abs);
    float scaled = a * 16777216.0f;  // 2^24, exact
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));  // ties to even (default mode)
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((abs >> 23) - 112u) << 10;  // rebias 127 -> 15
  uint32_t mant = abs & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// e4m3fn: bias 7, exponent field 0..15, mantissa 3 bits; max finite 448 (0x7e); 0x7f NaN.
float e4m3_to_f32(uint8_t v) {
  uint32_t sign = v & 0x80u;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t mant = v & 0x7u;
  float r;
  if (exp == 15 && mant == 7) return std::nanf("");
  if (exp == 0) r = std::ldexp(static_cast<float>(mant), -9);  // subnormal: m * 2^-6 / 8
  else r = std::ldexp(1.0f + mant / 8.0f, static_cast<int>(exp) - 7);
  return sign ? -r : r;
}

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (includes inf)
  // Smallest normal is 2^-6; below it the spacing is 2^-9.
  if (a < 0.015625f) {
    uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 512.0f));  // ties to even; m <= 8
    return static_cast<uint8_t>(sign | m);  // m == 8 encodes 2^-6 exactly (exp field 1)
  }
  int e;
  float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  // a = (1 + k/8) * 2^(e-1); spacing 2^(e-1-3)
  float q = std::ldexp(a, -(e - 1 - 3));  // in [8, 16)
  (void)frac;
  uint32_t qi = static_cast<uint32_t>(std::nearbyint(q));
  int exp = e - 1 + 7;
  if (qi == 16) { qi = 8; exp += 1; }
  if (exp > 15 || (exp == 15 && qi - 8 > 6)) return sign | 0x7e;
  return static_cast<uint8_t>(sign | (exp << 3) | (qi - 8));
}

float load_as_f32(const void* data, DType t, size_t i) {
  const auto* b = static_cast<const uint8_t*>(data);
  switch (t) {
    case DType::f32: { float f; std::memcpy(&f, b + 4 * i, 4); return f; }
    case DType::f64: { double d; std::memcpy(&d, b + 8 * i, 8); return static_cast<float>(d); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); return bf16_to_f32(h); }
    case DType::f16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); return f16_to_f32(h); }
    case DType::f8_e4m3: return e4m3_to_f32(b[i]);
    default: break;
  }
  throw std::logic_error(cat("load_as_f32: dtype ", dtype_name(t), " is not a float type"));
}

}  // namespace degen
