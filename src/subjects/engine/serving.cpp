// Our engine under test, the serving-state check (judge/result.h ServingCheck): each serving mechanism the
// configuration turns on, through the case's golden sequence, against plain processing of the same
// tokens on the same engine.
#include <algorithm>
#include <set>
#include <span>

#include "subjects/engine/run.h"

namespace degen::engine_subject {

namespace {

// Plain processing of a sequence on the tested engine (the prompt in one call, then one token per
// call): the top-K of every logits row, and the state at the lengths asked for (a length inside the
// prompt: a prefill of that many tokens, as plain processing of a shorter prompt).
struct PlainRun {
  std::map<int64_t, TopK> rows;        // p -> top-K of the logits after ext[0..p]
  std::map<int64_t, SeqState> states;  // length -> state
};
PlainRun plain_run(EngineRun& run, const std::vector<int32_t>& ext, int64_t Tp, const std::set<int64_t>& at, int K) {
  Engine& eng = *run.eng;
  PlainRun pr;
  ForwardOptions po;
  po.logits = LogitsRows::last;
  po.vocab_mask = run.maskp;
  for (int64_t b : at)
    if (b > 0 && b < Tp) {
      SeqState s = eng.new_state();
      eng.forward({SeqInput{&s, std::vector<int32_t>(ext.begin(), ext.begin() + b)}}, po);
      pr.states.emplace(b, std::move(s));
    }
  SeqState st = eng.new_state();
  auto step = [&](std::vector<int32_t> ids) {
    ForwardOutput o = eng.forward({SeqInput{&st, std::move(ids)}}, po);
    const std::vector<float> row = eng.backend().to_host_f32(o.logits);
    pr.rows[st.pos - 1] = topk_of_row(row.data(), run.V, run.maskp, K);
    if (at.count(st.pos)) pr.states.emplace(st.pos, eng.snapshot(st));
  };
  step(std::vector<int32_t>(ext.begin(), ext.begin() + Tp));
  for (int64_t p = Tp; p < static_cast<int64_t>(ext.size()); ++p) step({ext[static_cast<size_t>(p)]});
  return pr;
}

// One mechanism's check under way: the state comparisons and the judged rows.
struct ServingProbe {
  EngineRun& run;
  const PlainRun& plain;
  const std::vector<int32_t>& ext;
  ServingCheck c;
  std::vector<metrics::LogitPosition> pos;
  bool state_decides = true;  // fp32 class (judge/result.h ServingCheck)
  ServingProbe(EngineRun& r, const PlainRun& pl, const std::vector<int32_t>& e, std::string mechanism, std::string what)
      : run(r), plain(pl), ext(e) {
    c.mechanism = std::move(mechanism);
    c.what = std::move(what);
    c.state_limit = r.opt.rules.serving_state[r.fc];
    c.state_decides = state_decides = r.fclass == FloorClass::fp32;
  }
  void state_at(const SeqState& s, int64_t len) {
    auto it = plain.states.find(len);
    if (it == plain.states.end()) return;
    const StateDiff d = gdn_state_diff(run.eng->backend(), run.cfg, s, it->second, c.state_limit);
    c.state_err = std::max(c.state_err, d.err);
    if (d.layer && !c.state_layer) {
      c.state_layer = d.layer;
      c.state_part = d.part;
      c.state_position = len;
    }
  }
  void row(const Tensor& logits, int64_t p) {  // the row after ext[0..p]
    auto it = plain.rows.find(p);
    if (it == plain.rows.end()) return;
    const std::vector<float> v = run.eng->backend().to_host_f32(logits);
    metrics::GoldenTopK gk{it->second.ids, it->second.logprobs, it->second.lse};
    std::span<const uint8_t> ex;
    if (run.maskp) ex = *run.maskp;
    const int32_t next = p + 1 < static_cast<int64_t>(ext.size()) ? ext[static_cast<size_t>(p + 1)] : -1;
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(v), gk, next, ex, 10));
  }
  // Decodes ext[from..] one token per call from `s` (through `decode`), judging every row.
  template <typename F>
  void decode_rest(SeqState& s, int64_t from, F decode) {
    for (int64_t p = from; p < static_cast<int64_t>(ext.size()); ++p) row(decode(s, ext[static_cast<size_t>(p)]), p);
    state_at(s, static_cast<int64_t>(ext.size()));
  }
  ServingCheck finish(const std::optional<double>& kfloor) {
    if (!pos.empty()) c.logits = logits_result(pos, kfloor, run.opt.rules.kld, run.opt.rules.fallback_kld);
    c.pass = (!state_decides || !c.state_layer) && (!c.logits || c.logits->pass);
    return std::move(c);
  }
};

