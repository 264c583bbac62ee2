// An input of `degenbisect report` (a compare or bisect JSON file, or a sweep folder's sweep.json)
// as load_report_inputs reads it, then the report document built and rendered in every format.
#include "fuzz_common.h"
#include "report/html.h"
#include "report/inputs.h"
#include "report/json.h"
#include "report/junit.h"
#include "report/markdown.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto dir = fuzz::scratch() / "report";
  static const bool made = [&] {
    std::filesystem::create_directories(dir / "sweep");
    std::filesystem::copy_file(fuzz::source_dir() / "tests/fixtures/report/sweep/results.jsonl", dir / "sweep/results.jsonl",
                               std::filesystem::copy_options::overwrite_existing);
    return true;
  }();
  (void)made;
  // The first byte: a JSON file (compare or bisect, told apart by its content) or a sweep.json.
  const bool sweep = data[0] & 1;
  const auto path = sweep ? dir / "sweep/sweep.json" : dir / "result.json";
  fuzz::write_bytes(path, fuzz::as_view(data + 1, size - 1));
  fuzz::expect_clean("report", [&] {
    degen::report::ReportOptions opt;
    opt.model_dir = fuzz::scratch() / "no-model";  // no tokenizer: token ids are shown
    const auto in = degen::report::load_report_inputs({sweep ? dir / "sweep" : path});
    const nlohmann::json doc = degen::report::build_report(in, opt);
    (void)degen::report::render_markdown(doc);
    (void)degen::report::render_html(doc);
    (void)degen::report::render_junit(doc);
    (void)degen::report::render_json(doc);
  });
  return 0;
}
