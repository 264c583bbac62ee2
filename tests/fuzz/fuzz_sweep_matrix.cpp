// A sweep matrix file (--matrix) as load_sweep_matrix reads it, toggle matrices and server
// (params-only) matrices, then its cell count and cells: every cell's configuration must print as
// its name, and the count is capped (kMaxSweepCells) before anything is enumerated.
#include "diag/sweep.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool params_only = data[0] & 1;  // the first byte picks the kind of matrix
  const auto path = fuzz::scratch() / "matrix.json";
  fuzz::write_bytes(path, fuzz::as_view(data + 1, size - 1));
  fuzz::expect_clean("sweep matrix", [&] {
    const degen::SweepMatrix m = degen::load_sweep_matrix(path, params_only);
    const size_t n = m.count();
    if (n > degen::kMaxSweepCells) fuzz::finding("sweep matrix", "count() above the cap was not refused");
    const auto cells = m.cells();
    if (cells.size() > n + m.cells_extra.size()) fuzz::finding("sweep matrix", "more cells than count() + extra cells");
    for (const auto& c : cells)
      if (!params_only && c.name != c.config.str()) fuzz::finding("sweep matrix", "a cell's name is not its configuration");
  });
  return 0;
}
