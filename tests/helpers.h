// Shared test helpers: paths to the source tree and fresh temporary folders.
#pragma once
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

}  // namespace degen::test
