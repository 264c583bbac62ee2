// Resource accounting from /proc (see resource_meter.h).
#include "util/resource_meter.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace degen {

namespace {

// The number after "key" in a "key: value [kB]" file such as /proc/self/status, times `unit`.
uint64_t proc_field(const char* path, const char* key, uint64_t unit) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) {
      v = std::strtoull(line + n, nullptr, 10) * unit;
      break;
    }
  std::fclose(f);
  return v;
}

double seconds(const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; }

}  // namespace

uint64_t rss_anon_bytes() { return proc_field("/proc/self/status", "RssAnon:", 1024); }

uint64_t memory_available_bytes() {
  uint64_t avail = proc_field("/proc/meminfo", "MemAvailable:", 1024);
  // cgroup v2: memory.max of this process's group ("max" when unlimited), less what it already uses.
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    std::ifstream mx(dir + "/memory.max"), cur(dir + "/memory.current");
    std::string m;
    uint64_t used = 0;
    if (mx >> m && m != "max" && cur >> used) {
      const uint64_t limit = std::strtoull(m.c_str(), nullptr, 10);
      const uint64_t left = limit > used ? limit - used : 0;
      if (left < avail || avail == 0) avail = left;
    }
  }
  return avail;
}

ResourceMeter::Snapshot ResourceMeter::take() {
  Snapshot s;
  s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    s.user = seconds(ru.ru_utime);
    s.sys = seconds(ru.ru_stime);
    s.major = static_cast<uint64_t>(ru.ru_majflt);
  }
  s.read_bytes = proc_field("/proc/self/io", "read_bytes:", 1);
  return s;
}

ResourceMeter::ResourceMeter(int period_ms) : start_(take()) {
  peak_ = rss_anon_bytes();
  sampler_ = std::thread([this, period_ms] {
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t v = rss_anon_bytes();
      uint64_t p = peak_.load(std::memory_order_relaxed);
      while (v > p && !peak_.compare_exchange_weak(p, v)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
    }
  });
}

ResourceMeter::~ResourceMeter() {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
}

ResourceUsage ResourceMeter::now() const {
  const Snapshot s = take();
  ResourceUsage u;
  u.wall_s = s.wall - start_.wall;
  u.user_s = s.user - start_.user;
  u.sys_s = s.sys - start_.sys;
  u.read_bytes = s.read_bytes - start_.read_bytes;
  u.major_faults = s.major - start_.major;
  u.peak_anon_bytes = std::max(peak_.load(), rss_anon_bytes());
  return u;
}

std::string ResourceUsage::str() const {
  char b[256];
  std::snprintf(b, sizeof b, "%.1f s wall, %.1f s CPU (user %.1f, sys %.1f), %.2f GB read from storage, %llu major faults, "
                "peak anonymous memory %.2f GB (sampled)", wall_s, user_s + sys_s, user_s, sys_s, double(read_bytes) / 1e9,
                static_cast<unsigned long long>(major_faults), double(peak_anon_bytes) / 1e9);
  return b;
}

}  // namespace degen
