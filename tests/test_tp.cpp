// Tensor parallelism on the CPU twin (backend=cpu,tp=N): the sharding of model/shard.h and the
// engine's rank threads and all-reduces (engine/tp.h) against tp=1 on the shipped tiny models.
//   - tp=2 (tp=3 on tiny-qwen35-tp3) equals tp=1 within fp32 reordering on the logits and on every
//     traced step of every layer (the rank-local steps gathered), prefill and decode;
//   - in fp64 the same within fp64 reordering (nothing but summation order differs);
//   - every rank holds exactly 1/N of every sharded tensor, and the slices are the right ones;
//   - configurations that do not split are rejected naming the dimension;
//   - the TP faults change the output only at tp > 1, and a failing rank does not hang the others.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/spec_decode.h"
#include "engine/tp.h"
#include "model/shard.h"
#include "tolerances.h"
#include "toggle_test_util.h"

using namespace degen;
using namespace degen::test;

namespace {

// Prefill of 70 tokens (two GDN chunks) and 3 decode steps at tp=N against tp=1: the logits and
// every traced tensor, by name. Returns the largest relative error seen.
double compare_to_tp1(const std::string& preset, const std::string& extra, int tp, double tol) {
  const auto& dir = synth_model(preset);
  ToggledModel one(dir, extra);
  ToggledModel many(dir, extra + (extra.empty() ? "" : ",") + "tp=" + std::to_string(tp));
  REQUIRE(many.eng->tp() == tp);
  const std::vector<int32_t> ids = test_ids(70, one.cfg.vocab_size, 7);
  RunTrace a = run_traced(one, ids, 3);
  RunTrace b = run_traced(many, ids, 3);
  CHECK(b.t.size() == a.t.size());  // the same steps, every layer
  double worst = rel_l2(b.logits, a.logits);
  CHECK(worst <= tol);
  std::string worst_name = "logits";
  for (const auto& [name, ref] : a.t) {
    CAPTURE(name);
    auto it = b.t.find(name);
    REQUIRE(it != b.t.end());
    REQUIRE(it->second.size() == ref.size());  // gathered to the tp=1 shape
    const double e = rel_l2(it->second, ref);
    CHECK(e <= tol);
    if (e > worst) worst_name = name;
    worst = std::max(worst, e);
  }
  // The states end at the same position on every rank.
  CHECK(b.state.peers.size() == static_cast<size_t>(tp - 1));
  for (const SeqState& p : b.state.peers) CHECK(p.pos == b.state.pos);
  MESSAGE(preset, " ", extra, " tp=", tp, ": largest rel-L2 over the logits and ", a.t.size(), " traced tensors: ",
          worst, " (", worst_name, ")");
  return worst;
}

}  // namespace

TEST_CASE("tp: backend=cpu,tp=2 equals tp=1 on logits and every layer (fp32 reordering)") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"}) {
    CAPTURE(preset);
    const double worst = compare_to_tp1(preset, "", 2, tol::kFp32Reorder);
    CHECK(worst > 0);  // a different summation order, not a copy of the tp=1 run
  }
}

TEST_CASE("tp: tp=3 on a model whose heads split 3 ways equals tp=1") {
  CHECK(compare_to_tp1("tiny-qwen35-tp3", "", 3, tol::kFp32Reorder) > 0);
}

TEST_CASE("tp: in fp64 tp=2 and tp=1 differ only by summation order") {
  compare_to_tp1("tiny-qwen3next", "precision=fp64", 2, tol::kFp64Reorder);
  compare_to_tp1("tiny-qwen35-r3", "precision=fp64", 2, tol::kFp64Reorder);
}

