// Our engine under test, its passes over the golden sequence: teacher-forced and isolated of each
// mode, the consistency of the generation's logits, and MTP draft/verify teacher-forced.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>

#include "subjects/engine/run.h"

namespace degen::engine_subject {

namespace {

// The isolated errors of one mode: the golden inputs injected into every layer, each layer's output
// against the record's, judged by the floor rule (or the fixed limit without floors).
void isolated_errors(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, ForcedMode mode,
                     const LayerInputs& inputs, const std::vector<bool>& stored, CaseResult& cr) {
  const int m = static_cast<int>(mode);
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const CompareRules& rules = run.opt.rules;
  ForcedOptions io;
  io.mode = mode;
  io.run_positions = g.P;
  io.capture_positions = g.P;
  io.capture_layers = stored;
  io.inject = &inputs;
  io.logits = false;
  ForcedRun iso = forced_run(*run.eng, seq, io);
  auto errs = layer_errors(iso.l_out, g.l_out, &inputs);
  for (int l = 0; l < run.L; ++l) {
    LayerRow& row = cr.layers[l];
    row.iso[m] = errs[l];
    if (!errs[l]) continue;
    const double err = errs[l]->rel_l2;
    row.floor[m] = floors ? floors->iso[m][l] : std::nullopt;
    if (row.floor[m]) {
      row.limit[m] = rules.layer.k * *row.floor[m] + rules.layer.eps;
      row.floor_ratio[m] = metrics::floor_ratio(err, *row.floor[m]);
      row.pass[m] = metrics::floor_pass(err, *row.floor[m], rules.layer);
    } else {
      row.limit[m] = rules.fallback_rel_l2;
      row.pass[m] = err <= rules.fallback_rel_l2;  // NaN fails
    }
    if (!errs[l]->passes_nonfinite()) {
      row.pass[m] = false;
      row.floor_ratio[m] = std::nullopt;  // a ratio of the finite part alone would read as a small error
    }
  }
}

}  // namespace

// Steps 1 and 2 of each mode: teacher-forced (drift of every layer, logits and MTP logits against
// the record) and isolated (isolated_errors).
void forced_and_isolated(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                         const std::vector<int32_t>& next, CaseResult& cr) {
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t V = run.V;
  const CompareRules& rules = run.opt.rules;
  std::vector<int32_t> mtp_next;
  for (int64_t i = 0; i + 1 < T; ++i) mtp_next.push_back(i + 2 < T ? seq[static_cast<size_t>(i + 2)] : -1);
  const LayerInputs inputs = make_layer_inputs(g.embed, g.l_out, g.P, run.H);
  std::vector<bool> stored = run.rec.stored_layers();
  for (int m = 0; m < kModes; ++m) {
    const ForcedMode mode = static_cast<ForcedMode>(m);
    if (mode == ForcedMode::decode && !run.opt.decode_mode) continue;
    ForcedOptions fo;
    fo.mode = mode;
    fo.capture_positions = g.P;
    fo.capture_layers = stored;
    fo.vocab_mask = run.maskp;
    fo.mtp = mode == ForcedMode::prefill && !g.mtp_topk.ids.empty() && run.eng->has_mtp();
    fo.mtp_prenorm_hidden = run.mtp.prenorm_hidden;
    ForcedRun tf = forced_run(*run.eng, seq, fo);
    if (!g.embed.empty() && tf.embed.size() == g.embed.size())
      cr.embed[m] = metrics::tensor_error(std::span<const float>(tf.embed), std::span<const float>(g.embed));
    auto drift = layer_errors(tf.l_out, g.l_out, nullptr);
    for (int l = 0; l < run.L; ++l) {
      cr.layers[l].drift[m] = drift[l];
      std::span<const float> a(tf.l_out_norm.data() + l * T, static_cast<size_t>(T));
      std::span<const float> b(g.l_out_norm.data() + l * T, static_cast<size_t>(T));
      cr.layers[l].drift_norm[m] = metrics::tensor_error(a, b).rel_l2;
    }
    const std::optional<CaseFloors>& floors = g.floors[run.fc];
    const std::optional<double> kfloor = floors ? floors->kld[m] : std::nullopt;
    cr.logits[m] = logits_result(logit_positions(tf.logits, T, V, g.topk, next, run.maskp), kfloor, rules.kld,
                                 rules.fallback_kld);
    if (!tf.mtp_logits.empty())
      cr.mtp = logits_result(logit_positions(tf.mtp_logits, T - 1, V, g.mtp_topk, mtp_next, run.maskp),
                             floors ? floors->mtp_kld : std::nullopt, rules.kld, rules.fallback_kld);
    if (g.P > 0) isolated_errors(run, g, seq, mode, inputs, stored, cr);
  }
}

// Step 3b. Consistency: the generation's own logits against a teacher-forced run over the same tokens
// taken in the generation's order (the prompt in one call, then the record's continuation one token
// per call): the same computation, so only a real inconsistency between generation and teacher
// forcing shows (state corrupted during generation, an MTP rollback bug). Judged like the
// teacher-forced KLD of the decode mode (prefill under --no-decode).
void generation_consistency(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                            const std::vector<int32_t>& next, const CaseResult& cr, GenerationResult& gen) {
  if (gen.rows.empty()) return;
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t V = run.V;
  ForcedOptions co;
  co.mode = ForcedMode::decode;
  co.prefill_positions = cr.prompt_tokens;
  co.vocab_mask = run.maskp;
  const ForcedRun ref = forced_run(*run.eng, seq, co);
  std::vector<metrics::LogitPosition> pos;
  std::span<const uint8_t> ex;
  if (run.maskp) ex = *run.maskp;
  for (const auto& [p, tk] : gen.rows) {
    if (p < ref.logits_pos0 || p >= T) continue;
    metrics::GoldenTopK gk{tk.ids, tk.logprobs, tk.lse};
    const float* row = ref.logits.data() + (p - ref.logits_pos0) * V;
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(row, static_cast<size_t>(V)), gk,
                                               next[static_cast<size_t>(p)], ex, 10));
  }
  const int cm = static_cast<int>(run.opt.decode_mode ? ForcedMode::decode : ForcedMode::prefill);
  const std::optional<double> kfloor = g.floors[run.fc] ? g.floors[run.fc]->kld[cm] : std::nullopt;
  if (!pos.empty()) gen.logits = logits_result(pos, kfloor, run.opt.rules.kld, run.opt.rules.fallback_kld);
}

