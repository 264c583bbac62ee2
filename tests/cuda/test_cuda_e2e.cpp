// GPU end to end: the four shipped tiny models (synthesized into a temporary folder, so the bytes
// are the ones the committed records were made from) through backend=cuda against their golden
// smoke records must pass `compare` (verdict good, exit 0), and a planted fault must be caught.
// A committed record without noise floors is judged with fixed fp32-class limits that no bf16 path
// can meet, so for such a record the test first writes a fresh record of the same suite with floors
// (measured by the CPU's bf16 emulation) and compares against that. Skips without a device.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../helpers.h"
#include "record/cases.h"
#include "judge/result.h"
#include "subjects/engine.h"
#include "report/compare_text.h"
#include "diag/golden.h"
#include "backends/make_backend.h"
#include "cuda/device_counters.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/tokenizer.h"

using namespace degen;
namespace fs = std::filesystem;

namespace {

const char* const kShipped[] = {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"};

struct Shipped {
  test::TempDir dir{"cuda-e2e"};
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  fs::path record;
  std::string record_kind;  // "committed" or "regenerated with floors"
  explicit Shipped(const std::string& name) {
    const SynthPreset& p = find_synth_preset(name);
    synth_checkpoint(p.config, p.options, dir / "model");
    model = load_model(dir / "model");
    tok = Tokenizer::load(dir / "model" / "tokenizer.json");
    record = test::source_dir() / "golden" / name / "smoke";
    record_kind = "committed";
    if (!GoldenRecord::open(record).floors_present()) {
      GoldenOptions o;
      o.positions = "32";  // as the committed records (README recipe)
      write_golden(*model, tok.get(), load_suite(test::source_dir() / "cases" / "smoke.json"), dir / "golden", o,
                   make_backend);
      record = dir / "golden";
      record_kind = "regenerated with floors";
    }
  }
};

CompareResult compare_on(const Shipped& s, const std::string& config, std::vector<std::string> cases = {}) {
  const GoldenRecord rec = GoldenRecord::open(s.record);
  CompareOptions o;
  o.config = parse_run_config(config);
  o.cases = std::move(cases);
  return compare_golden(rec, *s.model, s.tok.get(), o, make_backend);
}

}  // namespace

TEST_CASE("cuda e2e: the shipped tiny models on backend=cuda pass compare against their golden records") {
  // On the CUDA emulator this is cuda-emu:compare-shipped-models (tests/emu/compare.sh), the same
  // compare of the same four models through the CLI: run twice it cost CI about 4 minutes more.
  // note: std::exit(77) is ctest's skip (SKIP_RETURN_CODE 77) for this test case alone.
  if (cuda::counters_supported()) {
    std::printf("SKIP: on the CUDA emulator cuda-emu:compare-shipped-models runs this compare (the CLI's)\n");
    std::fflush(stdout);
    std::exit(77);
  }
  for (const char* name : kShipped) {
    SUBCASE(name) {
      Shipped s(name);
      REQUIRE(GoldenRecord::open(s.record).floors_present());
      const CompareResult r = compare_on(s, "backend=cuda");
      std::printf("e2e-check %-16s backend=cuda (%s) record %s: verdict %s, exit %d, %.1f s\n", name, r.backend.c_str(),
                  s.record_kind.c_str(), metrics::verdict_name(r.verdict), r.exit_code, r.seconds);
      if (r.exit_code != 0) std::printf("%s\n", format_compare(r).c_str());
      CHECK(r.backend.find("cuda") != std::string::npos);
      CHECK_MESSAGE(r.exit_code == 0, name << " on backend=cuda: " << metrics::verdict_name(r.verdict));
    }
  }
}

TEST_CASE("cuda e2e: a planted fault on backend=cuda is caught (rope-interleaved at the first attention layer)") {
  Shipped s("tiny-qwen35");
  // one case is enough to show the first layer that breaks: the fault is in every prefill row
  const CompareResult r = compare_on(s, "backend=cuda,fault=rope-interleaved@3", {"two-plus-two"});
  std::printf("e2e-check %-16s backend=cuda,fault=rope-interleaved@3: verdict %s, exit %d\n", "tiny-qwen35",
              metrics::verdict_name(r.verdict), r.exit_code);
  CHECK(r.exit_code == 1);
  REQUIRE(!r.cases.empty());
  bool named = false;
  for (const CaseResult& c : r.cases) named = named || (c.first_break && c.first_break->second == 3);
  CHECK_MESSAGE(named, "the first layer breaking its rule should be layer 3");
}
