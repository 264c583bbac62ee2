// The serving mechanisms of the engine (engine/serving.h; issue 44) on the shipped tiny presets under
// the CPU reference: each off (or on but idle) gives the forward calls of plain generation bit for
// bit; each on gives plain generation's logits within fp32 reordering; the prefix cache's keys; and
// each fault of the mechanisms (a planted mistake) moves the state of the layer it is put on and of
// no layer before it, which is what compare's serving-state check localises.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/generate.h"
#include "engine/serving.h"
#include "engine/spec_decode.h"
#include "engine_test_util.h"
#include "model/synth.h"
#include "tolerances.h"

using namespace degen;
using namespace degen::test;

namespace {

const std::vector<std::string> kPresets = {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"};

struct Synth {
  TempDir dir{"serving"};
  std::unique_ptr<LoadedModel> m;
  explicit Synth(const std::string& preset) {
    const SynthPreset& sp = find_synth_preset(preset);
    SynthOptions o = sp.options;
    o.mtp = true;
    synth_checkpoint(sp.config, o, dir.path());
    m = std::make_unique<LoadedModel>(dir.path());
  }
  LoadedModel* operator->() { return m.get(); }
};

std::vector<int> gdn_layers(const ModelConfig& cfg) {
  std::vector<int> out;
  for (int l = 0; l < cfg.num_layers; ++l)
    if (cfg.layer_types[static_cast<size_t>(l)] == LayerKind::linear) out.push_back(l);
  return out;
}

// rel_l2 of layer l's S between two states (max over ranks is not needed: tp = 1 here).
double s_err(Backend& be, const SeqState& a, const SeqState& b, int l) {
  return rel_l2(be.to_host_f32(a.gdn[static_cast<size_t>(l)].S), be.to_host_f32(b.gdn[static_cast<size_t>(l)].S));
}

// The largest |Δ log-prob| over the top-K ids two generations share at each step, up to their first
// differing token (infinite where the most probable id differs: the distributions do not overlap).
double topk_diff(const GenerateResult& a, const GenerateResult& b) {
  double worst = 0;
  REQUIRE(!a.step_topk.empty());
  for (size_t s = 0; s < std::min(a.step_topk.size(), b.step_topk.size()); ++s) {
    if (a.step_topk[s].ids.at(0) != b.step_topk[s].ids.at(0)) return INFINITY;
    for (size_t j = 0; j < a.step_topk[s].ids.size(); ++j)
      for (size_t i = 0; i < b.step_topk[s].ids.size(); ++i)
        if (a.step_topk[s].ids[j] == b.step_topk[s].ids[i])
          worst = std::max(worst, std::fabs(a.step_topk[s].logprobs[j] - b.step_topk[s].logprobs[i]));
    if (a.tokens[s] != b.tokens[s]) break;
  }
  return worst;
}

std::vector<uint8_t> flags(const ModelConfig& cfg, int layer) {
  std::vector<uint8_t> f(static_cast<size_t>(cfg.num_layers), 0);
  f[static_cast<size_t>(layer)] = 1;
  return f;
}

}  // namespace

TEST_CASE("serving: the prefix cache keeps block keys, finds the longest stored prefix, keeps the first snapshot") {
  PrefixCache c(4);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK(c.lookup(t).first == 0);
  SeqState a, b;
  a.pos = 4;
  b.pos = 8;
  c.store(std::span(t).first(4), PrefixEntry{a, {}});
  c.store(std::span(t).first(8), PrefixEntry{b, {}});
  CHECK(c.lookup(t).first == 8);
  CHECK(c.lookup(std::span(t).first(8)).first == 4);  // a request computes its last token: never the whole of it
  CHECK(c.lookup(std::span(t).first(5)).first == 4);
  const std::vector<int32_t> other = {1, 2, 3, 4, 0, 0, 0, 0, 0};
  CHECK(c.lookup(other).first == 4);
  SeqState z;
  z.pos = 99;
  c.store(std::span(t).first(4), PrefixEntry{z, {}});
  CHECK(c.lookup(std::span(t).first(5)).second->state.pos == 4);
  CHECK(c.stores == 2);
  CHECK_THROWS(c.store(std::span(t).first(3), PrefixEntry{}));  // not a block boundary
}

TEST_CASE("serving: on but idle (one chunk, no hit, no padding row) gives plain generation's logits bit for bit") {
  Synth m("tiny-qwen35");
  const int64_t V = m->cfg.vocab_size;
  const std::vector<int32_t> prompt = random_ids(13, V, 5);
  GenerateOptions plain;
  plain.max_new_tokens = 6;
  plain.keep_topk = 8;
  const GenerateResult p = generate(*m->eng, {prompt}, plain).at(0);
  GenerateOptions idle = plain;
  idle.serving.prefill_chunk = 64;
  idle.serving.batch_rows = 1;
  idle.serving.prefix_block = 64;
  PrefixCache cache(64);
  idle.prefix_cache = &cache;
  const GenerateResult q = generate(*m->eng, {prompt}, idle).at(0);
  CHECK(q.tokens == p.tokens);
  REQUIRE(q.step_topk.size() == p.step_topk.size());
  for (size_t s = 0; s < p.step_topk.size(); ++s) {
    CHECK(q.step_topk[s].ids == p.step_topk[s].ids);
    CHECK(std::memcmp(q.step_topk[s].logprobs.data(), p.step_topk[s].logprobs.data(), p.step_topk[s].logprobs.size() * 8) == 0);
  }
  CHECK(cache.hits == 0);
}

TEST_CASE("serving: chunks, prefix-cache hits and padded steps give plain generation's logits within fp32 reordering") {
  for (const std::string& preset : kPresets) {
    SUBCASE(preset.c_str()) {
      Synth m(preset);
      const int64_t V = m->cfg.vocab_size;
      std::vector<int32_t> a = random_ids(19, V, 7), b(a.begin(), a.begin() + 12);
      for (int32_t t : random_ids(5, V, 8)) b.push_back(t);
      for (int k : {0, 2}) {
        CAPTURE(k);
        GenerateOptions plain;
        plain.max_new_tokens = 7;
        plain.keep_topk = 8;
        plain.mtp.draft_tokens = k;
        GenerateOptions on = plain;
        on.serving.prefill_chunk = 5;
        on.serving.prefix_block = 4;
        on.serving.batch_rows = k == 0 ? 3 : 0;
        PrefixCache cache(4);
        on.prefix_cache = &cache;
        for (const auto& prompt : {a, b}) {
          const GenerateResult p = generate(*m->eng, {prompt}, plain).at(0);
          const GenerateResult q = generate(*m->eng, {prompt}, on).at(0);
          CHECK(topk_diff(q, p) <= tol::kFp32LogprobReorder);
        }
        CHECK(cache.hits >= 1);  // b restored a's 12-token prefix
        // A planted mistake fails the same comparison: the prefix cache hands b a state that lost its S.
        GenerateOptions broken = on;
        broken.serving.chunk_zero = flags(m->cfg, gdn_layers(m->cfg).front());
        PrefixCache fresh(4);
        broken.prefix_cache = &fresh;
        generate(*m->eng, {a}, broken);
        CHECK(topk_diff(generate(*m->eng, {b}, broken).at(0), generate(*m->eng, {b}, plain).at(0)) > 1e-3);
      }
    }
  }
}

TEST_CASE("serving: a chunk fault moves the state of its layer and of no layer before it") {
  for (const std::string& preset : {std::string("tiny-qwen35"), std::string("tiny-qwen3next")}) {
    SUBCASE(preset.c_str()) {
      Synth m(preset);
      Engine& eng = *m->eng;
      Backend& be = *m->be;
      const std::vector<int32_t> prompt = random_ids(21, m->cfg.vocab_size, 9);
      SeqState whole = eng.new_state();
      eng.forward({SeqInput{&whole, prompt}});
      const std::vector<int> g = gdn_layers(m->cfg);
      const int L = g.back();
      for (int fault = 0; fault < 4; ++fault) {
        CAPTURE(fault);
        ServingOptions so;
        so.prefill_chunk = 8;
        if (fault == 1) so.chunk_twice = flags(m->cfg, L);
        if (fault == 2) so.chunk_zero = flags(m->cfg, L);
        if (fault == 3) so.pad_updates = flags(m->cfg, L);
        SeqState st = eng.new_state();
        serve_prefill(eng, {SeqInput{&st, prompt}}, {}, nullptr, so, nullptr);
        CHECK(st.pos == whole.pos);
        for (int l : g) {
          CAPTURE(l);
          const double e = s_err(be, st, whole, l);
          if (fault == 0 || l < L) CHECK(e <= tol::kFp32Reorder);
          else CHECK(e > 1e-2);
        }
      }
    }
  }
}

TEST_CASE("serving: padding rows leave the live states as unpadded steps do, and pad-slot-alias writes the pad's update") {
  Synth m("tiny-qwen35");
  Engine& eng = *m->eng;
  Backend& be = *m->be;
  const int64_t V = m->cfg.vocab_size;
  const std::vector<int> g = gdn_layers(m->cfg);
  for (bool alias : {false, true}) {
    CAPTURE(alias);
    SeqState x = eng.new_state(), y = eng.new_state();
    eng.forward({SeqInput{&x, random_ids(9, V, 11)}});
    SeqState plain = eng.snapshot(x);
    ServingOptions so;
    so.batch_rows = 4;
    if (alias) so.pad_alias = flags(m->cfg, g.back());
    std::vector<SeqState> pads;
    ForwardOptions fo;
    for (int32_t t : random_ids(3, V, 12)) {
      ForwardOutput o = serve_decode_step(eng, {SeqInput{&x, {t}}}, fo, nullptr, so, pads);
      CHECK(o.logits.rows() == 1);
      eng.forward({SeqInput{&plain, {t}}}, fo);
    }
    CHECK(pads.size() == 3);
    for (int l : g) {
      CAPTURE(l);
      if (alias && l == g.back()) CHECK(s_err(be, x, plain, l) > 1e-2);
      else CHECK(s_err(be, x, plain, l) <= tol::kFp32Reorder);  // the same row, in a 4-row product
    }
    (void)y;
  }
}

TEST_CASE("serving: decode snapshots under MTP are committed states, and prefix-snapshot-drafts stores one that saw drafts") {
  Synth m("tiny-qwen35");
  Engine& eng = *m->eng;
  Backend& be = *m->be;
  const int64_t V = m->cfg.vocab_size;
  const std::vector<int> g = gdn_layers(m->cfg);
  std::vector<int32_t> seq = random_ids(30, V, 13);
  const int64_t Tp = 6;
  const std::vector<int32_t> prompt(seq.begin(), seq.begin() + Tp);
  for (bool fault : {false, true}) {
    CAPTURE(fault);
    ServingOptions so;
    so.prefix_block = 4;
    if (fault) so.snapshot_drafts = flags(m->cfg, g.front());
    PrefixCache cache(4);
    SeqState st = eng.new_state();
    ForwardOptions fo;
    fo.keep_hidden = true;
    HiddenSource hs = [](const ForwardOutput& o) { return o.hidden; };
    PrefillOut po = serve_prefill(eng, {SeqInput{&st, prompt}}, fo, nullptr, so, &cache, &hs);
    MtpForcing forcing;
    forcing.sequence = seq;
    MtpDecodeArgs a;
    a.forcing = &forcing;
    a.max_new_tokens = static_cast<int>(seq.size() - Tp);
    a.mtp.draft_tokens = 3;
    a.keep_before_rollback = fault;
    a.after_round = [&](const SeqState& s, const VerifyPass& vp, int, int64_t P, const SeqState* before) {
      store_decode_snapshots(eng, cache, s, seq, P, so, &vp, before);
    };
    std::vector<int32_t> gen{seq[static_cast<size_t>(Tp)]};
    mtp_decode(eng, st, prompt, po.hidden.at(0), gen, a, [&](int32_t t, int64_t) {
      gen.push_back(t);
      return gen.size() < seq.size() - Tp;
    });
    // Every snapshot against plain processing of its tokens (the prefix in one call when inside the
    // prompt, then one token per call: the calls the verify passes make).
    int checked = 0, moved = 0;
    for (int64_t b = 4; b < static_cast<int64_t>(seq.size()); b += 4) {
      auto [len, e] = cache.lookup(std::span(seq).first(static_cast<size_t>(b + 1)));
      if (len != b) continue;
      SeqState p = eng.new_state();
      eng.forward({SeqInput{&p, std::vector<int32_t>(seq.begin(), seq.begin() + std::min<int64_t>(b, Tp))}});
      for (int64_t i = Tp; i < b; ++i) eng.forward({SeqInput{&p, {seq[static_cast<size_t>(i)]}}});
      ++checked;
      CHECK(e->state.pos == b);
      for (int l : g) {
        const double err = s_err(be, e->state, p, l);
        // (the prompt's blocks were prefilled in calls split at the block: fp32 reordering)
        if (!fault || l != g.front()) CHECK(err <= tol::kFp32Reorder);
        else moved += err > 1e-3;
      }
    }
    CHECK(checked >= 5);
    if (fault) CHECK(moved >= 1);
  }
}
