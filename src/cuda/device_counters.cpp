// device_counters.h: the diff for every build, the counting itself in tests/emu/emu_runtime.cpp
// (a GPU build has nothing to count with: counters_supported() is false).
#include "cuda/device_counters.h"

#include <algorithm>
#include <map>

namespace degen::cuda {

DeviceCounters counters_diff(const DeviceCounters& a, const DeviceCounters& b) {
  DeviceCounters d;
  d.launches = a.launches - b.launches;
  d.blas_calls = a.blas_calls - b.blas_calls;
  d.graph_launches = a.graph_launches - b.graph_launches;
  d.copies_h2d = a.copies_h2d - b.copies_h2d;
  d.copies_d2h = a.copies_d2h - b.copies_d2h;
  d.copies_d2d = a.copies_d2d - b.copies_d2d;
  d.bytes_h2d = a.bytes_h2d - b.bytes_h2d;
  d.bytes_d2h = a.bytes_d2h - b.bytes_d2h;
  d.bytes_d2d = a.bytes_d2d - b.bytes_d2d;
  d.pageable_copies = a.pageable_copies - b.pageable_copies;
  d.memsets = a.memsets - b.memsets;
  d.allocs = a.allocs - b.allocs;
  d.frees = a.frees - b.frees;
  d.host_syncs = a.host_syncs - b.host_syncs;
  d.bytes_read = a.bytes_read - b.bytes_read;
  d.bytes_written = a.bytes_written - b.bytes_written;
  std::map<std::string, CallTraffic> m;
  for (const CallTraffic& t : a.by_name) m[t.name] = t;
  for (const CallTraffic& t : b.by_name) {
    CallTraffic& x = m[t.name];
    x.name = t.name;
    x.calls -= t.calls;
    x.bytes_read -= t.bytes_read;
    x.bytes_written -= t.bytes_written;
  }
  for (auto& [n, t] : m)
    if (t.calls != 0 || t.bytes_read != 0 || t.bytes_written != 0) d.by_name.push_back(t);
  sort_by_bytes(d.by_name);
  return d;
}

void sort_by_bytes(std::vector<CallTraffic>& calls) {
  std::sort(calls.begin(), calls.end(), [](const CallTraffic& x, const CallTraffic& y) {
    return x.bytes_read + x.bytes_written > y.bytes_read + y.bytes_written;
  });
}

#ifndef DEGEN_CUDA_EMULATED
bool counters_supported() { return false; }
void counters_start() {}
DeviceCounters counters_read() { return {}; }
void counters_stop() {}
#endif

}  // namespace degen::cuda
