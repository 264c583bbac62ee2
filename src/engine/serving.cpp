// The serving mechanisms: chunked prefill, the prefix cache, padded decode steps (see serving.h).
#include "engine/serving.h"

#include <algorithm>

#include "engine/faults.h"
#include "engine/spec_decode.h"
#include "util/error.h"

namespace degen {

namespace {

// [L] 1 at the GDN layers where fault f of rc acts; empty when it is not set.
std::vector<uint8_t> fault_layers(const RunConfig& rc, const ModelConfig& cfg, Fault f) {
  const char* name = fault_name(f);
  std::vector<uint8_t> on(static_cast<size_t>(cfg.num_layers), 0);
  bool any = false;
  for (int l = 0; l < cfg.num_layers; ++l)
    if (cfg.layer_types[static_cast<size_t>(l)] == LayerKind::linear && rc.has_fault(name, l, &cfg)) on[l] = any = true;
  if (!any) on.clear();
  return on;
}

bool at(const std::vector<uint8_t>& layers, int l) {
  return !layers.empty() && layers[static_cast<size_t>(l)];
}

// The state's position and KV lengths set back to `len` (every rank); the MTP cache emptied.
void truncate(SeqState& s, int64_t len, bool drop_mtp) {
  for_each_rank_state(s, [&](SeqState& r) {
    r.pos = len;
    for (KvCache& c : r.kv) c.len = std::min(c.len, len);
    if (drop_mtp) {
      r.mtp_pos = 0;
      r.mtp_kv.len = 0;
    }
  });
}

// The chunk faults, before a call that continues a sequence (pos > 0).
void chunk_faults(Engine& eng, SeqState& s, const ServingOptions& so) {
  if (so.chunk_twice.empty() && so.chunk_zero.empty()) return;
  eng.edit_gdn(s, [&](Backend& be, int, int l, GdnState& g) {
    if (at(so.chunk_zero, l)) g.S = be.zeros(g.S.shape, g.S.dtype);
    if (at(so.chunk_twice, l)) {
      std::vector<double> v = be.to_host_f64(g.S);
      for (double& x : v) x *= 2;
      g.S = be.from_host(v, g.S.shape, g.S.dtype);
    }
  });
}

// pad-updates-state: the last chunk of a sequence (n real tokens of a chunk of N) padded to N; the
// pad tokens run and their GDN updates stay at the fault's layers (positions and KV lengths are the
// real ones, the other layers keep the state of the real tokens).
void pad_last_chunk(Engine& eng, SeqState& s, int64_t pads, const ServingOptions& so, Trace* tr) {
  if (pads <= 0 || so.pad_updates.empty()) return;
  const int64_t len = s.pos;
  SeqState real = eng.snapshot(s);
  ForwardOptions fo;
  fo.logits = LogitsRows::none;
  eng.forward({SeqInput{&s, std::vector<int32_t>(static_cast<size_t>(pads), kPadToken)}}, fo, tr);
  eng.edit_gdn2(s, real, [&](Backend&, int, int l, GdnState& g, GdnState& keep) {
    if (!at(so.pad_updates, l)) g = std::move(keep);
  });
  truncate(s, len, false);
}

Tensor rows_range(Backend& be, const Tensor& t, int64_t r0, int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = r0 + i;
  return be.gather_rows(t, rows);
}

}  // namespace

ServingOptions serving_options(const RunConfig& rc, const ModelConfig& cfg) {
  ServingOptions so;
  so.prefill_chunk = rc.prefill_chunk;
  so.prefix_block = rc.prefix_cache;
  so.batch_rows = rc.batch == BatchMode::padded ? rc.batch_rows : 0;
  so.chunk_twice = fault_layers(rc, cfg, Fault::chunk_state_twice);
  so.chunk_zero = fault_layers(rc, cfg, Fault::chunk_state_zero);
  so.pad_updates = fault_layers(rc, cfg, Fault::pad_updates_state);
  so.pad_alias = fault_layers(rc, cfg, Fault::pad_slot_alias);
  so.snapshot_drafts = fault_layers(rc, cfg, Fault::prefix_snapshot_drafts);
  so.stale_slot = fault_layers(rc, cfg, Fault::spec_stale_slot);
  return so;
}

std::pair<int64_t, const PrefixEntry*> PrefixCache::lookup(std::span<const int32_t> tokens) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  for (int64_t n = ((T - 1) / block_) * block_; n > 0; n -= block_) {
    auto it = entries_.find(std::vector<int32_t>(tokens.begin(), tokens.begin() + n));
    if (it != entries_.end()) return {n, &it->second};
  }
  return {0, nullptr};
}

