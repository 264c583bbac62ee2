// Batch generation: prefill together, decode together, sample per sequence on the host.
#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <span>

#include "util/error.h"

namespace degen {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::stop_token: return "stop token";
    case StopReason::max_tokens: return "max tokens";
    case StopReason::max_context: return "max context";
  }
  return "?";
}

namespace {

// The k most probable ids of a logits row (masked ids left out; lower id first on ties) and their
// log-probabilities over the unmasked ids, in double.
StepTopK row_topk(const float* row, int64_t V, std::span<const uint8_t> banned, int k) {
  auto allowed = [&](int64_t j) { return banned.empty() || !banned[static_cast<size_t>(j)]; };
  double m = -INFINITY;
  for (int64_t j = 0; j < V; ++j)
    if (allowed(j)) m = std::max(m, static_cast<double>(row[j]));
  double sum = 0;
  for (int64_t j = 0; j < V; ++j)
    if (allowed(j)) sum += std::exp(static_cast<double>(row[j]) - m);
  const double lse = m + std::log(sum);
  std::vector<int32_t> ids;
  for (int64_t j = 0; j < V; ++j)
    if (allowed(j)) ids.push_back(static_cast<int32_t>(j));
  const size_t kk = std::min(ids.size(), static_cast<size_t>(k));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kk), ids.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  ids.resize(kk);
  StepTopK t;
  t.ids = ids;
  for (int32_t id : ids) t.logprobs.push_back(static_cast<double>(row[id]) - lse);
  return t;
}

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> r(a);
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

// The prompts' prefill: one forward call, or serve_prefill under the serving options; the last
// logits row of each prompt, and with mtp each prompt's MTP input rows (o.hidden, or the capture of
// the pre-norm rows when `captured` is given).
Tensor prefill(Engine& eng, const std::vector<SeqInput>& in, const ForwardOptions& fo, Trace* tr, const ServingOptions& so,
               PrefixCache* cache, bool mtp, const Tensor* captured, std::vector<Tensor>& hidden) {
  if (so.shapes_prefill()) {
    HiddenSource hsrc = [&](const ForwardOutput& o) { return captured ? *captured : o.hidden; };
    PrefillOut po = serve_prefill(eng, in, fo, tr, so, cache, mtp ? &hsrc : nullptr);
    hidden = std::move(po.hidden);
    return po.logits;
  }
  ForwardOutput out = eng.forward(in, fo, tr);
  for (size_t i = 0; mtp && i < in.size(); ++i) {
    std::vector<int64_t> rows(static_cast<size_t>(out.seqs[i].rows));
    for (size_t t = 0; t < rows.size(); ++t) rows[t] = out.seqs[i].row0 + static_cast<int64_t>(t);
    hidden.push_back(eng.backend().gather_rows(captured ? *captured : out.hidden, rows));
  }
  return out.logits;
}

// The prefix cache under MTP: after each round, the snapshots of the blocks it committed (the
// committed tokens: prompt, generated, the accepted drafts; hist: the MTP input rows so far).
void store_round_snapshots(Engine& eng, PrefixCache& cache, const ServingOptions& so, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& generated, std::vector<Tensor>& hist, MtpDecodeArgs& a) {
  a.keep_before_rollback = !so.snapshot_drafts.empty();
  a.after_round = [&](const SeqState& st, const VerifyPass& vp, int m, int64_t P, const SeqState* before) {
    std::vector<int32_t> committed(prompt);
    committed.insert(committed.end(), generated.begin(), generated.end());
    committed.insert(committed.end(), vp.tokens.begin() + 1, vp.tokens.begin() + m + 1);
    hist.insert(hist.end(), vp.hidden.begin(), vp.hidden.begin() + m + 1);
    const Tensor h = eng.backend().concat_rows(hist);
    hist.assign(1, h);
    store_decode_snapshots(eng, cache, st, committed, P, so, &vp, before, &h);
  };
}

// One generate() call's sequences: their states and results, and the ones still running.
struct Batch {
  Engine& eng;
  const std::vector<std::vector<int32_t>>& prompts;
  const GenerateOptions& opt;
  const ModelConfig& cfg;
  std::span<const uint8_t> banned;
  int64_t V;
  std::vector<GenerateResult> res;
  std::vector<SeqState> states;
  std::vector<size_t> active;  // the running sequences, in order

  Batch(Engine& e, const std::vector<std::vector<int32_t>>& p, const GenerateOptions& o)
      : eng(e), prompts(p), opt(o), cfg(e.config()), V(cfg.vocab_size), res(p.size()) {
    if (opt.vocab_mask) banned = *opt.vocab_mask;
  }

