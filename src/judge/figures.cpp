// The figures every comparison computes the same way (judge/result.h): a logits verdict from
// per-position metrics, the log-prob offset of another engine, the free-running figures and the
// model-or-engine reasons, the engine classes and their measured floors, whitespace ids, and the reason
// of a layer that breaks its rule.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <span>

#include "judge/result.h"
#include "engine/engine.h"
#include "judge/format.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

namespace compare_format {

std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  return cat(std::scientific, std::setprecision(2), v);
}

}  // namespace compare_format

using compare_format::sci;
using metrics::Verdict;

void set_logprob_offset(LogitsResult& lr, const std::vector<float>& logits, int64_t rows, int64_t V, const TopKBlock& golden) {
  double sum = 0;
  int64_t n = 0;
  bool vocab = true;
  const int K = golden.K;
  for (int64_t i = 0; i < rows; ++i) {
    const std::vector<double> lp = metrics::log_softmax(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)));
    const std::optional<double> shift = vocab_shift(golden, i);
    if (!shift) vocab = false;
    for (int k = 0; k < K; ++k) {
      const double e = lp[static_cast<size_t>(golden.ids[static_cast<size_t>(i * K + k)])];
      const double g = static_cast<double>(golden.logprobs[static_cast<size_t>(i * K + k)]) + shift.value_or(0.0);
      if (!std::isfinite(e) || !std::isfinite(g)) continue;
      sum += e - g;
      ++n;
    }
  }
  if (n > 0) lr.logprob_offset = sum / static_cast<double>(n);
  lr.logprob_offset_vocab = vocab;
}

std::string logprob_offset_note(const CompareResult& r, int64_t V, const std::vector<uint8_t>& mask, const std::string& who) {
  double sum = 0, worst = 0;
  int n = 0;
  bool vocab = true;
  for (const CaseResult& c : r.cases) {
    const std::optional<LogitsResult>& l = c.logits[0] ? c.logits[0] : c.logits[1];  // a decode-mode dump: [1]
    if (!l || !l->logprob_offset) continue;
    const double v = *l->logprob_offset;
    sum += v;
    worst = std::abs(v) > std::abs(worst) ? v : worst;
    vocab = vocab && l->logprob_offset_vocab;
    ++n;
  }
  if (n == 0) return cat("log-probs: the ", who, " listed none of the record's top-K ids: no log-prob offset");
  const int64_t real = mask.empty() ? V : V - static_cast<int64_t>(std::count(mask.begin(), mask.end(), uint8_t(1)));
  std::string o = cat("log-probs: the ", who, "'s minus the record's, mean ", sci(sum / n), " nats (case means up to ", sci(worst),
                      "), ");
  if (vocab) return o + cat("both over all ", V, " rows of the LM head (the record's topk_logprobs - lse_pad)");
  o += cat("the record's over the tokenizer's ", real, " ids as stored");
  if (real < V)
    o += cat("\nnote: the record has no lse_pad (made before it): its log-probs are normalised over the tokenizer's ", real,
             " ids, the ", who, "'s over all ", V, " rows, so the offset above includes -lse_pad, a constant the engine is not\n",
             "      to blame for (KLD and top-1 renormalise over the real ids; only a partial top-K carries it); rerun ",
             "`degenbisect golden` to record lse_pad");
  return o;
}

EngineClass parse_engine_class(const std::string& name) {
  EngineClass c;
  c.name = name;
  if (name == "fp32") c.record_class = FloorClass::fp32;
  else if (name == "bf16") c.record_class = FloorClass::bf16;
  else if (name == "q8_0") {
    c.record_class = FloorClass::bf16;
    c.measured = RunConfig{}.with_precision(Precision::q8_0);
  } else {
    input_error("engine class '", name, "': expected fp32 (f32 weights and caches, exact attention), bf16 (16-bit ",
                "weights or caches) or q8_0 (Q8_0 weights, floor measured with precision=q8_0)");
  }
  return c;
}

double measured_kld_floor(const GoldenCase& g, const Model& model, const RunConfig& rc, const BackendFactory& factory,
                          const std::vector<uint8_t>* mask) {
  DEGEN_ASSERT(factory, "measured_kld_floor needs a backend factory");
  const ModelConfig& cfg = model.config;
  std::unique_ptr<Backend> be = factory(rc, cfg);
  Engine eng(cfg, model.weights, *be, engine_options(rc));
  return teacher_forced_kld(eng, *be, g, cfg.vocab_size, mask);
}

