#include "fuzz_common.h"

#include <unistd.h>

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

void finding(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "fuzz: %s: %s\n", what.c_str(), detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fuzz
