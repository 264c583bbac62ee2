// The CUDA emulator's stand-in for the CUB device-wide algorithms kernels/sample.cu calls, with
// CUB's documented meaning (https://nvidia.github.io/cccl/cub/api/structcub_1_1DeviceRadixSort.html):
//   - the two-phase temporary storage protocol (a null d_temp_storage asks for the size);
//   - radix sorts are stable and order floating-point keys by their bits, the "twiddled" total
//     order in which -0.0 sorts below +0.0 and NaN with the sign bit clear above +inf;
//   - scans and reductions write their result to device memory.
// The device side of every pointer must be inside a device allocation (the emulator checks).
// Sums run left to right here, a tree in CUB: equal up to the last bits, as sample.h says.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

namespace cub {

namespace emu_detail {

inline cudaError_t temp(void* d_temp, size_t& bytes) {
  if (!d_temp) {
    bytes = 256;
    return cudaSuccess;
  }
  return bytes >= 256 ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename K>
uint64_t twiddle(K k) {
  static_assert(std::is_floating_point_v<K> || std::is_integral_v<K>, "radix sort key");
  if constexpr (std::is_same_v<K, double>) {
    uint64_t u;
    std::memcpy(&u, &k, 8);
    return (u >> 63) ? ~u : (u | (uint64_t(1) << 63));
  } else if constexpr (std::is_same_v<K, float>) {
    uint32_t u;
    std::memcpy(&u, &k, 4);
    return (u >> 31) ? uint32_t(~u) : (u | (uint32_t(1) << 31));
  } else if constexpr (std::is_signed_v<K>) {
    return uint64_t(int64_t(k)) ^ (uint64_t(1) << 63);
  } else {
    return uint64_t(k);
  }
}

}  // namespace emu_detail

struct DeviceRadixSort {
  template <typename K, typename N>
  static cudaError_t SortKeysDescending(void* d_temp, size_t& bytes, const K* in, K* out, N n, int = 0,
                                        int = int(sizeof(K) * 8), cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    std::vector<K> v(in, in + n);
    std::stable_sort(v.begin(), v.end(), [](K a, K b) { return emu_detail::twiddle(a) > emu_detail::twiddle(b); });
    std::copy(v.begin(), v.end(), out);
    return cudaSuccess;
  }
  template <typename K, typename V, typename N>
  static cudaError_t SortPairsDescending(void* d_temp, size_t& bytes, const K* kin, K* kout, const V* vin, V* vout,
                                         N n, int = 0, int = int(sizeof(K) * 8), cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    std::vector<size_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), size_t(0));
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return emu_detail::twiddle(kin[a]) > emu_detail::twiddle(kin[b]); });
    std::vector<K> k(idx.size());
    std::vector<V> v(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) {
      k[i] = kin[idx[i]];
      v[i] = vin[idx[i]];
    }
    std::copy(k.begin(), k.end(), kout);
    std::copy(v.begin(), v.end(), vout);
    return cudaSuccess;
  }
};

struct DeviceScan {
  template <typename T, typename N>
  static cudaError_t ExclusiveSum(void* d_temp, size_t& bytes, const T* in, T* out, N n, cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    T acc{};
    for (N i = 0; i < n; ++i) {
      const T x = in[i];
      out[i] = acc;
      acc += x;
    }
    return cudaSuccess;
  }
  template <typename T, typename N>
  static cudaError_t InclusiveSum(void* d_temp, size_t& bytes, const T* in, T* out, N n, cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    T acc{};
    for (N i = 0; i < n; ++i) {
      acc += in[i];
      out[i] = acc;
    }
    return cudaSuccess;
  }
};

struct DeviceReduce {
  template <typename T, typename N>
  static cudaError_t Sum(void* d_temp, size_t& bytes, const T* in, T* out, N n, cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    T acc{};
    for (N i = 0; i < n; ++i) acc += in[i];
    *out = acc;
    return cudaSuccess;
  }
  template <typename T, typename N>
  static cudaError_t Max(void* d_temp, size_t& bytes, const T* in, T* out, N n, cudaStream_t = nullptr) {
    if (!d_temp) return emu_detail::temp(d_temp, bytes);
    if (cudaError_t e = emu_detail::temp(d_temp, bytes)) return e;
    T acc = n > 0 ? in[0] : T{};
    for (N i = 1; i < n; ++i) acc = acc < in[i] ? in[i] : acc;
    *out = acc;
    return cudaSuccess;
  }
};

}  // namespace cub
