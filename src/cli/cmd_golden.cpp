// `degenbisect golden`: run a prompt suite through the CPU reference and write a golden record
// (DESIGN.md §6, src/diag/golden.h): token ids, per-position top-K log-probs, per-layer outputs,
// MTP drafts and per-layer noise floors, with checksums, written atomically.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "diag/cases.h"
#include "diag/golden.h"
#include "backends/make_backend.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct GoldenArgs {
  std::string model, cases, out, precision = "fp32", layers = "all", positions = "auto";
  int gen_tokens = -1;
  int topk = 20;
  bool no_floors = false, force = false;
  std::string argv;
};

int run_golden(const GoldenArgs& a) {
  if (a.model.empty() || a.cases.empty() || a.out.empty()) input_error("golden: --model, --cases and --out are required");
  GoldenOptions o;
  if (a.precision == "fp32" || a.precision == "ref") o.precision = Precision::ref;
  else if (a.precision == "fp64") o.precision = Precision::fp64;
  else input_error("golden: --precision ", a.precision, ": expected fp32 or fp64");
  if (a.gen_tokens >= 0) o.gen_tokens = a.gen_tokens;
  else if (a.gen_tokens != -1) input_error("golden: --gen-tokens must be >= 0, found ", a.gen_tokens);
  o.layers = a.layers;
  o.positions = a.positions;
  o.topk = a.topk;
  o.floors = !a.no_floors;
  o.force = a.force;
  o.command = a.argv;
  const Suite suite = load_suite(a.cases);
  auto model = load_model(a.model);
  std::unique_ptr<Tokenizer> tok;
  if (fs::exists(fs::path(a.model) / "tokenizer.json")) tok = Tokenizer::load(fs::path(a.model) / "tokenizer.json");
  std::FILE* progress = global_options().quiet ? nullptr : stdout;
  GoldenSummary s = write_golden(*model, tok.get(), suite, a.out, o, make_backend, progress);
  std::printf("golden: wrote %s: suite '%s', %zu cases, %.1f KiB in %.2f s\n", s.dir.string().c_str(), suite.name.c_str(),
              suite.cases.size(), double(s.bytes) / 1024.0, s.seconds);
  for (FloorClass fc : {FloorClass::bf16, FloorClass::fp32}) {
    const int i = static_cast<int>(fc);
    if (s.floors[i])
      std::printf("golden: %s noise floors measured\n", floor_class_name(fc));
    else
      std::printf("golden: %s noise floors ABSENT: %s\n        compare will judge %s-class paths against fixed relative "
                  "limits instead (see `degenbisect compare --help`)\n",
                  floor_class_name(fc), s.floors_reason[i].c_str(), floor_class_name(fc));
  }
  return 0;
}

CommandRegistrar reg("golden", "Record what the CPU reference does on a prompt suite (a golden record)", 30,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<GoldenArgs>();
  sub->add_option("--model", a->model, "Model folder (config.json, *.safetensors, tokenizer.json)");
  sub->add_option("--cases", a->cases, "Prompt suite (cases/*.json)");
  sub->add_option("--out", a->out, "Record folder to write (e.g. golden/tiny-qwen35/smoke)");
  sub->add_option("--gen-tokens", a->gen_tokens, "Generation budget for every case (default: each case's max_new_tokens)");
  sub->add_option("--precision", a->precision, "Reference precision: fp32 (default) or fp64");
  sub->add_option("--layers", a->layers, "Layer outputs to store: all (default), none, or a list such as 0,3,5-7");
  sub->add_option("--positions", a->positions,
                  "Positions whose layer outputs are stored: auto (all while a case stays under 64 MiB, else the "
                  "longest prefix that fits; default), all, none, or N (the first N)");
  sub->add_option("--topk", a->topk, "Log-probabilities kept per position (default 20)");
  sub->add_flag("--no-floors", a->no_floors, "Do not measure the noise floors (bf16 and fp32 classes)");
  sub->add_flag("--force", a->force,
                "Replace an existing golden record at --out (atomically: --out holds the old or the new record at\n"
                "every moment, even if killed; the leftovers of killed runs are removed by the next run)");
  sub->footer(
      "One golden run per --out at a time: a second is refused, naming the first one's PID (.NAME.lock beside it).\n"
      "Examples:\n"
      "  degenbisect golden --model models/tiny-qwen35 --cases cases/smoke.json --out golden/tiny-qwen35/smoke\n"
      "  degenbisect golden --model DIR --cases cases/long-decode.json --out /tmp/g --layers 0,31,63 --positions 256");
  return [a, sub] {
    a->argv = "degenbisect golden --model " + a->model + " --cases " + a->cases + " --out " + a->out;
    if (a->gen_tokens >= 0) a->argv += " --gen-tokens " + std::to_string(a->gen_tokens);
    if (a->precision != "fp32") a->argv += " --precision " + a->precision;
    if (a->layers != "all") a->argv += " --layers " + a->layers;
    if (a->positions != "auto") a->argv += " --positions " + a->positions;
    if (a->topk != 20) a->argv += " --topk " + std::to_string(a->topk);
    if (a->no_floors) a->argv += " --no-floors";
    return run_golden(*a);
  };
});

}  // namespace
}  // namespace degen::cli