// The snapshot mechanism's cold pass: ext through the prefix cache (prompt prefill, then forced MTP
// rounds or plain decode steps), storing every block boundary's snapshot.
void snapshot_cold_pass(EngineRun& run, const std::vector<int32_t>& ext, int64_t Tp, const ServingOptions& so,
                        PrefixCache& cache) {
  Engine& eng = *run.eng;
  const std::vector<int32_t> prompt(ext.begin(), ext.begin() + Tp);
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  const bool mtp = run.mtp.draft_tokens > 0 && eng.has_mtp();
  TraceCapture prenorm(nullptr, Step::l_out, run.L - 1, false);
  const bool capture = mtp && run.mtp.prenorm_hidden;
  fo.keep_hidden = mtp && !capture;
  HiddenSource hsrc = [&](const ForwardOutput& o) { return capture ? prenorm.got : o.hidden; };
  PrefillOut po = serve_prefill(eng, {SeqInput{&st, prompt}}, fo, capture ? &prenorm.trace : nullptr, so, &cache,
                                mtp ? &hsrc : nullptr);
  if (!mtp) {
    ForwardOptions d = fo;
    d.keep_hidden = false;
    for (int64_t p = Tp; p < static_cast<int64_t>(ext.size()); ++p) {
      eng.forward({SeqInput{&st, {ext[static_cast<size_t>(p)]}}}, d);
      store_decode_snapshots(eng, cache, st, ext, st.pos - 1, so);
    }
    return;
  }
  MtpForcing forcing;
  forcing.sequence = ext;
  MtpDecodeArgs a;
  a.forcing = &forcing;
  a.vocab_mask = run.maskp;
  const int64_t n_new = static_cast<int64_t>(ext.size()) - Tp;
  a.max_new_tokens = static_cast<int>(n_new);
  a.mtp = run.mtp;
  a.keep_before_rollback = !so.snapshot_drafts.empty();
  std::vector<Tensor> hist{po.hidden.at(0)};
  a.after_round = [&](const SeqState& s, const VerifyPass& vp, int m, int64_t P, const SeqState* before) {
    hist.insert(hist.end(), vp.hidden.begin(), vp.hidden.begin() + m + 1);
    const Tensor h = eng.backend().concat_rows(hist);
    hist.assign(1, h);
    store_decode_snapshots(eng, cache, s, ext, P, so, &vp, before, &h);
  };
  std::vector<int32_t> generated{ext[static_cast<size_t>(Tp)]};
  if (n_new >= 2)
    mtp_decode(eng, st, prompt, po.hidden.at(0), generated, a, [&](int32_t t, int64_t) {
      generated.push_back(t);
      return static_cast<int64_t>(generated.size()) < n_new;
    });
}

}  // namespace

