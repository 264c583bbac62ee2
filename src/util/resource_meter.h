// What a long run costs the machine (golden on a checkpoint larger than RAM): wall time, CPU time,
// bytes the process caused to be read from storage, major page faults, and the peak of its
// ANONYMOUS resident memory (heap, stacks: what it allocated; the page cache behind its memory-mapped
// weights is file-backed, reclaimable and not counted). The kernel keeps no peak of RssAnon (VmHWM
// counts the mapped weights too), so a thread samples /proc/self/status every `period_ms`; a peak
// shorter than that can be missed (the figure is a lower bound, stated as sampled).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace degen {

struct ResourceUsage {
  double wall_s = 0;
  double user_s = 0, sys_s = 0;   // CPU time of the process, all threads
  uint64_t read_bytes = 0;        // /proc/self/io read_bytes: fetched from storage (not from the page cache)
  uint64_t major_faults = 0;
  uint64_t peak_anon_bytes = 0;   // sampled peak of RssAnon
  std::string str() const;        // one line for a log
};

// Current RssAnon of this process in bytes (0 where /proc is not readable).
uint64_t rss_anon_bytes();
// MemAvailable of the machine, capped by this process's cgroup memory.max when one is set, in bytes.
uint64_t memory_available_bytes();

class ResourceMeter {
 public:
  explicit ResourceMeter(int period_ms = 20);
  ~ResourceMeter();
  ResourceMeter(const ResourceMeter&) = delete;
  ResourceMeter& operator=(const ResourceMeter&) = delete;
  ResourceUsage now() const;  // since construction

 private:
  struct Snapshot {
    double wall = 0, user = 0, sys = 0;
    uint64_t read_bytes = 0, major = 0;
  };
  static Snapshot take();
  Snapshot start_;
  std::atomic<uint64_t> peak_{0};
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace degen
