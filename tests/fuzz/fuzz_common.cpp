#include "fuzz_common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace fs = std::filesystem;

namespace fuzz {

namespace {
struct Scratch {
  fs::path dir;
  Scratch() {
    fs::path base;
    if (const char* t = std::getenv("TMPDIR"); t && *t) base = t;
    else if (fs::is_directory("/dev/shm")) base = "/dev/shm";
    else base = "/tmp";
    dir = base / ("degen-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
}  // namespace

const fs::path& scratch() {
  static Scratch s;
  return s.dir;
}

fs::path source_dir() { return DEGEN_FUZZ_SOURCE_DIR; }

void write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) finding("harness", "cannot write " + path.string());
}

std::vector<std::pair<std::string, std::string>> unpack_files(std::string_view input) {
  static constexpr std::string_view kMarker("\0FILE ", 6);
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = input.find(kMarker);
  while (at != std::string_view::npos) {
    const size_t name_at = at + kMarker.size();
    const size_t nl = input.find('\n', name_at);
    if (nl == std::string_view::npos) break;
    const size_t next = input.find(kMarker, nl + 1);
    const std::string name(input.substr(name_at, nl - name_at));
    const std::string_view bytes = input.substr(nl + 1, (next == std::string_view::npos ? input.size() : next) - nl - 1);
    bool ok = !name.empty() && name.size() <= 200 && name.front() != '/' && name.find('\0') == std::string::npos;
    for (size_t b = 0; ok && b <= name.size();) {
      const size_t e = std::min(name.find('/', b), name.size());
      const std::string part = name.substr(b, e - b);
      ok = !part.empty() && part.size() <= 100 && part != "." && part != "..";
      b = e + 1;
    }
    if (ok) out.emplace_back(name, std::string(bytes));
    at = next;
  }
  return out;
}

void write_files(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  for (const auto& [name, bytes] : files) {
    const fs::path p = dir / name;
    fs::create_directories(p.parent_path(), ec);
    std::error_code ec_dir;  // (set for a path that does not exist yet: fine)
    if (ec || fs::is_directory(p, ec_dir)) continue;  // a path that is also a folder of another file: skipped
    write_bytes(p, bytes);
  }
}

void finding(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "fuzz: %s: %s\n", what.c_str(), detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fuzz
