// CUDA device discovery. Never crashes without a device or driver: no device is a reason string.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace degen::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;   // compute capability
  int64_t total_bytes = 0;          // global memory
  int64_t free_bytes = 0;
  int sm_count = 0;
  double mem_bandwidth_gbs = 0;     // theoretical, from clock and bus width when the driver reports them
};

// All visible devices; empty with `*why` set when there is no driver, no device or an error.
std::vector<DeviceInfo> list_devices(std::string* why);

}  // namespace degen::cuda
