// compare --server, the generated ids judged: the decode path (each generated step's listing against the
// reference over the engine's own sequence) and greedy agreement (subjects/server/run.h).
#include "subjects/server/run.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "engine/sampler.h"
#include "judge/compare.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen::server_subject {


// The generated ids into gen.tokens, judged: an id beyond the vocabulary ends them (bad: no correct
// server of this model can generate it); an id the tokenizer does not define (a padding row) is bad
// in a greedy case (the reference never picks one; its mass there is ~1e-6, docs/server.md) and a
// warning in a sampled one.
void take_generated(const ServerRun& run, const server_answer::Generated& got, bool greedy, GenerationResult& gen,
                    std::vector<std::string>& bad, std::vector<std::string>& warn) {
  gen.stop_reason = got.stop_reason;
  bool padding_seen = false;  // the first one is reported
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const int64_t id = got.tokens[i];
    if (id >= run.V) {
      bad.push_back(cat("the server generated token id ", id, " at step ", i, ", beyond the model's vocabulary of ", run.V,
                        " ids (its logit rows): no correct server of this model can"));
      return;
    }
    if (!run.mask.empty() && run.mask[static_cast<size_t>(id)] && !padding_seen) {
      padding_seen = true;
      (greedy ? bad : warn)
          .push_back(cat("the server generated token id ", id, " at step ", i, ", which the tokenizer does not define (a padding row)",
                         greedy ? ": a greedy generation of a correct engine never picks one" : ""));
    }
    gen.tokens.push_back(static_cast<int32_t>(id));
  }
}

// The engines of the decode-path scoring, made once: the reference (RunConfig{}: fp32 on the CPU)
// and the floor class's engine (fp32 class: the fp64 reference, the same engine the record's fp32
// floors come from; bf16: the bf16 emulation; a measured class: its configuration).
void decode_engines(const ServerRun& run) {
  if (run.ref_eng) return;
  const ModelConfig& cfg = run.model.config;
  RunConfig ref;
  RunConfig fl;
  if (run.o.measured_class) {
    fl = *run.o.measured_class;
    run.floor_name = cat("our engine at ", fl.str(), " (the ", run.o.class_name, " class)");
  } else if (run.o.fclass == FloorClass::bf16) {
    fl.precision = Precision::bf16;
    run.floor_name = "our bf16 emulation (the bf16 class's floor engine)";
  } else {
    fl.precision = Precision::fp64;
    run.floor_name = "our fp64 reference (the fp32 class's floor engine)";
  }
  run.ref_be = run.o.factory(ref, cfg);
  run.ref_eng = std::make_unique<Engine>(cfg, run.model.weights, *run.ref_be, engine_options(ref));
  run.floor_be = run.o.factory(fl, cfg);
  run.floor_eng = std::make_unique<Engine>(cfg, run.model.weights, *run.floor_be, engine_options(fl));
}

// KLD(reference || the distribution `lp` [V]) at row `row` of a reference top-K block.
double step_kld(const std::vector<float>& lp, const TopKBlock& ref, int64_t row, const ServerRun& run) {
  const int K = ref.K;
  metrics::GoldenTopK gk{std::span<const int32_t>(ref.ids.data() + row * K, static_cast<size_t>(K)),
                         std::span<const float>(ref.logprobs.data() + row * K, static_cast<size_t>(K)), 0.0};
  return metrics::compare_logits_topk(lp, gk, -1, run.mask).kld;
}

// A server's list at `row` of a reference top-K block scored against it (metrics::compare_listing),
// its padding-row mass taken out with the block's lse_pad, as teacher_forced does with the record's.
metrics::LogitPosition listing_position(const TopList& top, const TopKBlock& ref, int64_t row, const ServerRun& run) {
  const int K = ref.K;
  metrics::GoldenTopK gk{std::span<const int32_t>(ref.ids.data() + row * K, static_cast<size_t>(K)),
                         std::span<const float>(ref.logprobs.data() + row * K, static_cast<size_t>(K)), 0.0};
  const std::optional<double> shift = vocab_shift(ref, row);
  return metrics::compare_listing(gk, listing_of(top, run, shift ? -*shift : 0.0), -1);
}

