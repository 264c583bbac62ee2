// MTP speculative decoding: verify with per-position GDN checkpoints, rollback, draft/accept rules,
// and the per-sequence round loop (see spec_decode.h for the design).
#include "engine/spec_decode.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/serving.h"
#include "util/error.h"
#include "util/philox.h"

namespace degen {

MtpOptions mtp_options(const RunConfig& rc, const ModelConfig& cfg) {
  MtpOptions o;
  o.draft_tokens = rc.mtp;
  o.no_rollback = rc.has_fault(fault_info(Fault::mtp_no_rollback).name, -1, &cfg);
  o.prenorm_hidden = rc.has_fault(fault_info(Fault::mtp_prenorm_hidden).name, -1, &cfg);
  o.stale_slot = serving_options(rc, cfg).stale_slot;
  return o;
}

void apply_stale_slot(Engine& eng, SeqState& st, const VerifyPass& vp, int m, const MtpOptions& opt) {
  if (m <= 0 || opt.stale_slot.empty()) return;
  const GdnCheckpoint& cp = vp.checkpoints.at(0);
  eng.edit_gdn(st, [&](Backend& be, int r, int l, GdnState& g) {
    if (!opt.stale_slot[static_cast<size_t>(l)]) return;
    const GdnCheckpoint& c = r == 0 ? cp : cp.peers[static_cast<size_t>(r - 1)];
    g = GdnState{be.clone(c.conv[static_cast<size_t>(l)]), be.clone(c.S[static_cast<size_t>(l)])};
  });
}

void check_mtp_supported(const Engine& eng, const MtpOptions& opt) {
  if (opt.draft_tokens > 0 && !eng.has_mtp())
    throw UntestableError(cat("mtp=", opt.draft_tokens, ": ", eng.config().origin,
                              " has no MTP weights (mtp.*), so there is no draft head to test"));
}

TraceCapture::TraceCapture(Trace* user, Step step, int layer, bool mtp)
    : user_(user), step_(step), layer_(layer), mtp_(mtp) {
  trace.observer = [this](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (user_ && user_->on()) user_->observer(ev, t, be);  // the user's observer sees (and may replace) it first
    if (ev.step == step_ && ev.layer == layer_ && ev.mtp == mtp_) got = be.clone(t);
  };
}

VerifyPass verify_tokens(Engine& eng, SeqState& st, std::span<const int32_t> tokens,
                         const std::vector<uint8_t>* vocab_mask, bool prenorm_hidden, Trace* trace) {
  const ModelConfig& cfg = eng.config();
  Backend& be = eng.backend();
  VerifyPass vp;
  vp.pos0 = st.pos;
  vp.tokens.assign(tokens.begin(), tokens.end());
  TraceCapture pre(trace, Step::l_out, cfg.num_layers - 1, false);
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = vocab_mask;
  fo.keep_hidden = !prenorm_hidden;
  for (size_t j = 0; j < tokens.size(); ++j) {
    // note: one token per call, exactly plain decode's call (see the header for why)
    ForwardOutput out = eng.forward({SeqInput{&st, {tokens[j]}}}, fo, prenorm_hidden ? &pre.trace : trace);
    vp.logits.push_back(be.to_host_f32(out.logits));
    vp.hidden.push_back(prenorm_hidden ? pre.got : out.hidden);
    if (j + 1 == tokens.size()) break;  // the last position is never a rollback target
    vp.checkpoints.push_back(eng.checkpoint_gdn(st));
  }
  return vp;
}

void rollback_target(SeqState& st, VerifyPass& vp, int m, bool restore_gdn) {
  const int k = static_cast<int>(vp.tokens.size()) - 1;
  DEGEN_ASSERT(m >= 0 && m <= k, "rollback to ", m, " of ", k, " drafts");
  const int64_t len = vp.pos0 + m + 1;
  for_each_rank_state(st, [&](SeqState& s) {
    s.pos = len;
    for (KvCache& c : s.kv) c.len = std::min(c.len, len);  // full-attention layers; others hold 0 rows
  });
  if (m == k || !restore_gdn) return;
  restore_gdn_checkpoint(st, vp.checkpoints.at(static_cast<size_t>(m)));
}

void rollback_mtp(SeqState& st, int64_t len) {
  for_each_rank_state(st, [&](SeqState& s) {
    s.mtp_pos = std::min(s.mtp_pos, len);
    s.mtp_kv.len = std::min(s.mtp_kv.len, len);
  });
}

Draft draw_draft(const SamplingParams& sp, std::span<const float> mtp_logits, std::span<const uint8_t> banned,
                 std::span<const int32_t> prompt, std::span<const int32_t> generated, uint32_t case_index,
                 uint32_t position) {
  Draft d;
  if (sp.temperature == 0) {
    d.token = sample(sp, mtp_logits, banned, prompt, generated, case_index, position);
    return d;
  }
  d.q = sampling_distribution(sp, mtp_logits, banned, prompt, generated);
  d.token = inverse_cdf(d.q, philox_uniform(sp.seed, case_index, position, kPhiloxStreamMtpDraft));
  DEGEN_ASSERT(d.token >= 0, "draft distribution without mass");
  return d;
}

int32_t judge(const SamplingParams& sp, std::span<const float> logits, const Draft* draft,
              std::span<const uint8_t> banned, std::span<const int32_t> prompt, std::span<const int32_t> generated,
              uint32_t case_index, uint32_t position, bool& accepted) {
  accepted = false;
  if (sp.temperature == 0 || !draft) {
    // greedy, or the bonus token: exactly the token plain decode chooses here
    const int32_t t = sample(sp, logits, banned, prompt, generated, case_index, position);
    accepted = draft && draft->token == t;
    return t;
  }
  const std::vector<double> p = sampling_distribution(sp, logits, banned, prompt, generated);
  const size_t d = static_cast<size_t>(draft->token);
  const double pd = p[d], qd = draft->q[d];  // qd > 0: d was drawn from q
  const double ua = philox_uniform(sp.seed, case_index, position, kPhiloxStreamMtpAccept);
  if (ua * qd < pd) {  // u < p(d) / q(d), without the division
    accepted = true;
    return draft->token;
  }
  std::vector<double> r(p.size());
  for (size_t i = 0; i < p.size(); ++i) r[i] = std::max(0.0, p[i] - draft->q[i]);
  const double ut = sampling_uniform(sp.seed, case_index, position);
  int32_t t = inverse_cdf(r, ut);
  if (t < 0) t = inverse_cdf(p, ut);  // p == q on every id: the residual has no mass
  return t;
}

namespace {

// The most likely id of `logits` that is neither banned nor `avoid` (a draft that must be rejected).
int32_t best_other(std::span<const float> logits, std::span<const uint8_t> banned, int32_t avoid) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (static_cast<int32_t>(i) == avoid || (!banned.empty() && banned[i])) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  DEGEN_ASSERT(best >= 0, "no id to draft");
  return best;
}

// Rows [r0, r0 + n) of x [R, H].
Tensor rows_of(Backend& be, const Tensor& x, int64_t r0, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = r0 + i;
  return be.gather_rows(x, idx);
}

}  // namespace

