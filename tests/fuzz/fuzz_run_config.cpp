// A configuration string (--config, --good/--bad, sweep fragments: "backend=cuda,attn=flash@3,..."):
// parsed, printed canonically, and the canonical form parsed again must print the same (the
// canonical string keys results.jsonl and replay lines, so two spellings of one configuration
// must meet there).
#include "engine/run_config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_view(data, size));
  fuzz::expect_clean("run config", [&] {
    const degen::RunConfig rc = degen::parse_run_config(text);
    const std::string canon = rc.str();
    std::string again;
    try {
      again = degen::parse_run_config(canon).str();
    } catch (const degen::Error& e) {
      fuzz::finding("run config", "the canonical form '" + canon + "' of '" + text + "' does not parse: " + e.what());
    }
    if (again != canon) fuzz::finding("run config", "canonical form not stable: '" + canon + "' -> '" + again + "'");
  });
  return 0;
}
