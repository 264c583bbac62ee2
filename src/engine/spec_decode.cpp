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

// The MTP head of one sequence: run() takes rows (h, next token) and keeps the last row's draft
// logits and its post-mtp.norm hidden (the input of a chained draft).
struct MtpHead {
  Engine& eng;
  SeqState& st;
  const std::vector<uint8_t>* vocab_mask;
  TraceCapture cap;
  std::vector<float> logits;
  Tensor hidden;

  MtpHead(Engine& e, SeqState& s, const MtpDecodeArgs& a)
      : eng(e), st(s), vocab_mask(a.vocab_mask), cap(a.trace, Step::mtp_norm, -1, true) {}
  void run(const Tensor& h, std::vector<int32_t> next) {
    Backend& be = eng.backend();
    const int64_t n = static_cast<int64_t>(next.size());
    Tensor lg = eng.mtp({MtpInput{&st, h, std::move(next)}}, vocab_mask, &cap.trace);
    logits = be.to_host_f32(rows_of(be, lg, n - 1, 1));
    hidden = rows_of(be, cap.got, n - 1, 1);
  }
};

// One round of mtp_decode: the target has consumed P tokens (generated.back() sits at P), g tokens
// were generated before it, kk drafts are verified, and a forced round accepts forced_m of them
// (-1 when not forced).
struct Round {
  int64_t P, g, kk;
  int forced_m;
};

// The round's drafts d_1..d_kk, chained through the MTP head (whose last run drafts d_1): drawn,
// or under forcing the sequence's own tokens up to forced_m and then another id.
std::vector<Draft> draft_round(MtpHead& head, const MtpDecodeArgs& a, std::span<const uint8_t> banned,
                               std::span<const int32_t> prompt, const std::vector<int32_t>& generated, const Round& r) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  std::vector<Draft> drafts;
  std::vector<int32_t> seq(generated);  // generated + drafts so far (for penalties)
  for (int64_t j = 1; j <= r.kk; ++j) {
    if (j > 1) head.run(head.hidden, {drafts.back().token});
    const uint32_t pos = static_cast<uint32_t>(T + r.g + j - 1);
    if (a.forcing) {
      const int32_t own = a.forcing->sequence[static_cast<size_t>(r.P + j)];
      Draft d;
      d.token = j <= r.forced_m ? own : best_other(head.logits, banned, own);
      drafts.push_back(std::move(d));
    } else {
      drafts.push_back(draw_draft(a.sampling, head.logits, banned, prompt, seq, a.case_index, pos));
    }
    seq.push_back(drafts.back().token);
  }
  return drafts;
}

// Accepts the verified drafts in order; the first rejection (or the end) gives one more token.
// Fills `out` with the round's tokens and returns m, the drafts accepted.
int accept_round(const MtpDecodeArgs& a, const VerifyPass& vp, const std::vector<Draft>& drafts,
                 std::span<const uint8_t> banned, std::span<const int32_t> prompt, const std::vector<int32_t>& generated,
                 const Round& r, std::vector<int32_t>& out) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  int m = 0;
  for (int64_t j = 0; j <= r.kk && a.forcing; ++j) {  // forced: the sequence's tokens, m accepted
    out.push_back(a.forcing->sequence[static_cast<size_t>(r.P + j + 1)]);
    if (j == r.forced_m) break;
    ++m;
  }
  std::vector<int32_t> seq(generated);
  for (int64_t j = 0; j <= r.kk && !a.forcing; ++j) {
    bool acc = false;
    const uint32_t pos = static_cast<uint32_t>(T + r.g + j);
    const int32_t t = judge(a.sampling, vp.logits[static_cast<size_t>(j)],
                            j < r.kk ? &drafts[static_cast<size_t>(j)] : nullptr, banned, prompt, seq, a.case_index, pos, acc);
    out.push_back(t);
    seq.push_back(t);
    if (!acc) break;
    ++m;
  }
  return m;
}

