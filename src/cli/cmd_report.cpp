// `degenbisect report`: Markdown, self-contained HTML, JSON or JUnit from compare JSON files, bisect
// JSON files and sweep folders (shards merged); src/report/.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "util/file_io.h"
#include "report/html.h"
#include "report/inputs.h"
#include "report/json.h"
#include "report/junit.h"
#include "report/markdown.h"
#include "util/error.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::vector<std::string> paths;
  std::string format, out, model;
  int expect_shards = 0;  // > 0: the final merge of a sweep in this many shards
};

std::string format_for(const ReportArgs& a) {
  if (!a.format.empty()) {
    if (a.format == "md" || a.format == "markdown") return "md";
    if (a.format == "html" || a.format == "json" || a.format == "junit") return a.format;
    input_error("report: --format '", a.format, "': expected md, html, json or junit");
  }
  const std::string ext = fs::path(a.out).extension().string();
  if (ext == ".html" || ext == ".htm") return "html";
  if (ext == ".json") return "json";
  if (ext == ".xml") return "junit";
  return "md";
}

int run_report(const ReportArgs& a) {
  const std::string format = format_for(a);
  check_output_file(a.out, "report -o");
  std::vector<fs::path> paths(a.paths.begin(), a.paths.end());
  report::ReportOptions opt;
  if (!a.model.empty()) {
    if (!fs::is_regular_file(fs::path(a.model) / "tokenizer.json"))
      input_error("report: --model ", a.model, ": no tokenizer.json in this folder");
    opt.model_dir = a.model;
  }
  std::string text;
  int code = 0;
  try {
    const report::ReportInputs in = report::load_report_inputs(paths);
    if (a.expect_shards > 0) {
      report::check_complete_sweep(in, a.expect_shards);
      code = report::sweep_exit_code(in.sweeps.front());
    }
    const nlohmann::json doc = report::build_report(in, opt);
    if (format == "md") text = report::render_markdown(doc);
    else if (format == "html") text = report::render_html(doc);
    else if (format == "json") text = report::render_json(doc);
    else text = report::render_junit(doc);
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected type: an input written by something else, or edited by hand.
    input_error("report: an input has an unexpected structure (", e.what(), ")");
  }
  if (a.out.empty() || a.out == "-") std::fwrite(text.data(), 1, text.size(), stdout);
  else write_file_atomic(a.out, text);
  return code;
}

CommandRegistrar reg("report", "Markdown, self-contained HTML, JSON or JUnit report of compare, sweep and bisect results", 70,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<ReportArgs>();
  sub->add_option("paths", a->paths,
                  "Inputs: compare JSON (compare --json), bisect JSON (bisect --json), sweep folders (sweep --out; several "
                  "shard folders of one sweep merge), or a folder holding any of these")
      ->required();
  sub->add_option("--format", a->format, "md (default), html, json or junit; default from -o's extension (.html .json .xml)");
  sub->add_option("-o,--out", a->out, "Write to FILE (default: stdout)");
  sub->add_option("--model", a->model,
                  "Model folder whose tokenizer decodes the generated text (default: the model folder named in each compare result)");
  sub->add_option("--expect-shards", a->expect_shards,
                  "The final merge of a sweep run as N shards (a job array's merge job): refused (exit 128, naming the\n"
                  "shard) unless the inputs are shards 1/N..N/N of one sweep, each once, with every cell's result; then\n"
                  "the exit code is the sweep's verdict (0, 1 or 125, as sweep gives it)")
      ->check(CLI::Range(1, 100000));
  sub->footer("Exit: 0 written (whatever the verdicts; with --expect-shards: 0 no cell bad, 1 some cell bad or crashed,\n"
              "125 every cell untestable), 128 input error.\n"
              "Examples:\n"
              "  degenbisect report out/compare.json --format html -o report.html\n"
              "  degenbisect report out/sweep-1 out/sweep-2 -o sweep.md        # two shards, one table\n"
              "  degenbisect report out/ --format junit -o junit.xml           # everything in out/\n"
              "  degenbisect report out/sweep/shard-* --expect-shards 4 -o sweep.html   # a job array's final merge");
  return [a] { return run_report(*a); };
});

}  // namespace
}  // namespace degen::cli