bool PrefixCache::has(std::span<const int32_t> prefix) const {
  return entries_.count(std::vector<int32_t>(prefix.begin(), prefix.end())) > 0;
}

void PrefixCache::store(std::span<const int32_t> prefix, PrefixEntry e) {
  DEGEN_ASSERT(!prefix.empty() && static_cast<int64_t>(prefix.size()) % block_ == 0, "prefix cache: a key of ",
               prefix.size(), " tokens with blocks of ", block_);
  if (entries_.emplace(std::vector<int32_t>(prefix.begin(), prefix.end()), std::move(e)).second) ++stores;
}

PrefillOut serve_prefill(Engine& eng, const std::vector<SeqInput>& in, const ForwardOptions& fo, Trace* tr,
                         const ServingOptions& so, PrefixCache* cache, const HiddenSource* hidden) {
  Backend& be = eng.backend();
  const size_t n = in.size();
  PrefillOut out;
  out.cached.assign(n, 0);
  std::vector<int64_t> cursor(n, 0), chunk_start(n, 0);
  std::vector<std::vector<Tensor>> hparts(n);
  std::vector<Tensor> last(n);
  const int block = cache ? cache->block() : 0;
  for (size_t i = 0; i < n; ++i) {
    DEGEN_ASSERT(in[i].state && in[i].state->pos == 0 && !in[i].tokens.empty(), "serve_prefill: a fresh state and a prompt");
    if (!cache) continue;
    auto [len, e] = cache->lookup(in[i].tokens);
    if (!e || (hidden && e->hidden.empty())) continue;
    *in[i].state = eng.snapshot(e->state);
    truncate(*in[i].state, len, true);
    if (hidden) hparts[i].push_back(e->hidden);
    cursor[i] = out.cached[i] = len;
    ++cache->hits;
  }
  ForwardOptions cfo = fo;
  cfo.logits = LogitsRows::last;
  cfo.keep_hidden = fo.keep_hidden;
  for (;;) {
    std::vector<SeqInput> call;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      const int64_t T = static_cast<int64_t>(in[i].tokens.size());
      if (cursor[i] >= T) continue;
      int64_t end = T;
      if (so.prefill_chunk > 0) end = std::min(end, cursor[i] + so.prefill_chunk);
      if (block > 0) end = std::min(end, (cursor[i] / block + 1) * block);
      if (cursor[i] > 0) chunk_faults(eng, *in[i].state, so);
      chunk_start[i] = cursor[i];
      call.push_back({in[i].state, std::vector<int32_t>(in[i].tokens.begin() + cursor[i], in[i].tokens.begin() + end)});
      who.push_back(i);
      cursor[i] = end;
    }
    if (call.empty()) break;
    ForwardOutput o = eng.forward(call, cfo, tr);
    Tensor hrows = hidden ? (*hidden)(o) : Tensor{};
    for (size_t j = 0; j < call.size(); ++j) {
      const size_t i = who[j];
      const int64_t T = static_cast<int64_t>(in[i].tokens.size());
      if (hidden) hparts[i].push_back(rows_range(be, hrows, o.seqs[j].row0, o.seqs[j].rows));
      if (cursor[i] == T) last[i] = rows_range(be, o.logits, static_cast<int64_t>(j), 1);
      if (block > 0 && cursor[i] % block == 0 && !cache->has(std::span(in[i].tokens).first(static_cast<size_t>(cursor[i])))) {
        PrefixEntry e{eng.snapshot(*in[i].state), {}};
        if (hidden) e.hidden = be.concat_rows(hparts[i]);
        cache->store(std::span(in[i].tokens).first(static_cast<size_t>(cursor[i])), std::move(e));
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (so.prefill_chunk > 0) {
      const int64_t T = static_cast<int64_t>(in[i].tokens.size());
      pad_last_chunk(eng, *in[i].state, so.prefill_chunk - (T - chunk_start[i]), so, tr);
    }
  out.logits = n == 1 ? last[0] : be.concat_rows(last);
  if (hidden)
    for (size_t i = 0; i < n; ++i) out.hidden.push_back(hparts[i].size() == 1 ? hparts[i][0] : be.concat_rows(hparts[i]));
  return out;
}

ForwardOutput serve_decode_step(Engine& eng, const std::vector<SeqInput>& step, const ForwardOptions& fo, Trace* tr,
                                const ServingOptions& so, std::vector<SeqState>& pad_slots) {
  const int64_t live = static_cast<int64_t>(step.size());
  const int64_t pads = std::max<int64_t>(0, so.batch_rows - live);
  if (pads == 0) return eng.forward(step, fo, tr);
  while (static_cast<int64_t>(pad_slots.size()) < pads) pad_slots.push_back(eng.new_state());
  std::vector<SeqInput> rows(step);
  for (int64_t k = 0; k < pads; ++k) rows.push_back({&pad_slots[static_cast<size_t>(k)], {kPadToken}});
  SeqState& alias = *step.front().state;
  const bool aliased = !so.pad_alias.empty();
  // pad-slot-alias: the padding row reads the first live sequence's slot ...
  if (aliased)
    eng.edit_gdn2(pad_slots[0], alias, [&](Backend& be, int, int l, GdnState& p, GdnState& a) {
      if (at(so.pad_alias, l)) p = GdnState{be.clone(a.conv), be.clone(a.S)};
    });
  ForwardOutput o = eng.forward(rows, fo, tr);
  // ... and its update is the one that lands there.
  if (aliased)
    eng.edit_gdn2(alias, pad_slots[0], [&](Backend& be, int, int l, GdnState& a, GdnState& p) {
      if (at(so.pad_alias, l)) a = GdnState{be.clone(p.conv), be.clone(p.S)};
    });
  if (fo.logits == LogitsRows::last) o.logits = rows_range(eng.backend(), o.logits, 0, live);
  o.seqs.resize(static_cast<size_t>(live));
  return o;
}

void store_decode_snapshots(Engine& eng, PrefixCache& cache, const SeqState& state, std::span<const int32_t> tokens,
                            int64_t from, const ServingOptions& so, const VerifyPass* pass, const SeqState* after_pass,
                            const Tensor* hidden) {
  const int64_t B = cache.block(), pos = state.pos;
  DEGEN_ASSERT(static_cast<int64_t>(tokens.size()) >= pos, "prefix cache: ", tokens.size(), " tokens for a state at ", pos);
  for (int64_t b = (from / B + 1) * B; b <= pos; b += B) {
    const std::span<const int32_t> key = tokens.first(static_cast<size_t>(b));
    if (cache.has(key)) continue;
    PrefixEntry e{eng.snapshot(state), {}};
    if (pass && b < pos) {  // the pass's checkpoint after tokens[0..j]
      const size_t j = static_cast<size_t>(b - pass->pos0 - 1);
      DEGEN_ASSERT(j < pass->checkpoints.size(), "prefix cache: no checkpoint at ", b);
      const GdnCheckpoint& cp = pass->checkpoints[j];
      eng.edit_gdn(e.state, [&](Backend& be, int r, int l, GdnState& g) {
        const GdnCheckpoint& c = r == 0 ? cp : cp.peers[static_cast<size_t>(r - 1)];
        g = GdnState{be.clone(c.conv[static_cast<size_t>(l)]), be.clone(c.S[static_cast<size_t>(l)])};
      });
    }
    if (pass && after_pass && !so.snapshot_drafts.empty()) {  // prefix-snapshot-drafts
      SeqState drafted = eng.snapshot(*after_pass);
      eng.edit_gdn2(e.state, drafted, [&](Backend&, int, int l, GdnState& g, GdnState& d) {
        if (at(so.snapshot_drafts, l)) g = std::move(d);
      });
    }
    truncate(e.state, b, true);
    if (hidden && !hidden->empty() && hidden->rows() >= b) e.hidden = rows_range(eng.backend(), *hidden, 0, b);
    cache.store(key, std::move(e));
  }
}

}  // namespace degen