StateDiff gdn_state_diff(Backend& be, const ModelConfig& cfg, const SeqState& a, const SeqState& b, double limit) {
  StateDiff d;
  std::vector<const SeqState*> xa{&a}, xb{&b};
  for (size_t r = 0; r < a.peers.size() && r < b.peers.size(); ++r) {
    xa.push_back(&a.peers[r]);
    xb.push_back(&b.peers[r]);
  }
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_types[static_cast<size_t>(l)] != LayerKind::linear) continue;
    for (size_t r = 0; r < xa.size(); ++r)
      for (const char* part : {"S", "conv"}) {
        const bool isS = part[0] == 'S';
        const Tensor& ta = isS ? xa[r]->gdn[l].S : xa[r]->gdn[l].conv;
        const Tensor& tb = isS ? xb[r]->gdn[l].S : xb[r]->gdn[l].conv;
        if (ta.empty() || tb.empty()) continue;
        const std::vector<float> x = be.to_host_f32(ta), y = be.to_host_f32(tb);
        const metrics::TensorError e = metrics::tensor_error(std::span<const float>(x), std::span<const float>(y));
        const double err = e.passes_nonfinite() ? e.rel_l2 : std::numeric_limits<double>::infinity();
        d.err = std::max(d.err, err);
        if (!(err <= limit) && !d.layer) {
          d.layer = l;
          d.part = part;
        }
      }
  }
  return d;
}

