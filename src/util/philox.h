// Philox4x32-10, the counter-based random number generator of Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC'11), and the uniform conversions the sampler
// uses. Header-only and usable from CUDA device code, so that the CPU reference and a GPU path draw
// exactly the same numbers for the same (seed; case, position, stream) (DESIGN.md §5).
//
// Algorithm (written from the paper; checked against Random123's known-answer vectors in
// tests/test_sampler.cpp, and compiled with nvcc for sm_90: on an H200 the device gave the host's
// bits, uniform_f32 and philox_uniform exactly for 2^20 (seed, case, position, stream) tuples). One round on counter c = (c0, c1, c2, c3) with key k = (k0, k1):
//   hi0:lo0 = 0xD2511F53 * c0   (64-bit product),   hi1:lo1 = 0xCD9E8D57 * c2
//   c' = (hi1 ^ c1 ^ k0,  lo1,  hi0 ^ c3 ^ k1,  lo0)
// and between rounds the key is bumped: k0 += 0x9E3779B9, k1 += 0xBB67AE85 (mod 2^32).
// Philox4x32-10 applies 10 rounds; the first round uses the key as given.
//
// How degenbisect keys it (every consumer must use these helpers, never its own layout):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (case_index, position, stream, 0)
// `position` is the index in the full token sequence (prompt + generated) of the token being chosen,
// so a path that produces a token by another route (MTP drafts) still draws the same number for it.
// Streams: 0 = the sampler's token draw (sampler.cpp); other values are free for later consumers
// (for example the MTP coupled-acceptance step), which must say which stream they take.
//
// Uniform conversions (exact in IEEE arithmetic, so a GPU reproduces them bit for bit):
//   uniform_f32(x)      = (x >> 8) * 2^-24                        in [0, 1 - 2^-24], 24 bits
//   uniform_f64(hi, lo) = (((hi << 32) | lo) >> 11) * 2^-53         in [0, 1 - 2^-53], 53 bits
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define DEGEN_HD __host__ __device__
#else
#define DEGEN_HD
#endif

namespace degen {

// Plain structs (not std::array) so the same code compiles as CUDA device code.
struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t v[2];
};

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multiplier applied to counter word 0
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // multiplier applied to counter word 2
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key bump, word 0 (golden ratio)
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // key bump, word 1 (sqrt(3) - 1)

// The stream of the sampler's token draw (counter word 2).
inline constexpr uint32_t kPhiloxStreamToken = 0;

DEGEN_HD inline PhiloxCounter philox4x32_round(PhiloxCounter c, PhiloxKey k) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  PhiloxCounter out;
  out.v[0] = hi1 ^ c.v[1] ^ k.v[0];
  out.v[1] = lo1;
  out.v[2] = hi0 ^ c.v[3] ^ k.v[1];
  out.v[3] = lo0;
  return out;
}

// Philox4x32 with `rounds` rounds. 10 is Random123's default and the only one degenbisect draws with;
// other counts exist so the tests can check more of Random123's published vectors (it lists 7 and 10).
DEGEN_HD inline PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k, int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k.v[0] += kPhiloxW0;
      k.v[1] += kPhiloxW1;
    }
    c = philox4x32_round(c, k);
  }
  return c;
}

DEGEN_HD inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) { return philox4x32(c, k, 10); }

// The key for a 64-bit seed: low word first.
DEGEN_HD inline PhiloxKey philox_key(uint64_t seed) {
  PhiloxKey k;
  k.v[0] = static_cast<uint32_t>(seed);
  k.v[1] = static_cast<uint32_t>(seed >> 32);
  return k;
}

// The 128 random bits for (seed; case, position, stream).
DEGEN_HD inline PhiloxCounter philox_bits(uint64_t seed, uint32_t case_index, uint32_t position,
                                          uint32_t stream) {
  PhiloxCounter c;
  c.v[0] = case_index;
  c.v[1] = position;
  c.v[2] = stream;
  c.v[3] = 0;
  return philox4x32_10(c, philox_key(seed));
}

// Uniform float in [0, 1): the top 24 bits of x times 2^-24 (exact: every value is a float).
DEGEN_HD inline float uniform_f32(uint32_t x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-08f;  // 2^-24
}

// Uniform double in [0, 1): the top 53 bits of the 64-bit word (hi, lo) times 2^-53 (exact).
DEGEN_HD inline double uniform_f64(uint32_t hi, uint32_t lo) {
  const uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * 1.1102230246251565404236316680908203125e-16;  // 2^-53
}

// The sampler's uniform for (seed; case, position, stream): uniform_f64 of words 0 (high) and 1 (low).
DEGEN_HD inline double philox_uniform(uint64_t seed, uint32_t case_index, uint32_t position,
                                      uint32_t stream = kPhiloxStreamToken) {
  const PhiloxCounter r = philox_bits(seed, case_index, position, stream);
  return uniform_f64(r.v[0], r.v[1]);
}

}  // namespace degen