double teacher_forced_kld(Engine& eng, Backend& be, const GoldenCase& g, int64_t vocab_size, const std::vector<uint8_t>* mask) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  fo.vocab_mask = mask;
  const ForwardOutput out = eng.forward({SeqInput{&st, seq}}, fo);
  const std::vector<float> logits = be.to_host_f32(out.logits);
  std::vector<int32_t> next(static_cast<size_t>(T), -1);
  for (int64_t i = 0; i + 1 < T; ++i) next[static_cast<size_t>(i)] = seq[static_cast<size_t>(i + 1)];
  return mean_kld(logit_positions(logits, T, vocab_size, g.topk, next, mask));
}

LogitsResult logits_result(const std::vector<metrics::LogitPosition>& pos, const std::optional<double>& floor,
                           const metrics::FloorRule& rule, double fallback) {
  LogitsResult r;
  r.summary = metrics::summarize_logits(pos);
  for (const auto& p : pos) {
    r.kld.push_back(p.kld);
    r.top1_agree.push_back(p.top1_agree ? 1 : 0);
    if (p.test_nonfinite > 0) ++r.nonfinite;
  }
  r.mean_kld = pos.empty() ? 0 : r.summary.kld_mean.value;
  r.floor = floor;
  r.limit = floor ? rule.k * *floor + rule.eps : fallback;
  r.pass = r.nonfinite == 0 && r.mean_kld <= r.limit;  // NaN fails
  return r;
}

void generation_figures(GenerationResult& gen, const metrics::DegenRules& rules, const metrics::ContentOptions& content,
                        bool nonfinite, bool golden_nonfinite) {
  gen.degen = metrics::degeneration(gen.tokens, rules, nonfinite, content);
  gen.golden_degen = metrics::degeneration(gen.golden_tokens, rules, golden_nonfinite, content);
  const size_t n = std::min(gen.tokens.size(), gen.golden_tokens.size());
  for (size_t i = 0; i < n && !gen.first_divergence; ++i)
    if (gen.tokens[i] != gen.golden_tokens[i]) gen.first_divergence = static_cast<int64_t>(i);
  if (!gen.first_divergence && gen.tokens.size() != gen.golden_tokens.size()) gen.first_divergence = static_cast<int64_t>(n);
}

void degeneration_reasons(GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  gen.verdict = metrics::degeneration_verdict(gen.degen.degenerate, gen.golden_degen.degenerate);
  if (gen.verdict == Verdict::bad && gen.model_changed)
    bad.push_back(cat("degeneration of a changed checkpoint: ", gen.degen.reason, " (the golden run is not degenerate, ",
                      "but the weights differ from the record's model: the model, not necessarily the engine)"));
  else if (gen.verdict == Verdict::bad)
    bad.push_back(cat("engine-induced degeneration: ", gen.degen.reason, " (the golden run is not degenerate)"));
  else if (gen.verdict == Verdict::model_intrinsic)
    warn.push_back(cat("model-intrinsic degeneration: ", gen.degen.reason, " (the golden run degenerates too: ",
                       gen.golden_degen.rule.value_or("?"), ")"));
}

std::vector<int32_t> whitespace_ids(const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tok.vocab_end(); ++id) {
    if (!tok.is_defined(id) || tok.is_added(id)) continue;
    std::string b = tok.token_bytes(id);
    if (!b.empty() && std::all_of(b.begin(), b.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }))
      out.push_back(id);
  }
  return out;
}

std::string isolated_break_reason(const LayerRow& row, int m) {
  const int l = row.layer;
  const metrics::TensorError& e = *row.iso[m];
  const std::string limit = row.limit[m] ? sci(*row.limit[m]) : "?";
  if (!e.passes_nonfinite())  // rel_l2 and the ratio cover the finite elements only: say what was found
    return cat("isolated output of layer ", l, " (", forced_mode_name(static_cast<ForcedMode>(m)), ") has ",
               e.nonfinite + e.ref_nonfinite_mismatch, " non-finite values of ", e.n,
               " where the record's are finite (expected finite values within rel_l2 ", limit, ")");
  return cat("isolated error breaks ", row.floor[m] ? "the floor rule" : "the fixed limit (no floors)", " first at layer ", l,
             " (", forced_mode_name(static_cast<ForcedMode>(m)), "): rel_l2 ", sci(e.rel_l2), " > ", limit,
             row.floor_ratio[m] ? cat(" (floor_ratio ", sci(*row.floor_ratio[m]), ")") : std::string());
}

}  // namespace degen
