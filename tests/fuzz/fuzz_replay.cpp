// A bisect replay file (--replay) as BisectOracle reads it, with the identity the CLI checks, then
// three evaluations: replayed where the file holds the configuration, else run (a stand-in) and
// appended to the file.
#include "diag/bisect.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool with_identity = data[0] & 1;
  const auto path = fuzz::scratch() / "replay.jsonl";
  fuzz::write_bytes(path, fuzz::as_view(data + 1, size - 1));
  fuzz::expect_clean("replay", [&] {
    nlohmann::json identity;
    if (with_identity) identity = {{"model", "fuzz"}, {"golden", "sha256:0"}, {"cases", "all"}, {"decode", true}};
    degen::BisectOracle oracle(
        [](const degen::RunConfig& rc) {
          degen::CellSummary s;
          s.verdict = rc.str().find("flash") != std::string::npos ? "bad" : "good";
          return s;
        },
        path, identity);
    for (const char* c : {"", "attn=flash", "backend=cuda,gdn=recurrent"}) {
      const degen::CellSummary& s = oracle.eval(degen::parse_run_config(c), "fuzz");
      (void)s.reason.size();
    }
  });
  return 0;
}
