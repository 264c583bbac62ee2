// A prompt suite (cases/*.json) as load_suite reads it, then every case rendered and encoded for a
// real model configuration and tokenizer (the trained model's), as golden and compare do, and its
// sampling overrides applied.
#include "fuzz_common.h"
#include "record/cases.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "model/tokenizer.h"

namespace {
struct Model {
  degen::ModelConfig cfg = degen::load_model_config(fuzz::source_dir() / "models/tiny-trained");
  std::unique_ptr<degen::Tokenizer> tok = degen::Tokenizer::load(fuzz::source_dir() / "models/tiny-trained/tokenizer.json");
};
const Model& model() {
  static Model m;
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_view(data, size));
  const Model& m = model();
  fuzz::expect_clean("cases", [&] {
    const degen::Suite suite = degen::parse_suite(text, "cases.json");
    for (const degen::Case& c : suite.cases) {
      (void)degen::case_sampling(c, degen::SamplingParams{});
      fuzz::expect_clean("cases (encode_case)", [&] {
        const degen::CasePrompt p = degen::encode_case(c, m.tok.get(), m.cfg);
        if (p.ids.empty()) fuzz::finding("cases", "encode_case gave no ids for case " + c.id);
        for (int32_t id : p.ids)
          if (id < 0 || id >= m.cfg.vocab_size) fuzz::finding("cases", "an id outside the vocabulary in case " + c.id);
      });
    }
  });
  return 0;
}
