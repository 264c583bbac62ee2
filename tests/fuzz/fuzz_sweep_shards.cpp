// The shard folders of one sweep merged as `report --expect-shards N` merges them (a job array's final
// merge): the input is the folders' files packed (fuzz_common.h unpack_files: "<k>/sweep.json",
// "<k>/results.jsonl" for shard folders k = 1, 2, ...), written into a scratch folder; every folder
// given is read (load_report_inputs), checked as a complete sweep in as many shards as folders
// (check_complete_sweep), and the report built and rendered in every format. Seeds: a real sweep in
// two shards (tests/fuzz/seeds/sweep-shards).
#include <set>

#include "fuzz_common.h"
#include "report/html.h"
#include "report/inputs.h"
#include "report/json.h"
#include "report/junit.h"
#include "report/markdown.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::pair<std::string, std::string>> files;
  std::set<std::string> folders;
  for (auto& [name, bytes] : fuzz::unpack_files(fuzz::as_view(data, size))) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash > 2 || name.find('/', slash + 1) != std::string::npos) continue;
    folders.insert(name.substr(0, slash));
    files.emplace_back(name, std::move(bytes));
  }
  if (folders.empty()) return 0;
  const auto dir = fuzz::scratch() / "shards";
  fuzz::write_files(dir, files);
  std::vector<std::filesystem::path> paths;
  for (const std::string& f : folders) paths.push_back(dir / f);
  fuzz::expect_clean("sweep shards", [&] {
    const degen::report::ReportInputs in = degen::report::load_report_inputs(paths);
    degen::report::check_complete_sweep(in, static_cast<int>(paths.size()));
    const nlohmann::json doc = degen::report::build_report(in);
    (void)degen::report::render_markdown(doc);
    (void)degen::report::render_html(doc);
    (void)degen::report::render_junit(doc);
    (void)degen::report::render_json(doc);
  });
  return 0;
}