// Rolls the target back to P + m + 1 and the MTP cache to P, and tells the round's observers.
void end_round(Engine& eng, SeqState& st, VerifyPass& vp, int m, int64_t P, const MtpDecodeArgs& a) {
  std::optional<SeqState> before;
  if (a.after_round && a.keep_before_rollback) before = eng.snapshot(st);
  rollback_target(st, vp, m, !a.mtp.no_rollback);
  apply_stale_slot(eng, st, vp, m, a.mtp);  // (checkpoint 0 is still there: the rollback moved m > 0)
  rollback_mtp(st, P);
  if (a.forcing && a.forcing->on_round) a.forcing->on_round(st, vp, m, P);
  if (a.after_round) a.after_round(st, vp, m, P, before ? &*before : nullptr);
}

}  // namespace

std::vector<VerifyStep> mtp_decode(Engine& eng, SeqState& st, std::span<const int32_t> prompt,
                                            const Tensor& prompt_hidden, std::vector<int32_t>& generated,
                                            const MtpDecodeArgs& a, const std::function<bool(int32_t, int64_t)>& emit,
                                            double* seconds) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ModelConfig& cfg = eng.config();
  std::span<const uint8_t> banned;
  if (a.vocab_mask) banned = *a.vocab_mask;
  const int k = a.mtp.draft_tokens;
  const int64_t T = static_cast<int64_t>(prompt.size());
  DEGEN_ASSERT(k > 0 && !generated.empty() && st.pos == T && prompt_hidden.rows() == T, "mtp_decode after prefill");
  std::vector<VerifyStep> steps;
  MtpHead head(eng, st, a);

  // MTP prefill: rows (ĥ_i, x_{i+1}) of the prompt, the first generated token closing the last one.
  {
    std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
    next.push_back(generated.back());
    head.run(prompt_hidden, std::move(next));
  }

  for (int64_t round = 0;; ++round) {
    Round r;
    r.P = st.pos;
    r.g = static_cast<int64_t>(generated.size());
    // Never draft past max_new_tokens or past the model's context (the verify feeds P..P+kk).
    r.kk = std::min<int64_t>(k, a.max_new_tokens - r.g - 1);
    if (cfg.max_position_embeddings > 0) r.kk = std::min<int64_t>(r.kk, cfg.max_position_embeddings - r.P - 1);
    r.kk = std::max<int64_t>(r.kk, 0);
    r.forced_m = a.forcing ? static_cast<int>(std::min<int64_t>(round % (k + 1), r.kk)) : -1;

    // 1. draft d_1..d_kk; 2. verify [y, d_1..d_kk]; 3. accept in order
    const std::vector<Draft> drafts = draft_round(head, a, banned, prompt, generated, r);
    std::vector<int32_t> vt{generated.back()};
    for (const Draft& d : drafts) vt.push_back(d.token);
    VerifyPass vp = verify_tokens(eng, st, vt, a.vocab_mask, a.mtp.prenorm_hidden, a.trace);
    std::vector<int32_t> out;
    const int m = accept_round(a, vp, drafts, banned, prompt, generated, r, out);
    steps.push_back({static_cast<int>(r.kk), m, r.g});

    // 4. roll back the target to P + m + 1 and the MTP cache to P
    end_round(eng, st, vp, m, r.P, a);

    // emit: the token out[j] comes from the logits after P + j + 1 tokens
    bool running = true;
    for (size_t j = 0; j < out.size() && running; ++j) running = emit(out[j], r.P + static_cast<int64_t>(j) + 1);
    if (!running) break;

    // 5. catch-up: MTP rows (h_{P+j}, x_{P+j+1}), j = 0..m
    std::vector<Tensor> hs(vp.hidden.begin(), vp.hidden.begin() + m + 1);
    head.run(eng.backend().concat_rows(hs), out);
  }
  if (seconds) *seconds += std::chrono::duration<double>(clock::now() - t0).count();
  return steps;
}

}  // namespace degen