TEST_CASE("tp: precision=bf16 at tp=2 stays within the bf16 emulation's noise of tp=1") {
  // The all-reduce rounds the summed partials to bf16 once where tp=1 rounds the whole product
  // once: one more bf16 rounding per reduced tensor. Logits and layer outputs stay within the
  // distance the bf16 emulation itself has from the reference (kBf16Logits); per-head tensors of a
  // few elements are not compared (one bf16 step there is a large relative change).
  const auto& dir = synth_model("tiny-qwen35");
  ToggledModel one(dir, "precision=bf16");
  ToggledModel two(dir, "precision=bf16,tp=2");
  const std::vector<int32_t> ids = test_ids(70, one.cfg.vocab_size, 7);
  RunTrace a = run_traced(one, ids, 3), b = run_traced(two, ids, 3);
  const double lg = rel_l2(b.logits, a.logits);
  CHECK(lg <= tol::kBf16Logits);
  double worst = 0;
  for (const auto& [name, ref] : a.t)
    if (name.find(":l_out-") != std::string::npos) worst = std::max(worst, rel_l2(b.t.at(name), ref));
  CHECK(worst <= tol::kBf16Logits);
  MESSAGE("precision=bf16 tp=2 vs tp=1: logits ", lg, ", layer outputs up to ", worst);
}

TEST_CASE("tp: each rank holds 1/N of every sharded tensor, and the right slice") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-qwen35-tp3"}) {
    CAPTURE(preset);
    const int tp = std::string(preset) == "tiny-qwen35-tp3" ? 3 : 2;
    ToggledModel m(synth_model(preset), "tp=" + std::to_string(tp));
    std::map<std::string, int64_t> full, sum;
    int64_t replicated = 0, sharded_names = 0;
    for (int r = 0; r < tp; ++r) {
      const RankShard* s = m.eng->shard(r);
      REQUIRE(s);
      CHECK(s->rank() == r);
      for (const RankShard::Entry& e : s->entries()) {
        CAPTURE(e.name);
        if (e.sharded) {
          CHECK(e.rank_numel * tp == e.full_numel);
          sum[e.name] += e.rank_numel;
          full[e.name] = e.full_numel;
          sharded_names += r == 0;
        } else {
          CHECK(e.rank_numel == e.full_numel);
          replicated += r == 0;
        }
      }
    }
    for (const auto& [name, n] : full) CHECK(sum[name] == n);
    CHECK(sharded_names > 0);
    CHECK(replicated > 0);
    // The per-rank configs divide the heads.
    const ModelConfig& rc = m.eng->shard(1)->config();
    CHECK(rc.n_q * tp == m.cfg.n_q);
    CHECK(rc.n_kv * tp == m.cfg.n_kv);
    CHECK(rc.n_k * tp == m.cfg.n_k);
    CHECK(rc.n_v * tp == m.cfg.n_v);
  }
  // Content: rank r's o_proj is columns [r n_q D / tp, ...) of the full one, its q_proj rows the
  // matching heads' [query | gate] rows.
  ToggledModel m(synth_model("tiny-qwen35"), "tp=2");
  const int L = 3;  // a full-attention layer
  REQUIRE(m.cfg.layer_types[L] == LayerKind::full);
  const TensorView& fo = *m.w.layers[L].attn.o_proj;
  const TensorView& fq = *m.w.layers[L].attn.q_proj;
  const int64_t cols = fo.shape[1], half = cols / 2, H = fo.shape[0];
  for (int r = 0; r < 2; ++r) {
    const TensorView& so = *m.eng->shard(r)->weights().layers[L].attn.o_proj;
    const TensorView& sq = *m.eng->shard(r)->weights().layers[L].attn.q_proj;
    REQUIRE(so.shape == std::vector<int64_t>{H, half});
    bool same = true;
    for (int64_t i = 0; i < H && same; ++i)
      for (int64_t j = 0; j < half && same; ++j) same = so.at(static_cast<size_t>(i * half + j)) == fo.at(static_cast<size_t>(i * cols + r * half + j));
    CHECK(same);
    const size_t qbytes = sq.nbytes;
    CHECK(qbytes * 2 == fq.nbytes);
    CHECK(std::memcmp(sq.data, fq.data + r * qbytes, qbytes) == 0);
  }
}