// MTP teacher-forced draft/verify (MtpForcedResult): the golden sequence through mtp_decode with
// forced drafts, its verify rows and its GDN states after every rollback against a plain decode state
// over the same tokens.
void mtp_forced_check(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr) {
  const int64_t Tp = cr.prompt_tokens, T = static_cast<int64_t>(seq.size());
  const int k = run.mtp.draft_tokens;
  if (k <= 0 || !run.eng->has_mtp() || Tp < 1 || T - Tp < 1) return;
  // Rounds accepting 0..k drafts need about (k+1)(k+2)/2 + k + 2 tokens after the prompt; a short
  // continuation (a stop token after two) is extended with the prompt's tokens, repeated: the states
  // are checked there too, the logits only where the record has them.
  std::vector<int32_t> ext(seq);
  const int64_t need = static_cast<int64_t>(k + 1) * (k + 2) / 2 + k + 2;
  for (int64_t i = 0; static_cast<int64_t>(ext.size()) - Tp < need; ++i) ext.push_back(seq[static_cast<size_t>(i % Tp)]);
  if (run.cfg.max_position_embeddings > 0 && static_cast<int64_t>(ext.size()) > run.cfg.max_position_embeddings)
    ext.resize(static_cast<size_t>(std::max<int64_t>(T, run.cfg.max_position_embeddings)));
  Engine& eng = *run.eng;
  Backend& be = eng.backend();
  const int L = run.L;
  MtpForcedResult res;
  std::vector<metrics::LogitPosition> pos;
  std::span<const uint8_t> ex;
  if (run.maskp) ex = *run.maskp;
  // The verify row at position p against plain decode's row there (the same computation: a rollback
  // that left anything behind shows as a difference), judged like the generation's consistency check.
  std::map<int64_t, TopK> plain_rows;  // p -> top-K of plain decode's logits after ext[0..p]
  const int K = std::max(g.topk.K, 2);
  auto judge_row = [&](const std::vector<float>& row, int64_t p) {  // row predicts ext[p + 1]
    const TopK& tk = plain_rows.at(p);
    metrics::GoldenTopK gk{tk.ids, tk.logprobs, tk.lse};
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(row), gk,
                                               p + 1 < static_cast<int64_t>(ext.size()) ? ext[static_cast<size_t>(p + 1)] : -1,
                                               ex, std::min(K, 10)));
  };
  std::vector<int32_t> prompt(seq.begin(), seq.begin() + Tp);
  // The spec-decode state: the prompt in one call, keeping the MTP input rows.
  SeqState st = eng.new_state();
  TraceCapture prenorm(nullptr, Step::l_out, L - 1, false);
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  fo.keep_hidden = !run.mtp.prenorm_hidden;
  ForwardOutput out = eng.forward({SeqInput{&st, prompt}}, fo, run.mtp.prenorm_hidden ? &prenorm.trace : nullptr);
  const Tensor hidden = run.mtp.prenorm_hidden ? prenorm.got : out.hidden;
  // The plain decode state (the prompt in one call, then one token per call), advanced to the same
  // length after every round.
  SeqState plain = eng.new_state();
  ForwardOptions po;
  po.logits = LogitsRows::last;
  po.vocab_mask = run.maskp;
  auto plain_step = [&](std::vector<int32_t> ids) {
    ForwardOutput o = eng.forward({SeqInput{&plain, std::move(ids)}}, po);
    const std::vector<float> row = be.to_host_f32(o.logits);
    plain_rows[plain.pos - 1] = topk_of_row(row.data(), run.V, run.maskp, K);
  };
  plain_step(prompt);
  MtpForcing forcing;
  forcing.sequence = ext;
  forcing.on_round = [&](const SeqState& s, const VerifyPass& vp, int m, int64_t P) {
    ++res.rounds;
    if (m + 1 < static_cast<int>(vp.tokens.size())) ++res.rollbacks;
    while (plain.pos < s.pos) plain_step({ext[static_cast<size_t>(plain.pos)]});
    for (int j = 0; j <= m; ++j) judge_row(vp.logits[static_cast<size_t>(j)], P + j);
    const StateDiff d = gdn_state_diff(be, run.cfg, s, plain, kMtpStateLimit);
    res.state_err = std::max(res.state_err, d.err);
    if (d.layer && !res.state_layer) {
      res.state_layer = d.layer;
      res.state_position = s.pos;
      res.state_part = d.part;
    }
  };
  MtpDecodeArgs a;
  a.forcing = &forcing;
  a.vocab_mask = run.maskp;
  const int64_t n_new = static_cast<int64_t>(ext.size()) - Tp;
  a.max_new_tokens = static_cast<int>(n_new);
  a.mtp = run.mtp;
  std::vector<int32_t> generated{ext[static_cast<size_t>(Tp)]};
  if (n_new >= 2)
    mtp_decode(eng, st, prompt, hidden, generated, a, [&](int32_t t, int64_t) {
      generated.push_back(t);
      return static_cast<int64_t>(generated.size()) < n_new;
    });
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const int dm = static_cast<int>(ForcedMode::decode);
  if (!pos.empty())
    res.logits = logits_result(pos, floors ? floors->kld[dm] : std::nullopt, run.opt.rules.kld, run.opt.rules.fallback_kld);
  res.pass = (!res.logits || res.logits->pass) && !res.state_layer;
  cr.mtp_forced = std::move(res);
}

}  // namespace degen::engine_subject
