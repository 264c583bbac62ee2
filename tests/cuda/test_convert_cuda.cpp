// GPU: the device's storage rounding (bf16, f16, fp8 e4m3 with saturation) equals the CPU emulation
// in src/util/dtype.h bit for bit, over edge cases and a sweep of random bit patterns. Skips without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/check.h"
#include "cuda/device.h"
#include "kernels/convert.h"
#include "util/dtype.h"

using namespace degen;

TEST_CASE("convert: bf16 / f16 / e4m3 rounding equals the CPU emulation bit for bit") {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 448.0f, 449.0f, 464.0f, 1e6f, -1e6f, 65504.0f, 65520.0f,
                          1e-8f, 6e-8f, 3e-8f, 0.015625f, 0.0146484375f, 0.001953125f, 0.0009765625f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                          1.00390625f, 1.01171875f, 3.0f / 1024};
  uint32_t s = 12345;
  for (int i = 0; i < 1 << 20; ++i) {  // random bit patterns (finite), and random values of realistic size
    s = s * 1664525u + 1013904223u;
    float f = bits_f32(s);
    if (!std::isfinite(f)) continue;
    x.push_back(f);
    x.push_back(static_cast<float>(static_cast<int32_t>(s)) * 1e-9f);
  }
  size_t n = x.size();
  float* dx; uint16_t *db, *dh; uint8_t* d8;
  CUDA_CHECK(cudaMalloc(&dx, n * 4));
  CUDA_CHECK(cudaMalloc(&db, n * 2));
  CUDA_CHECK(cudaMalloc(&dh, n * 2));
  CUDA_CHECK(cudaMalloc(&d8, n));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  cuda::round_dtypes_f32_cuda(dx, db, dh, d8, n, nullptr);
  std::vector<uint16_t> b(n), h(n);
  std::vector<uint8_t> e(n);
  CUDA_CHECK(cudaMemcpy(b.data(), db, n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(h.data(), dh, n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(e.data(), d8, n, cudaMemcpyDeviceToHost));
  cudaFree(dx); cudaFree(db); cudaFree(dh); cudaFree(d8);
  size_t bad_b = 0, bad_h = 0, bad_e = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != f32_to_bf16(x[i]) && bad_b++ < 5) MESSAGE("bf16 " << x[i] << ": gpu " << b[i] << " cpu " << f32_to_bf16(x[i]));
    if (h[i] != f32_to_f16(x[i]) && bad_h++ < 5) MESSAGE("f16 " << x[i] << ": gpu " << h[i] << " cpu " << f32_to_f16(x[i]));
    if (e[i] != f32_to_e4m3(x[i]) && bad_e++ < 5) MESSAGE("e4m3 " << x[i] << ": gpu " << int(e[i]) << " cpu " << int(f32_to_e4m3(x[i])));
  }
  MESSAGE("compared " << n << " values");
  CHECK(bad_b == 0);
  CHECK(bad_h == 0);
  CHECK(bad_e == 0);
}