// The serving mechanisms the configuration turns on, each against plain processing (ServingCheck).
void serving_checks(EngineRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr) {
  const ServingOptions& so = run.so;
  const bool chunk = so.prefill_chunk > 0, snap = so.prefix_block > 0, slot = so.batch_rows > 0;
  const int64_t Tp = cr.prompt_tokens, T = static_cast<int64_t>(seq.size());
  if (!(chunk || snap || slot) || Tp < 1) return;
  Engine& eng = *run.eng;
  // The tokens the checks run over: the prompt and as many decode steps as the mechanisms need (four
  // after the prompt; the snapshot, a block boundary past it, and every MTP rollback depth): the
  // rest of the continuation is the generation's and the other checks' to cover. A continuation too
  // short is extended with the prompt's tokens.
  int64_t need = Tp + 4;
  const int k = run.mtp.draft_tokens;
  if (snap && k > 0) need = std::max<int64_t>(need, Tp + static_cast<int64_t>(k + 1) * (k + 2) / 2 + k + 2);
  // A block boundary past the prompt is sought within the case's own tokens only: the block size is a
  // toggle (prefix_cache=N), and decoding up to a boundary one token per call is work the case does not
  // ask for (prefix_cache=4096 on a 24-token case decoded 4,096 steps; 65,536 would take hours).
  if (snap) need = std::max(need, std::min<int64_t>((Tp / so.prefix_block + 1) * so.prefix_block + 1, std::max(T, need)));
  if (run.cfg.max_position_embeddings > 0) need = std::min<int64_t>(need, run.cfg.max_position_embeddings);
  std::vector<int32_t> ext(seq.begin(), seq.begin() + std::min<int64_t>(T, need));
  for (int64_t i = 0; static_cast<int64_t>(ext.size()) < need; ++i) ext.push_back(seq[static_cast<size_t>(i % Tp)]);
  const int64_t E = static_cast<int64_t>(ext.size());
  // The chunked prefill's length: the prompt, or one token more when the prompt fills its last chunk
  // exactly (a partial last chunk is where the padding of a chunk lives: pad-updates-state).
  const int64_t Tc = chunk && Tp % so.prefill_chunk == 0 && E > Tp + 1 ? Tp + 1 : Tp;
  std::set<int64_t> at{Tp, Tc, E};
  // The snapshots compared: the last one inside the prompt (each inside it costs plain processing a
  // prefill of its own) and every one after it (where a verify pass can cross a boundary).
  auto compared = [&](int64_t b) { return b + so.prefix_block > Tp; };
  for (int64_t b = so.prefix_block; snap && b <= E; b += so.prefix_block)
    if (compared(b)) at.insert(b);
  const PlainRun plain = plain_run(run, ext, Tp, at, std::max(g.topk.K, 2));
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const std::optional<double> kfloor = floors ? floors->kld[static_cast<int>(ForcedMode::decode)] : std::nullopt;
  const std::vector<int32_t> prompt(ext.begin(), ext.begin() + Tp);
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  auto one = [&](SeqState& s, int32_t t) { return eng.forward({SeqInput{&s, {t}}}, fo).logits; };
  if (chunk) {
    ServingProbe p(run, plain, ext, "chunk",
                   cat(Tc == Tp ? "the prompt (" : "the prompt and its next token (", Tc, " tokens) prefilled in chunks of ",
                       so.prefill_chunk));
    ServingOptions only = so;
    only.prefix_block = only.batch_rows = 0;
    SeqState st = eng.new_state();
    PrefillOut po = serve_prefill(eng, {SeqInput{&st, std::vector<int32_t>(ext.begin(), ext.begin() + Tc)}}, fo, nullptr,
                                  only, nullptr);
    p.state_at(st, Tc);
    p.row(po.logits, Tc - 1);
    p.decode_rest(st, Tc, one);
    cr.serving.push_back(p.finish(kfloor));
  }
  if (slot) {
    ServingProbe p(run, plain, ext, "slot", cat("decode steps padded to ", so.batch_rows, " rows"));
    ServingOptions only = so;
    only.prefix_block = only.prefill_chunk = 0;
    SeqState st = eng.new_state();
    eng.forward({SeqInput{&st, prompt}}, fo);
    std::vector<SeqState> pads;
    p.decode_rest(st, Tp, [&](SeqState& s, int32_t t) {
      return serve_decode_step(eng, {SeqInput{&s, {t}}}, fo, nullptr, only, pads).logits;
    });
    cr.serving.push_back(p.finish(kfloor));
  }
  if (snap) {
    ServingOptions only = so;
    only.prefill_chunk = only.batch_rows = 0;
    PrefixCache cache(so.prefix_block);
    snapshot_cold_pass(run, ext, Tp, only, cache);
    ServingProbe p(run, plain, ext, "snapshot", "");
    int64_t stored = 0;
    for (int64_t b = so.prefix_block; b < E; b += so.prefix_block) {
      auto [len, e] = cache.lookup(std::span(ext).first(static_cast<size_t>(b + 1)));
      if (len != b || !compared(b)) continue;
      ++stored;
      p.state_at(e->state, b);
    }
    auto [len, e] = cache.lookup(ext);
    if (so.prefix_block > E)
      p.c.note = cat("no block boundary of ", so.prefix_block, " tokens within the case's ", E,
                     " tokens checked: the snapshot mechanism stores nothing here (a smaller prefix_cache=N, or a longer case)");
    p.c.what = cat("prefix cache (blocks of ", so.prefix_block, "): ", stored, " snapshots of a cold pass compared",
                   k > 0 && eng.has_mtp() ? cat(" through forced MTP rounds (mtp=", k, ")") : std::string(),
                   ", then a warm pass from the ", len, "-token one");
    if (e) {
      SeqState st = eng.snapshot(e->state);
      p.decode_rest(st, len, one);
    }
    cr.serving.push_back(p.finish(kfloor));
  }
}

}  // namespace degen::engine_subject
