// Shared test helpers: paths to the source tree, fresh temporary folders, seeded token ids.
#pragma once
#include <vector>
#include <random>
#include <cstdint>
#include <atomic>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace degen::test {

inline std::filesystem::path source_dir() { return DEGEN_SOURCE_DIR; }
inline std::filesystem::path fixtures_dir() { return source_dir() / "tests" / "fixtures"; }

// A fresh, empty folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "t") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("degen-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::error_code ec; std::filesystem::remove_all(path_, ec); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
 private:
  std::filesystem::path path_;
};

// n token ids drawn uniformly from [0, V) with a fixed seed (the same on every backend and run).
inline std::vector<int32_t> random_ids(size_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace degen::test
