// CUDA device discovery (see device.h).
#include "cuda/device.h"

#include <cuda_runtime.h>

#include "util/error.h"

namespace degen::cuda {

std::vector<DeviceInfo> list_devices(std::string* why) {
  std::vector<DeviceInfo> out;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = cat("no usable CUDA device: ", cudaGetErrorString(err));
    cudaGetLastError();  // clear the sticky error state
    return out;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device is visible";
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_bytes = static_cast<int64_t>(p.totalGlobalMem);
    d.sm_count = p.multiProcessorCount;
    int mem_clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    d.mem_bandwidth_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      d.free_bytes = static_cast<int64_t>(free_b);
    out.push_back(d);
  }
  return out;
}

}  // namespace degen::cuda