  // Appends a token to sequence i; false when the sequence stops. pos: tokens the target had
  // consumed when the token's logits were computed.
  bool push(size_t i, int32_t tok, int64_t pos) {
    res[i].tokens.push_back(tok);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), tok) != opt.stop_ids.end())
      res[i].reason = StopReason::stop_token;
    else if (static_cast<int>(res[i].tokens.size()) >= opt.max_new_tokens)
      res[i].reason = StopReason::max_tokens;
    else if (cfg.max_position_embeddings > 0 && pos >= cfg.max_position_embeddings)
      res[i].reason = StopReason::max_context;
    else
      return true;
    return false;
  }

  // Whether a logits row holds a value that is not finite (a masked id's -inf excepted).
  bool nonfinite(const float* row) const {
    for (int64_t j = 0; j < V; ++j) {
      const float v = row[j];
      if (!std::isfinite(v) && !(v < 0 && !banned.empty() && banned[static_cast<size_t>(j)])) return true;
    }
    return false;
  }

  // Chooses the next token of every active sequence from its logits row. The backend samples
  // where the logits are (the CPU: sample() on the row; CUDA: on the device).
  void choose(const Tensor& logits) {
    DEGEN_ASSERT(logits.cols() == V && logits.rows() == static_cast<int64_t>(active.size()), "generate: logits ",
                 shape_str(logits.shape), " for ", active.size(), " active sequences");
    std::vector<size_t> still;
    std::vector<float> host;
    if (opt.check_finite || opt.keep_topk > 0) host = eng.backend().to_host_f32(logits);
    for (size_t r = 0; r < active.size(); ++r) {
      const size_t i = active[r];
      const float* row = host.empty() ? nullptr : &host[static_cast<size_t>(static_cast<int64_t>(r) * V)];
      if (opt.check_finite && !res[i].nonfinite_logits && nonfinite(row)) res[i].nonfinite_logits = true;
      if (opt.keep_topk > 0) res[i].step_topk.push_back(row_topk(row, V, banned, opt.keep_topk));
      const uint32_t position = static_cast<uint32_t>(prompts[i].size() + res[i].tokens.size());
      int32_t tok = eng.backend().sample_row(opt.sampling, logits, static_cast<int64_t>(r), banned, prompts[i],
                                             res[i].tokens, opt.first_case + static_cast<uint32_t>(i), position);
      if (push(i, tok, states[i].pos)) still.push_back(i);
    }
    active = std::move(still);
  }
};

// MTP: speculative rounds, one sequence at a time (each verify step is a one-row call, as plain
// decode), from each prompt's hidden rows.
void decode_mtp(Batch& b, std::vector<Tensor>& prompt_hidden, Trace* trace) {
  const GenerateOptions& opt = b.opt;
  for (size_t i = 0; i < b.prompts.size(); ++i) {
    GenerateResult& r = b.res[i];
    const bool running = std::find(b.active.begin(), b.active.end(), i) != b.active.end();
    if (running) {
      MtpDecodeArgs a;
      std::vector<Tensor> hist{prompt_hidden[i]};
      if (opt.prefix_cache) store_round_snapshots(b.eng, *opt.prefix_cache, opt.serving, b.prompts[i], r.tokens, hist, a);
      a.sampling = opt.sampling;
      a.vocab_mask = opt.vocab_mask;
      a.case_index = opt.first_case + static_cast<uint32_t>(i);
      a.max_new_tokens = opt.max_new_tokens;
      a.mtp = opt.mtp;
      a.trace = trace;
      r.verify_steps = mtp_decode(b.eng, b.states[i], b.prompts[i], prompt_hidden[i], r.tokens, a,
                                  [&](int32_t tok, int64_t pos) { return b.push(i, tok, pos); }, &r.decode_seconds);
    }
    r.spec = spec_decode(r.verify_steps);
  }
}

// Decodes the running sequences together, one token each per step (batch=N: padded to N rows).
void decode_together(Batch& b, const ForwardOptions& fo, Trace* trace) {
  using clock = std::chrono::steady_clock;
  const ServingOptions& so = b.opt.serving;
  PrefixCache* cache = b.opt.prefix_cache;
  std::vector<SeqState> pad_slots;
  while (!b.active.empty()) {
    std::vector<SeqInput> step;
    for (size_t i : b.active) step.push_back({&b.states[i], {b.res[i].tokens.back()}});
    auto t1 = clock::now();
    ForwardOutput o = so.batch_rows > 0 ? serve_decode_step(b.eng, step, fo, trace, so, pad_slots) : b.eng.forward(step, fo, trace);
    const double dt = std::chrono::duration<double>(clock::now() - t1).count();
    for (size_t i : b.active) b.res[i].decode_seconds += dt;
    for (size_t i = 0; cache && i < b.active.size(); ++i) {  // the block the step may have completed
      const size_t s = b.active[i];
      store_decode_snapshots(b.eng, *cache, b.states[s], concat(b.prompts[s], b.res[s].tokens), b.states[s].pos - 1, so);
    }
    b.choose(o.logits);
  }
}

}  // namespace

std::vector<GenerateResult> generate(Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                     const GenerateOptions& opt, Trace* trace) {
  using clock = std::chrono::steady_clock;
  validate(opt.sampling);
  check_mtp_supported(eng, opt.mtp);
  const bool mtp = opt.mtp.draft_tokens > 0;
  const size_t n = prompts.size();
  Batch b(eng, prompts, opt);
  if (n == 0 || opt.max_new_tokens <= 0) return std::move(b.res);
  for (size_t i = 0; i < n; ++i) {
    if (prompts[i].empty()) input_error("case ", opt.first_case + i, ": empty prompt");
    b.states.push_back(eng.new_state());
  }
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = opt.vocab_mask;

  // Prefill all prompts in one batch.
  std::vector<SeqInput> in;
  for (size_t i = 0; i < n; ++i) {
    in.push_back({&b.states[i], prompts[i]});
    b.active.push_back(i);
  }
  // MTP needs the prompt's hidden rows: post-norm, or the last layer's output under mtp-prenorm-hidden.
  TraceCapture prenorm(trace, Step::l_out, b.cfg.num_layers - 1, false);
  const bool capture = mtp && opt.mtp.prenorm_hidden;
  fo.keep_hidden = mtp && !capture;
  auto t0 = clock::now();
  std::vector<Tensor> prompt_hidden;  // MTP: each prompt's hidden rows
  const Tensor logits = prefill(eng, in, fo, capture ? &prenorm.trace : trace, opt.serving, opt.prefix_cache, mtp,
                                capture ? &prenorm.got : nullptr, prompt_hidden);
  for (auto& r : b.res) r.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  b.choose(logits);
  fo.keep_hidden = false;
  if (mtp)
    decode_mtp(b, prompt_hidden, trace);
  else
    decode_together(b, fo, trace);
  return std::move(b.res);
}

}  // namespace degen
