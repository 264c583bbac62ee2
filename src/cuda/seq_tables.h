// Helpers of the CUDA backend's per-sequence ops (cuda/conv1d.cpp, cuda/gdn.cpp): the small host
// tables they upload with each call, and the bench's timing of the GDN ops.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/cuda_backend.h"

namespace degen::cuda_detail {

// A table of plain structs as the int64 words upload() takes.
template <typename T>
std::vector<int64_t> words(const std::vector<T>& v) {
  std::vector<int64_t> w(v.size() * sizeof(T) / sizeof(int64_t));
  if (!v.empty()) std::memcpy(w.data(), v.data(), v.size() * sizeof(T));
  return w;
}

// Times one GDN op when CudaStats::time_gdn is on (bench), with a synchronisation on each side.
struct GdnTimer {
  CudaBackend& be;
  std::chrono::steady_clock::time_point t0;
  explicit GdnTimer(CudaBackend& b) : be(b) {
    if (be.stats().time_gdn) {
      be.sync();
      t0 = std::chrono::steady_clock::now();
    }
  }
  ~GdnTimer() {
    if (!be.stats().time_gdn) return;
    try {
      be.sync();
    } catch (...) {  // note: a fault is reported by the next checked call
    }
    be.stats().gdn_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    be.stats().gdn_calls++;
  }
};

}  // namespace degen::cuda_detail