TEST_CASE("tp: a configuration that does not split is rejected with the dimension and why") {
  const auto& dir = synth_model("tiny-qwen35");
  ModelConfig cfg = load_model_config(dir);
  CHECK_THROWS_WITH_AS(make_backend(parse_run_config("tp=3"), cfg),
                       doctest::Contains("num_key_value_heads (n_kv) = 2 is not a multiple of 3"), InputError);
  CHECK_THROWS_WITH_AS(make_backend(parse_run_config("tp=3"), cfg), doctest::Contains("linear_num_key_heads (n_k) = 2"),
                       InputError);
  CHECK_THROWS_WITH_AS(make_backend(parse_run_config("tp=3"), cfg), doctest::Contains("whole KV heads"), InputError);
  CHECK_THROWS_WITH_AS(make_backend(parse_run_config("tp=8"), cfg), doctest::Contains("num_attention_heads (n_q) = 4"),
                       InputError);
  CHECK_NOTHROW(check_tp_split(cfg, 2));
  ModelConfig moe = load_model_config(synth_model("tiny-qwen35-moe"));
  moe.moe_intermediate_size = 63;
  CHECK_THROWS_WITH_AS(check_tp_split(moe, 2), doctest::Contains("moe_intermediate_size (I_e) = 63"), InputError);
}

TEST_CASE("tp: the TP faults need tp > 1 and change the output only there") {
  const auto& dir = synth_model("tiny-qwen35-moe");
  ModelConfig cfg = load_model_config(dir);
  for (const char* f : {"tp-skip-last-allreduce", "tp-gdn-no-allreduce", "tp-moe-double-allreduce"}) {
    CAPTURE(f);
    CHECK_THROWS_WITH_AS(make_backend(parse_run_config(std::string("fault=") + f), cfg), doctest::Contains("needs tp > 1"),
                         UntestableError);
    ToggledModel clean(dir, "tp=2");
    ToggledModel bad(dir, std::string("tp=2,fault=") + f);
    const std::vector<int32_t> ids = test_ids(12, cfg.vocab_size, 3);
    RunTrace a = run_traced(clean, ids, 1), b = run_traced(bad, ids, 1);
    CHECK(rel_l2(b.logits, a.logits) > 1e-3);
  }
  // tp-skip-last-allreduce acts at the last decoder layer's MLP all-reduce and nowhere before it.
  {
    ToggledModel clean(dir, "tp=2"), bad(dir, "tp=2,fault=tp-skip-last-allreduce");
    const std::vector<int32_t> ids = test_ids(12, cfg.vocab_size, 5);
    RunTrace a = run_traced(clean, ids, 1), b = run_traced(bad, ids, 1);
    const int last = cfg.num_layers - 1;
    for (const auto& [name, v] : a.t) {
      CAPTURE(name);
      const int l = trace_layer(name);
      const bool before = name.rfind("p:", 0) == 0 && l >= 0 && (l < last || name.find(":ffn_out-") == std::string::npos &&
                                                                               name.find(":l_out-") == std::string::npos);
      if (before) CHECK(b.t.at(name) == v);
    }
    CHECK(rel_l2(b.t.at(cat("p:ffn_out-", last)), a.t.at(cat("p:ffn_out-", last))) > 1e-3);
  }
  // On a dense model the MoE fault has no layer to act on.
  CHECK_THROWS_AS(make_backend(parse_run_config("tp=2,fault=tp-moe-double-allreduce"), load_model_config(synth_model("tiny-qwen35"))),
                  InputError);
}

