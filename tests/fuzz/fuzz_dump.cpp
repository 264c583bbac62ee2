// A dump file (docs/dump-format.md: one case of another engine's teacher-forced run) as compare
// --dump reads it: DumpReader opens it and checks it against what the record and the model say (here
// a 4-layer model of vocabulary 16 and hidden size 8, GGGA, and a case of 3 tokens: small, so
// that inputs stay small), then every tensor the judge may ask for is read through mapped() (value
// heads untiled, the query scaled), the embedding and l_out compared with a [T, H] reference as with
// the record's, and every logits row scored by metrics::compare_logits against a
// fixed golden row. The seeds (make_seeds.py) are well-formed dumps of both naming tables for this
// model. Beyond the common contract: a KLD below -kKldRoundoff against this sane golden is a finding
// (the guard's InputError would blame the golden, which is not at fault), as is a row that is not
// one of: a KLD >= 0 up to rounding, or the worst case (+inf) for NaN / +inf / out-of-range logits.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "subjects/dump_reader.h"
#include "judge/metrics.h"
#include "fuzz_common.h"
#include "model/config.h"
#include "util/json_input.h"

namespace {

constexpr int64_t kTokens = 3;  // the case's golden sequence (make_seeds.py writes the same)

const degen::ModelConfig& config() {
  static const degen::ModelConfig c = degen::parse_model_config(degen::parse_json(R"({
      "model_type": "qwen3_5_text", "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 4,
      "full_attention_interval": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
      "partial_rotary_factor": 0.5, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
      "linear_key_head_dim": 2, "linear_value_head_dim": 2, "intermediate_size": 16})", "fuzz config"),
                                                                "fuzz config");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const degen::ModelConfig& cfg = config();
  const auto path = fuzz::scratch() / "fuzz-case.safetensors";
  fuzz::write_bytes(path, fuzz::as_view(data, size));
  fuzz::expect_clean("dump", [&] {
    const degen::DumpReader f(path, "fuzz-case", kTokens, cfg);
    double sum = 0;
    for (const degen::DumpName& n : f.names())
      for (int l = -1; l < cfg.num_layers; ++l) {
        if ((n.kind == 'M') != (l < 0)) continue;
        const degen::DumpRows r = f.mapped(n, l);
        if (r.v.empty()) continue;
        if (r.rows != kTokens || int64_t(r.v.size()) != r.rows * r.cols)
          fuzz::finding("dump", std::string("tensor of ") + n.engine + " read with the wrong size");
        sum += r.v.front() + r.v.back();
        if (n.step == degen::Step::embed || n.step == degen::Step::l_out) {  // compared with the record's [T, H]
          const std::vector<float> ref(static_cast<size_t>(kTokens * cfg.hidden_size), 1.0f);
          const size_t k = std::min(r.v.size(), ref.size());
          sum += degen::metrics::tensor_error(std::span<const float>(r.v.data(), k), std::span<const float>(ref)).rel_l2;
        }
      }
    const std::vector<float> logits = f.logits();
    const int64_t V = cfg.vocab_size;
    if (int64_t(logits.size()) != kTokens * V) fuzz::finding("dump", "logits read with the wrong size");
    std::vector<float> golden(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) golden[static_cast<size_t>(i)] = static_cast<float>(i % 5) - 2.0f;
    for (int64_t t = 0; t < kTokens; ++t) {
      const std::span<const float> row(logits.data() + t * V, static_cast<size_t>(V));
      degen::metrics::LogitPosition p;
      try {
        p = degen::metrics::compare_logits(row, golden, 1);
      } catch (const degen::InputError& e) {
        fuzz::finding("dump", std::string("the KLD guard fired against a sane golden: ") + e.what());
      }
      const bool worst = p.test_nonfinite > 0 || p.test_out_of_range || p.test_top1 < 0;
      if (worst ? p.kld != INFINITY : !(p.kld >= -degen::metrics::kKldRoundoff))
        fuzz::finding("dump", "a logits row gave KLD " + std::to_string(p.kld));
      sum += p.kld;
    }
    if (sum == 12345.678) std::abort();  // keeps the reads
  });
  return 0;
}