std::vector<VerifyStep> mtp_decode(Engine& eng, SeqState& st, std::span<const int32_t> prompt,
                                            const Tensor& prompt_hidden, std::vector<int32_t>& generated,
                                            const MtpDecodeArgs& a, const std::function<bool(int32_t, int64_t)>& emit,
                                            double* seconds) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ModelConfig& cfg = eng.config();
  Backend& be = eng.backend();
  const SamplingParams& sp = a.sampling;
  std::span<const uint8_t> banned;
  if (a.vocab_mask) banned = *a.vocab_mask;
  const int k = a.mtp.draft_tokens;
  const int64_t T = static_cast<int64_t>(prompt.size());
  DEGEN_ASSERT(k > 0 && !generated.empty() && st.pos == T && prompt_hidden.rows() == T, "mtp_decode after prefill");
  std::vector<VerifyStep> steps;

  // The MTP head over rows (h, next token); returns the last row's draft logits and keeps its
  // post-mtp.norm hidden (the input of a chained draft).
  TraceCapture hm_cap(a.trace, Step::mtp_norm, -1, true);
  std::vector<float> draft_logits;
  Tensor draft_hidden;
  auto run_mtp = [&](const Tensor& hidden, std::vector<int32_t> next) {
    const int64_t n = static_cast<int64_t>(next.size());
    Tensor lg = eng.mtp({MtpInput{&st, hidden, std::move(next)}}, a.vocab_mask, &hm_cap.trace);
    draft_logits = be.to_host_f32(rows_of(be, lg, n - 1, 1));
    draft_hidden = rows_of(be, hm_cap.got, n - 1, 1);
  };

  // MTP prefill: rows (ĥ_i, x_{i+1}) of the prompt, the first generated token closing the last one.
  {
    std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
    next.push_back(generated.back());
    run_mtp(prompt_hidden, std::move(next));
  }

  int64_t round = 0;
  for (;;) {
    const int64_t P = st.pos;  // the target has consumed P tokens; generated.back() sits at P
    const int64_t g = static_cast<int64_t>(generated.size());
    // Never draft past max_new_tokens or past the model's context (the verify feeds P..P+kk).
    int64_t kk = std::min<int64_t>(k, a.max_new_tokens - g - 1);
    if (cfg.max_position_embeddings > 0) kk = std::min<int64_t>(kk, cfg.max_position_embeddings - P - 1);
    kk = std::max<int64_t>(kk, 0);

    // 1. draft d_1..d_kk (chained through the MTP head)
    const int forced_m = a.forcing ? static_cast<int>(std::min<int64_t>(round % (k + 1), kk)) : -1;
    std::vector<Draft> drafts;
    std::vector<int32_t> seq(generated);  // generated + drafts so far (for penalties)
    for (int64_t j = 1; j <= kk; ++j) {
      if (j > 1) run_mtp(draft_hidden, {drafts.back().token});
      const uint32_t pos = static_cast<uint32_t>(T + g + j - 1);
      if (a.forcing) {
        const int32_t own = a.forcing->sequence[static_cast<size_t>(P + j)];
        Draft d;
        d.token = j <= forced_m ? own : best_other(draft_logits, banned, own);
        drafts.push_back(std::move(d));
      } else {
        drafts.push_back(draw_draft(sp, draft_logits, banned, prompt, seq, a.case_index, pos));
      }
      seq.push_back(drafts.back().token);
    }

    // 2. verify [y, d_1..d_kk]
    std::vector<int32_t> vt{generated.back()};
    for (const Draft& d : drafts) vt.push_back(d.token);
    VerifyPass vp = verify_tokens(eng, st, vt, a.vocab_mask, a.mtp.prenorm_hidden, a.trace);

    // 3. accept in order; the first rejection (or the end) gives one more token
    seq.assign(generated.begin(), generated.end());
    std::vector<int32_t> out;
    int m = 0;
    for (int64_t j = 0; j <= kk && a.forcing; ++j) {  // forced: the sequence's tokens, m accepted
      out.push_back(a.forcing->sequence[static_cast<size_t>(P + j + 1)]);
      if (j == forced_m) break;
      ++m;
    }
    for (int64_t j = 0; j <= kk && !a.forcing; ++j) {
      bool acc = false;
      const uint32_t pos = static_cast<uint32_t>(T + g + j);
      const int32_t t = judge(sp, vp.logits[static_cast<size_t>(j)], j < kk ? &drafts[static_cast<size_t>(j)] : nullptr,
                              banned, prompt, seq, a.case_index, pos, acc);
      out.push_back(t);
      seq.push_back(t);
      if (!acc) break;
      ++m;
    }
    steps.push_back({static_cast<int>(kk), m, g});

    // 4. roll back the target to P + m + 1 and the MTP cache to P
    std::optional<SeqState> before;
    if (a.after_round && a.keep_before_rollback) before = eng.snapshot(st);
    rollback_target(st, vp, m, !a.mtp.no_rollback);
    apply_stale_slot(eng, st, vp, m, a.mtp);  // (checkpoint 0 is still there: the rollback moved m > 0)
    rollback_mtp(st, P);
    if (a.forcing && a.forcing->on_round) a.forcing->on_round(st, vp, m, P);
    if (a.after_round) a.after_round(st, vp, m, P, before ? &*before : nullptr);
    ++round;

    // emit: the token out[j] comes from the logits after P + j + 1 tokens
    bool running = true;
    for (size_t j = 0; j < out.size() && running; ++j) running = emit(out[j], P + static_cast<int64_t>(j) + 1);
    if (!running) break;

    // 5. catch-up: MTP rows (h_{P+j}, x_{P+j+1}), j = 0..m
    std::vector<Tensor> hs(vp.hidden.begin(), vp.hidden.begin() + m + 1);
    run_mtp(be.concat_rows(hs), out);
  }
  if (seconds) *seconds += std::chrono::duration<double>(clock::now() - t0).count();
  return steps;
}

}  // namespace degen