TEST_CASE("tp: greedy MTP decoding at tp=2 matches tp=1 (states and rollback on every rank)") {
  const auto& dir = synth_model("tiny-qwen35");
  ToggledModel one(dir, "");
  ToggledModel two(dir, "tp=2");
  const std::vector<int32_t> ids = test_ids(20, one.cfg.vocab_size, 11);
  // Verify three tokens, roll back to one accepted: both ranks' states must equal plain decoding.
  for (ToggledModel* m : {&one, &two}) {
    SeqState st = m->eng->new_state();
    m->eng->forward({SeqInput{&st, ids}});
    SeqState plain = m->eng->snapshot(st);
    const std::vector<int32_t> toks = {5, 17, 29};
    VerifyPass vp = verify_tokens(*m->eng, st, toks, nullptr, false);
    rollback_target(st, vp, 1);
    m->eng->forward({SeqInput{&plain, {5}}});
    m->eng->forward({SeqInput{&plain, {17}}});
    CHECK(st.pos == plain.pos);
    REQUIRE(st.peers.size() == plain.peers.size());
    for (size_t r = 0; r <= st.peers.size(); ++r) {
      const SeqState& a = r == 0 ? st : st.peers[r - 1];
      const SeqState& b = r == 0 ? plain : plain.peers[r - 1];
      CHECK(a.pos == b.pos);
      for (size_t l = 0; l < a.gdn.size(); ++l) {
        if (a.gdn[l].S.empty()) continue;
        CHECK(m->be->to_host_f64(a.gdn[l].S) == m->be->to_host_f64(b.gdn[l].S));  // bit-identical (same kernels)
        CHECK(m->be->to_host_f64(a.gdn[l].conv) == m->be->to_host_f64(b.gdn[l].conv));
      }
      for (size_t l = 0; l < a.kv.size(); ++l) CHECK(a.kv[l].len == b.kv[l].len);
    }
  }
}

TEST_CASE("tp: a failing rank ends the call with its own error, and the engine stays usable") {
  const auto& dir = synth_model("tiny-qwen35");
  ToggledModel m(dir, "tp=2");
  SeqState st = m.eng->new_state();
  Trace tr;
  tr.observer = [](const TraceEvent& ev, Tensor&, Backend&) {
    if (ev.step == Step::gdn_core && ev.layer == 1) input_error("observer stops at ", ev.name);
  };
  CHECK_THROWS_WITH_AS(m.eng->forward({SeqInput{&st, {1, 2, 3}}}, {}, &tr), doctest::Contains("observer stops at gdn_core-1"),
                       InputError);
  // Replacing a rank-local step is refused (it would change only rank 0's heads).
  Trace rep;
  rep.observer = [](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.step == Step::attn_q) t = be.clone(t);
  };
  SeqState st2 = m.eng->new_state();
  CHECK_THROWS_WITH_AS(m.eng->forward({SeqInput{&st2, {1, 2, 3}}}, {}, &rep), doctest::Contains("only the replicated steps"),
                       InputError);
  // Afterwards a fresh state runs normally and matches tp=1.
  ToggledModel one(dir, "");
  SeqState a = m.eng->new_state(), b = one.eng->new_state();
  const auto la = m.be->to_host_f64(m.eng->forward({SeqInput{&a, {4, 5, 6}}}).logits);
  const auto lb = one.be->to_host_f64(one.eng->forward({SeqInput{&b, {4, 5, 6}}}).logits);
  CHECK(rel_l2(la, lb) <= tol::kFp32Reorder);
  // A state made for another tp is refused.
  CHECK_THROWS_WITH_AS(m.eng->forward({SeqInput{&b, {7}}}), doctest::Contains("made for tp=1"), InputError);
}

TEST_CASE("tp: all-reduces per decoded token are two per decoder layer, of H values each") {
  const auto& dir = synth_model("tiny-qwen35");
  ToggledModel m(dir, "tp=2");
  SeqState st = m.eng->new_state();
  m.eng->forward({SeqInput{&st, {1, 2, 3, 4}}});
  TpComm* c = m.eng->comm();
  REQUIRE(c);
  c->stats().reset();
  m.eng->forward({SeqInput{&st, {5}}});
  CHECK(c->stats().all_reduces == 2 * m.cfg.num_layers);
  CHECK(c->stats().all_reduce_bytes == 2 * m.cfg.num_layers * m.cfg.hidden_size * 4);  // fp32 activations here
  const TpMemory mem = tp_memory(m.cfg, 2, true);
  CHECK(mem.allreduces_per_forward == 2 * m.cfg.num_layers);
  CHECK(mem.rank_weight_bytes < mem.replicated_bytes + mem.sharded_bytes);
}