// A complete listing (every id of the vocabulary) must hold the whole mass: else the server's
// probabilities do not sum to 1 and cannot be scored as a distribution.
void check_complete_mass(const TopList& top, const ServerRun& run, const std::string& url, int64_t step) {
  if (static_cast<int64_t>(top.size()) < run.V) return;
  double mass = 0;
  for (const auto& e : top) mass += std::exp(e.second);
  if (mass < 1 - server_answer::kMaxServerMassExcess)
    input_error("malformed response from ", url, ": the ", top.size(), " log-probs listed at generated step ", step,
                " (every id of the vocabulary) sum to a probability of ", mass, ", expected 1: not a probability distribution");
}

// KLD(base || test) between two of the server's own listings (one as the golden top-K: padding ids
// and ids beyond the vocabulary out, an id listed twice once, a listing of every real id renormalised
// over them as the reference's is); nullopt when the base lists no real id.
std::optional<double> lists_kld(const ServerRun& run, const TopList& base, const TopList& test) {
  metrics::Listing b = listing_of(base, run, 0.0);
  std::vector<int32_t> ids;
  std::vector<float> lps;
  for (size_t k = 0; k < b.ids.size(); ++k)
    if (std::isfinite(b.logprobs[k])) {
      ids.push_back(b.ids[k]);
      lps.push_back(static_cast<float>(b.logprobs[k]));
    }
  if (ids.empty()) return std::nullopt;
  if (b.unlisted == 0) {
    double mass = 0;
    for (float v : lps) mass += std::exp(static_cast<double>(v));
    for (float& v : lps) v = static_cast<float>(static_cast<double>(v) - std::log(mass));
  }
  metrics::GoldenTopK g{std::span<const int32_t>(ids), std::span<const float>(lps), 0.0};
  return metrics::compare_listing(g, listing_of(test, run, 0.0), -1).kld;
}

// The decode path (judge/result.h DecodePathResult): the server's distribution at each generated step
// against our reference over the engine's own sequence; per-step limit from the floor class's engine
// over the same sequence, decoded as a server decodes (prompt in one call, then a token per call).
DecodePathResult decode_path(const ServerRun& run, const GoldenCase& g, const server_answer::Generated& got,
                             const std::vector<int32_t>& generated, const std::string& url, int64_t need_step) {
  DecodePathResult d;
  const int64_t P = static_cast<int64_t>(g.prompt.size());
  const int64_t n = static_cast<int64_t>(generated.size());
  d.steps = n;
  d.kld.assign(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < n; ++i)
    if (!got.steps[static_cast<size_t>(i)].empty()) {
      ++d.stated;
      if (run.o.decode_steps < 0 || static_cast<int64_t>(todo.size()) < run.o.decode_steps) todo.push_back(i);
    }
  if (d.stated < n)
    d.note = cat("the server stated no distribution at ", n - d.stated, " of ", n, " generated steps",
                 got.draft_n && *got.draft_n > 0 ? " (llama-server states none for tokens accepted from drafts)" : "");
  if (static_cast<int64_t>(todo.size()) < d.stated)
    d.note += cat(d.note.empty() ? "" : "; ", "--decode-steps ", run.o.decode_steps, ": ", todo.size(), " of ", d.stated, " stated steps scored");
  // The per-step floor is measured up to the last scored step, and up to need_step (the greedy
  // agreement's divergence) where that lies further.
  const int64_t last = std::min(std::max(todo.empty() ? int64_t{-1} : todo.back(), need_step), n - 1);
  if (last < 0 || P == 0) return d;
  decode_engines(run);
  std::vector<int32_t> seq = g.prompt;
  seq.insert(seq.end(), generated.begin(), generated.begin() + last + 1);  // the step `last` needs tokens up to it
  // The reference, teacher-forced (prefill) over the engine's sequence: rows P-1 .. P-1+last. Its
  // padding rows keep their logits (no vocab_mask) so that the block has each row's lse_pad, which takes
  // a server's log-probs to the real ids' normalisation (topk_block masks them for the top-K and lse).
  const std::vector<uint8_t>* mask = run.mask.empty() ? nullptr : &run.mask;
  ForcedOptions ro;
  ro.run_positions = P + last;
  const ForcedRun ref = forced_run(*run.ref_eng, seq, ro);
  const TopKBlock rk = topk_block(ref.logits, P + last, run.V, mask, g.topk.K > 0 ? g.topk.K : 40);
  // The floor engine, decoding as a server does.
  ForcedOptions fo;
  fo.mode = ForcedMode::decode;
  fo.vocab_mask = mask;
  fo.run_positions = P + last;
  fo.prefill_positions = P;
  const ForcedRun fl = forced_run(*run.floor_eng, seq, fo);
  double resolved = 0;
  for (int64_t i = 0; i <= last; ++i) {
    const int64_t row = P - 1 + i;
    if (std::find(todo.begin(), todo.end(), i) != todo.end()) {
      check_complete_mass(got.steps[static_cast<size_t>(i)], run, url, i);
      const metrics::LogitPosition lp = listing_position(got.steps[static_cast<size_t>(i)], rk, row, run);
      d.kld[static_cast<size_t>(i)] = lp.kld;
      resolved += lp.resolved.value_or(1.0);
    }
    const size_t frow = static_cast<size_t>(row - fl.logits_pos0);
    const std::vector<float> frow_logits(fl.logits.begin() + static_cast<std::ptrdiff_t>(frow * run.V),
                                         fl.logits.begin() + static_cast<std::ptrdiff_t>((frow + 1) * run.V));
    const double f = step_kld(frow_logits, rk, row, run);
    d.floor.push_back(f);
    d.peak_floor = std::max(d.peak_floor, std::isfinite(f) ? f : 0.0);
  }
  d.scored = static_cast<int64_t>(todo.size());
  d.floor_source = run.floor_name;
  d.limit = run.o.rules.kld.k * d.peak_floor + run.o.rules.kld.eps;
  if (todo.empty()) return d;
  double sum = 0;
  for (int64_t i : todo) {
    const double x = d.kld[static_cast<size_t>(i)];
    sum += x;
    d.max_kld = std::isnan(x) ? x : std::max(d.max_kld, x);
    if (!d.first_bad && !(x <= d.limit)) d.first_bad = i;  // NaN is over
  }
  d.mean_kld = sum / static_cast<double>(todo.size());
  d.resolved = resolved / static_cast<double>(todo.size());
  d.pass = !d.first_bad;
  if (d.first_bad) {
    // The engine's own prefill of the same tokens: the state carried across steps, or the layer math?
    const int64_t i = *d.first_bad, row = P - 1 + i;
    const std::vector<int32_t> prefix(seq.begin(), seq.begin() + row + 1);
    const TopList pre = run.api->position(run.ctx, prefix);
    d.prefill_kld = listing_position(pre, rk, row, run).kld;
    // The engine against itself: its decode distribution against its own prefill one.
    d.self_kld = lists_kld(run, pre, got.steps[static_cast<size_t>(i)]);
  }
  return d;
}

