// `degenbisect selftest`: run bisect on every catalogue fault injected at known layers and check it
// names them (src/diag/selftest.h). Exit 1 on any miss.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "cli/session.h"
#include "diag/golden.h"
#include "diag/selftest.h"
#include "backends/make_backend.h"
#include "util/file_io.h"
#include "model/synth.h"
#include "util/error.h"
#include "util/output_file.h"
#include "util/json_output.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct SelftestArgs {
  std::string model, golden, base, json_out;
  std::vector<std::string> faults, cases;
  int layers_per_kind = 2;
};

int run_selftest_cmd(const SelftestArgs& a) {
  bool quiet = global_options().quiet;
  check_output_file(a.json_out, "selftest --json");  // before the run, not after its table
  fs::path tmp = fs::temp_directory_path() / cat("degen-selftest-", ::getpid());
  struct Cleanup { fs::path p; ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); } } cleanup{tmp};
  fs::path model_dir = a.model;
  if (model_dir.empty()) {
    model_dir = "models/tiny-qwen35";
    if (!fs::exists(model_dir / "model.safetensors")) {
      model_dir = tmp / "model";
      const SynthPreset& p = find_synth_preset("tiny-qwen35");
      synth_checkpoint(p.config, p.options, model_dir);
      if (!quiet) std::fprintf(stderr, "selftest: synthesized tiny-qwen35 into %s\n", model_dir.c_str());
    }
  }
  const LoadedModel loaded = load_model_and_tokenizer(model_dir);
  const Model& model = *loaded.model;
  const Tokenizer* tok = loaded.tok.get();
  fs::path golden_dir = a.golden;
  if (golden_dir.empty()) {
    golden_dir = tmp / "golden";
    GoldenOptions go;
    go.command = "degenbisect selftest (built-in suite)";
    write_golden(model, tok, selftest_suite(), golden_dir, go, make_backend, quiet ? nullptr : stderr);
  }
  const GoldenRecord rec = GoldenRecord::open(golden_dir);
  SelftestOptions so;
  so.faults = a.faults;
  so.layers_per_kind = a.layers_per_kind;
  so.cases = a.cases;
  if (!quiet)
    std::fprintf(stderr, "selftest: model %s, golden %s%s\n", model_dir.c_str(), golden_dir.c_str(),
                 rec.floors_present() ? "" : " (no noise floors: fixed fp32-class limits)");
  so.base = parse_run_config(a.base);
  auto rows = run_selftest(rec, model, tok, so, make_backend, quiet ? nullptr : stderr);
  std::printf("%s", selftest_table(rows).c_str());
  if (!a.json_out.empty()) write_file_atomic(a.json_out, json_text(selftest_json(rows), 1) + "\n");
  for (const auto& r : rows)
    if (r.status == "fail") return static_cast<int>(ExitCode::bad);
  return 0;
}

CommandRegistrar reg("selftest", "Check that bisect names every catalogue fault injected at known layers", 70,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<SelftestArgs>();
  sub->add_option("--model", a->model, "Model folder (default: models/tiny-qwen35, synthesized if absent)");
  sub->add_option("--golden", a->golden, "Golden record of that model (default: a built-in suite recorded now)");
  sub->add_option("--fault", a->faults, "Only this fault (repeatable; see `degenbisect faults`)");
  sub->add_option("--case", a->cases, "Only this case id of the record (repeatable)");
  sub->add_option("--layers-per-kind", a->layers_per_kind, "Layers of each applicable kind to inject at")->check(CLI::Range(1, 64));
  sub->add_option("--base", a->base, "Toggles every run starts from (e.g. backend=cuda)");
  sub->add_option("--json", a->json_out, "Write the rows as JSON to FILE");
  sub->footer("Exit: 0 every fault found, 1 a miss, 125 untestable, 128 input error.");
  return [a] { return run_selftest_cmd(*a); };
});

}  // namespace
}  // namespace degen::cli
