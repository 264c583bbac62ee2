// A sweep folder's results.jsonl as `sweep --resume` reads it (run_sweep over a two-cell matrix, with
// and without an identity to check, every finished line turned into a row and the closing table
// printed), and beside the seed sweep.json as `report` reads a sweep folder (read_sweep_folder).
#include "diag/sweep.h"
#include "fuzz_common.h"
#include "report/inputs.h"

namespace {
const degen::SweepMatrix& matrix() {
  static const degen::SweepMatrix m = degen::sweep_matrix_from_axes("", {"attn=naive,flash", "gdn=chunked,recurrent"});
  return m;
}
degen::CellSummary stand_in(const degen::RunConfig&) {
  degen::CellSummary s;
  s.verdict = "good";
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool with_identity = data[0] & 1;  // the first byte: check identities (as the CLI does) or not
  const std::string_view lines = fuzz::as_view(data + 1, size - 1);
  const auto out = fuzz::scratch() / "sweep";
  std::filesystem::create_directories(out);
  fuzz::write_bytes(out / "results.jsonl", lines);
  fuzz::expect_clean("sweep results (resume)", [&] {
    degen::SweepOptions opt;
    opt.out = out;
    opt.resume = true;
    opt.progress = false;
    if (with_identity) opt.identity = {{"model", "fuzz"}, {"golden", "sha256:0"}, {"cases", "all"}, {"decode", true}};
    const auto rows = degen::run_sweep(matrix(), opt, degen::CellEvaluator(stand_in));
    (void)degen::sweep_table(matrix(), rows);
    (void)degen::sweep_main_effects(matrix(), rows);
  });
  const auto folder = fuzz::scratch() / "sweep-report";
  static const bool made = [&] {
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(fuzz::source_dir() / "tests/fixtures/report/sweep/sweep.json", folder / "sweep.json",
                               std::filesystem::copy_options::overwrite_existing);
    return true;
  }();
  (void)made;
  fuzz::write_bytes(folder / "results.jsonl", lines);
  fuzz::expect_clean("sweep results (report)", [&] { (void)degen::report::read_sweep_folder(folder); });
  return 0;
}
