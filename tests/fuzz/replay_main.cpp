// degen_fuzz_replay: the fuzz harnesses (tests/fuzz/fuzz_*.cpp) without libFuzzer, in the normal
// build: `degen_fuzz_replay TARGET FILE_OR_FOLDER...` runs the target's harness once per file. ctest
// runs it over the seed corpora and the inputs that once found a bug (tests/fuzz/regressions), so
// every build checks them, with or without clang. A finding aborts (exit by SIGABRT).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#define DEGEN_FUZZ_TARGET(t) extern "C" int fuzz_one_##t(const uint8_t* data, size_t size);
#include "fuzz_targets.inc"
#undef DEGEN_FUZZ_TARGET

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  using Fn = int (*)(const uint8_t*, size_t);
  const std::map<std::string, Fn> targets = {
#define DEGEN_FUZZ_TARGET(t) {#t, fuzz_one_##t},
#include "fuzz_targets.inc"
#undef DEGEN_FUZZ_TARGET
  };
  if (argc < 3 || !targets.count(argv[1])) {
    std::fprintf(stderr, "usage: degen_fuzz_replay TARGET FILE_OR_FOLDER...\n  TARGET: one of");
    for (const auto& [name, fn] : targets) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const Fn fn = targets.at(argv[1]);
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(argv[i])) {
      files.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "degen_fuzz_replay: %s: expected a file or a folder of inputs\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("degen_fuzz_replay %s: %zu inputs, no finding\n", argv[1], files.size());
  return files.empty() ? 2 : 0;
}
