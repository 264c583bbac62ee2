// The seed golden record of the golden_* targets (tests/fuzz/seeds/golden-mini: two cases of the
// tiny synthetic model, see tests/fuzz/README.md) copied into the scratch folder, and the manifest
// rewriting that keeps the fuzzer past the checksums: a mutated manifest or data file that still
// carries a valid checksum is what an edit made by someone who recomputed it looks like, and it
// reaches every check behind the checksum.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "diag/golden.h"
#include "fuzz_common.h"
#include "util/json_input.h"

namespace fuzz {

inline std::filesystem::path golden_seed_dir() { return source_dir() / "tests/fuzz/seeds/golden-mini"; }

// scratch()/rec with the seed's data files (once per process); returns its path.
inline const std::filesystem::path& golden_scratch_record() {
  static const std::filesystem::path dir = [] {
    const auto d = scratch() / "rec";
    std::filesystem::create_directories(d);
    for (const auto& e : std::filesystem::directory_iterator(golden_seed_dir()))
      if (e.path().extension() == ".safetensors")
        std::filesystem::copy_file(e.path(), d / e.path().filename(), std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

// A record's cases read as compare reads them (all data, then without the layer outputs).
inline void golden_read_all(const std::filesystem::path& dir) {
  const degen::GoldenRecord rec = degen::GoldenRecord::open(dir);
  (void)rec.stored_layers();
  for (size_t i = 0; i < rec.cases().size(); ++i) {
    const degen::GoldenCase c = rec.load_case(i, true);
    (void)c.sequence();
    (void)rec.load_case(i, false);
  }
}

}  // namespace fuzz