// Greedy agreement (metrics.md "Greedy agreement"): where a greedy generation leaves the golden
// continuation, the record's log-probs give the margin m = log q(golden) - log q(engine's token) at
// that position. Moving that much probability between the two tokens costs at least
// KLD ~ m^2 p_g p_t / (2 (p_g + p_t)) (second order in the log-odds of the pair, the other ids held),
// so noise whose per-step KLD stays within the limit L flips at most m_flip = sqrt(2 L (p_g + p_t) / (p_g p_t)).
// A divergence with m > m_flip is bad on its own. The engine's token outside the record's top-K:
// its log-prob is at most the K-th's; m and p_t are taken there (the margin is then a lower bound).
// note: the second-order cost is accurate for small moves; for moves of a nat or more it over-states
// their KLD (the exact cost grows linearly in the log-odds at large moves), so m_flip would come out
// too small: the rule is not applied where m_flip exceeds this.
constexpr double kMaxFlipMargin = 1.0;

// A stop reason that says the server ran out of tokens (its length limit), not that it chose to stop:
// llama-server's stop_type "limit", the OpenAI API's and SGLang's finish_reason "length".
bool length_stop(const std::string& reason) { return reason == "limit" || reason == "length"; }

void greedy_agreement(const ServerRun& run, const GoldenCase& g, GenerationResult& gen, double limit, const std::vector<int32_t>& stops,
                      std::vector<std::string>& bad) {
  if (!gen.first_divergence) {
    gen.agreement = "same";
    return;
  }
  const int64_t d = *gen.first_divergence;
  // Stop semantics: a record generated with stops ignored runs through its stop ids; llama-server's
  // ignore_eos bans end-of-generation ids instead (as does its OpenAI endpoint), so from the golden's
  // first stop id on, the two rules differ and agreement is not judged.
  for (int64_t j = 0; j <= d && j < static_cast<int64_t>(g.continuation.size()); ++j)
    if (std::find(stops.begin(), stops.end(), g.continuation[static_cast<size_t>(j)]) != stops.end()) {
      gen.agreement = cat("not judged: at or beyond the golden's first stop id (token ", j,
                          "), where a server's ignore_eos bans what the record generated through");
      return;
    }
  if (d >= static_cast<int64_t>(g.continuation.size())) {
    gen.agreement = "not judged: the engine goes on where the golden continuation ends";
    return;
  }
  const int32_t gt = g.continuation[static_cast<size_t>(d)];
  const bool ended = d >= static_cast<int64_t>(gen.tokens.size());  // the engine stopped where the golden goes on
  if (ended && gen.tokens.empty()) {
    gen.agreement = "not judged: no tokens (an empty answer is judged on its own)";
    return;
  }
  if (ended) {
    // A server leaves its stop token out of the tokens: ending where the golden has a stop id is the same end.
    if (!g.ignore_stop && std::find(run.stops.begin(), run.stops.end(), gt) != run.stops.end()) {
      gen.agreement = "same (both end at a stop token)";
      return;
    }
    if (length_stop(gen.stop_reason) || g.ignore_stop) {
      gen.agreement = "cut short";
      bad.push_back(cat("greedy generation cut short: the server stopped after ", d, " of the golden's ", g.continuation.size(),
                        " tokens (stop: ", gen.stop_reason, ") where the golden goes on with token ", gt,
                        g.ignore_stop ? " (stops ignored)" : ", not a stop token", "; the request's budget was ", g.max_new_tokens,
                        " tokens: a correct greedy engine with that budget cannot end there"));
      return;
    }
  }
  const int64_t row = static_cast<int64_t>(g.prompt.size()) - 1 + d;
  const int K = g.topk.K;
  if (K < 2 || row >= static_cast<int64_t>(g.topk.ids.size()) / K) {
    gen.agreement = "not judged: the record has no top-K there";
    if (ended)  // no margin to weigh the early end against: a correct greedy engine does not end there
      bad.push_back(cat("greedy generation ended after ", d, " tokens (stop: ", gen.stop_reason, ") where the golden goes on with token ",
                        gt, ", not a stop token"));
    return;
  }
  // The engine's token at d: what it generated, or, where it ended, the stop id the record finds likeliest.
  double lg = -std::numeric_limits<double>::infinity(), le = lg;
  int32_t et = ended ? -1 : gen.tokens[static_cast<size_t>(d)];
  bool listed = false;
  for (int k = 0; k < K; ++k) {
    const int32_t id = g.topk.ids[static_cast<size_t>(row * K + k)];
    const double v = g.topk.logprobs[static_cast<size_t>(row * K + k)];
    if (id == gt) lg = v;
    const bool is_et = ended ? std::find(run.stops.begin(), run.stops.end(), id) != run.stops.end() && !listed : id == et;
    if (is_et) {
      le = v;
      et = id;
      listed = true;
    }
  }
  if (!listed) le = g.topk.logprobs[static_cast<size_t>(row * K + K - 1)];
  if (!std::isfinite(lg) || !std::isfinite(le)) {
    gen.agreement = "not judged: the record's log-probs there are not finite";
    return;
  }
  const double m = lg - le, pg = std::exp(lg), pt = std::exp(le);
  gen.margin_engine = m;
  gen.flip_margin = std::sqrt(2 * limit * (pg + pt) / (pg * pt));
  if (*gen.flip_margin > kMaxFlipMargin) {
    gen.agreement = cat("not judged: the per-step limit ", limit, " would allow moves of ", *gen.flip_margin,
                        " nats, beyond where the second-order rule holds (", kMaxFlipMargin, ")");
    return;
  }
  const std::string what = ended ? cat("the server ended after ", d, " tokens (stop: ", gen.stop_reason, ")")
                                 : cat("token ", d, " is ", et);
  const std::string theirs = ended ? (listed ? cat("its likeliest stop token ", et) : std::string("any stop token"))
                                   : std::string("the engine's token");
  if (m > *gen.flip_margin) {
    gen.agreement = "beyond noise";
    bad.push_back(cat("greedy agreement: ", what, " where the golden has ", gt, ", a margin of ", m, " nats over ", theirs,
                      listed ? "" : " at least (outside the record's top-K)", " in the record, larger than the ",
                      *gen.flip_margin, " that noise within the per-step KLD limit ", limit, " can flip"));
  } else {
    gen.agreement = "within noise";
  }
}

}  // namespace degen::server_subject
