// The forward pass (spec model.md §4.3-4.9) and the MTP head (§6), written once against Backend.
// Each function reads as the numbered stages of its spec section.
// The RunConfig's toggles and faults are resolved per layer by numerics() and handed to the
// backend by begin_layer(). Six faults are deviations of the layer's data flow and live here,
// each changing the arguments of one op: qgate-split (the q_proj split), norm-no-plus-one and
// norm-double-plus-one (the layer's zero-centred norms called as plain, or shifted twice),
// rope-all-dims (rope_partial over head_dim), moe-no-renorm (moe_route without renormalisation),
// tp-ba-midpoint-split (the GDN b/a projection with the rank's midpoint-split in_proj_ba, built by
// RankShard). The others are flags the ops read. mtp-concat-order is an engine step of the MTP head.
// Tensor parallelism's fan-out is engine_tp.cpp, the CUDA-graph policy engine_graphs.cpp.
#include "engine/engine_impl.h"

#include <tuple>
#include <cmath>

#include "engine/faults.h"
#include "util/error.h"

namespace degen {

const char* attn_algo_name(AttnAlgo a) {
  switch (a) {
    case AttnAlgo::naive: return "naive";
    case AttnAlgo::flash: return "flash";
    case AttnAlgo::splitkv: return "splitkv";
    case AttnAlgo::grouped: return "grouped";
  }
  return "?";
}

// note: defined here, beside attn_algo_name, not in the CPU backend: both are declared in
// engine/backend.h (degen_core), and golden.cpp uses it without linking degen_cpu.
const char* gdn_algo_name(GdnAlgo a) {
  switch (a) {
    case GdnAlgo::chunked: return "chunked";
    case GdnAlgo::recurrent: return "recurrent";
    case GdnAlgo::fla: return "fla";
  }
  return "?";
}

// Whether the ranks' shards must hold the midpoint-split in_proj_ba (fault tp-ba-midpoint-split at any scope).
static bool wants_ba_midpoint(const RunConfig& rc) {
  for (const FaultSpec& fs : rc.faults)
    if (fs.name == fault_name(Fault::tp_ba_midpoint_split)) return true;
  return false;
}

Engine::Engine(const ModelConfig& cfg, const ModelWeights& w, Backend& backend, EngineOptions opt)
    : shard_(backend.tp_group()
                 ? std::make_shared<RankShard>(cfg, w, backend.tp_size(), 0, wants_ba_midpoint(opt.run))
                 : nullptr),
      full_cfg_(cfg),
      cfg_(shard_ ? shard_->config() : cfg),
      w_(shard_ ? shard_->weights() : w),
      be_(backend),
      opt_(std::move(opt)) {
  DEGEN_ASSERT(static_cast<int>(w.layers.size()) == cfg.num_layers, "weights bound for another config");
  if (TpGroup* g = backend.tp_group()) {
    if (opt_.run.tp != g->size())
      input_error("the configuration says tp=", opt_.run.tp, " but the backend runs ", g->size(), " ranks");
    group_ = g;
    comm_ = g->comm.get();
  } else if (opt_.run.tp > 1) {
    input_error("tp=", opt_.run.tp, " needs a backend made for it (make_backend attaches the ranks)");
  }
  init();
  for (int r = 1; group_ && r < group_->size(); ++r)
    peers_.push_back(std::unique_ptr<Engine>(new Engine(cfg, w, *group_->ranks[static_cast<size_t>(r)], opt_,
                                                        std::make_shared<RankShard>(cfg, w, group_->size(), r,
                                                                                    wants_ba_midpoint(opt_.run)),
                                                        r, comm_)));
}

Engine::~Engine() = default;

void Engine::init() {
  // The configuration was checked once for the run (check_run_config, before its backend was made).
  for (const FaultSpec& fs : opt_.run.faults) {
    const FaultInfo* info = find_fault(fs.name);
    DEGEN_ASSERT(info, "Engine: fault '" + fs.name + "' is not in the catalogue (check_run_config refuses it)");
    if (info->applied == FaultApplied::op_flag) faults_.emplace_back(info->id, fs);
    if (info->id == Fault::tp_skip_last_allreduce) skip_last_allreduce_ = true;
  }
  if (cfg_.arch == Arch::qwen3_next) {  // this rank's key groups (the whole model at tp = 1)
    qkvz_rows_ = gdn_qkvz_rows(cfg_);
    ba_rows_ = gdn_ba_rows(cfg_);
  }
}

LayerNumerics Engine::numerics(int l, bool mtp) const {
  const RunConfig& rc = opt_.run;
  LayerNumerics n;
  n.layer = l;
  n.mtp = mtp;
  const bool in_layer = !mtp && l >= 0 && l < cfg_.num_layers;
  auto value = [&](const auto& s) { return in_layer ? s.at(l, &cfg_) : s.base; };
  auto scoped_here = [&](const auto& s) {  // a scoped override covers this layer
    if (in_layer)
      for (const auto& e : s.overrides)
        if (e.scope.contains(l, &cfg_)) return true;
    return false;
  };
  n.attn = value(rc.attn);
  // Storage dtypes: explicit toggles always; unset ones are the backend's own (on the GPU path,
  // the defaults RunConfig resolves).
  const DType act = be_.act_dtype();
  n.ssm_dtype = (in_layer && (be_.gpu_path() || rc.ssm_dtype_set || scoped_here(rc.ssm_dtype))) ? rc.ssm_dtype_at(l, cfg_)
                                                                                   : be_.state_dtype();
  n.conv_dtype = (rc.conv_dtype_set || scoped_here(rc.conv_dtype)) ? value(rc.conv_dtype) : act;
  n.kv_dtype = (rc.kv_dtype.base != DType::bf16 || scoped_here(rc.kv_dtype)) ? value(rc.kv_dtype) : act;
  for (const auto& [f, spec] : faults_) {
    const FaultSite site = find_fault(spec.name)->site;
    const bool selected = spec.scope.all || (in_layer && spec.scope.contains(l, &cfg_));
    if (selected && fault_site_hosts(site, cfg_, l, mtp)) n.faults.set(static_cast<size_t>(f));
  }
  return n;
}

SeqState Engine::new_state_rank() {
  SeqState s;
  s.kv.resize(static_cast<size_t>(cfg_.num_layers));
  s.gdn.resize(static_cast<size_t>(cfg_.num_layers));
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_types[l] != LayerKind::linear) continue;
    const LayerNumerics n = numerics(l, false);
    s.gdn[l].conv = be_.zeros({cfg_.conv_kernel - 1, cfg_.d_conv()}, n.conv_dtype);
    s.gdn[l].S = be_.zeros({cfg_.n_v, cfg_.d_k, cfg_.d_v}, n.ssm_dtype);
  }
  return s;
}

SeqState Engine::snapshot_rank(const SeqState& s) {
  SeqState c;
  c.pos = s.pos;
  c.mtp_pos = s.mtp_pos;
  auto copy_kv = [&](const KvCache& k) {
    KvCache o;
    o.len = k.len;
    if (!k.k.empty()) {
      o.k = be_.clone(k.k);
      o.v = be_.clone(k.v);
    }
    return o;
  };
  for (const KvCache& k : s.kv) c.kv.push_back(copy_kv(k));
  for (const GdnState& g : s.gdn) {
    GdnState o;
    if (!g.conv.empty()) o.conv = be_.clone(g.conv);
    if (!g.S.empty()) o.S = be_.clone(g.S);
    c.gdn.push_back(std::move(o));
  }
  c.mtp_kv = copy_kv(s.mtp_kv);
  return c;
}

GdnCheckpoint Engine::checkpoint_rank(const SeqState& st) {
  GdnCheckpoint cp;
  cp.conv.resize(st.gdn.size());
  cp.S.resize(st.gdn.size());
  for (size_t l = 0; l < st.gdn.size(); ++l) {
    if (!st.gdn[l].conv.empty()) cp.conv[l] = be_.clone(st.gdn[l].conv);
    if (!st.gdn[l].S.empty()) cp.S[l] = be_.clone(st.gdn[l].S);
  }
  return cp;
}

// The decoder norms' weight convention at a layer: zero-centred, or plain under fault norm-no-plus-one,
// or 2 + w under fault norm-double-plus-one.
static NormKind decoder_norm_kind(const LayerNumerics& n) {
  if (n.has(Fault::norm_no_plus_one)) return NormKind::plain;
  return n.has(Fault::norm_double_plus_one) ? NormKind::shifted_twice : NormKind::zero_centred;
}

// The final norm's: fault norm-double-plus-one unscoped shifts it twice too, as mlx-lm PR #1623's
// sanitize shifted every zero-centred norm of the checkpoint (the layers' and model.norm); scoped to
// layers, only theirs. (The MTP head's own norms: not touched; its decoder layer's: by numerics.)
static NormKind final_norm_kind(const RunConfig& rc, const ModelConfig& cfg) {
  return rc.has_fault(fault_name(Fault::norm_double_plus_one), -1, &cfg) ? NormKind::shifted_twice
                                                                          : NormKind::zero_centred;
}

// Whether a trace observes the activations inside the layers. The engine has one path: an observed
// run computes with the same ops as a run that is not observed. The steps at an op's boundary are
// offered as they are (the observer may replace them); the steps inside a fused op are written by
// the op when asked (Backend::TapSink) and offered read-only after it (offer_taps).
static bool observes_layers(const Trace* tr) { return tr && tr->on() && !tr->logits_only; }

// The backend's tap sink for one fused op of an observed layer (none when the layer is not observed).
class TapScope {
 public:
  TapScope(Backend& be, const Trace* tr) : be_(be) {
    if (observes_layers(tr)) be_.set_tap_sink(&sink);
  }
  ~TapScope() { be_.set_tap_sink(nullptr); }
  TapScope(const TapScope&) = delete;
  TapScope& operator=(const TapScope&) = delete;
  Backend::TapSink sink;

 private:
  Backend& be_;
};

bool Engine::tap_replaced(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp) {
  const uint8_t* before = t.storage.get();
  tap(tr, s, layer, t, b, mtp);
  return t.storage.get() != before;
}

void Engine::offer_taps(Trace* tr, Backend::TapSink& sink, std::initializer_list<std::pair<Backend::TapRole, Step>> roles,
                        int l, const Batch& b, bool mtp, const char* op) {
  be_.set_tap_sink(nullptr);
  for (auto& [role, t] : sink.got)
    for (const auto& [r, step] : roles) {
      if (r != role) continue;
      if (tap_replaced(tr, step, l, t, b, mtp))
        input_error("trace observer replaced ", mtp ? "mtp." : "", trace_name(step, l), ", a step inside the fused op ", op,
                    ": it can be read there, not replaced (replace the op's input or output)");
    }
  sink.got.clear();
}

void Engine::tap(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp) {
  if (!tr || !tr->on()) return;
  if (tr->logits_only && s != Step::logits && s != Step::mtp_logits) return;
  if (comm_) return tap_tp(tr, s, layer, t, b, mtp);
  observe(tr, s, layer, t, b, mtp);
}

void Engine::observe(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp) {
  const std::string name = (mtp ? "mtp." : "") + trace_name(s, layer);
  const std::vector<int64_t> shape = t.shape;
  const DType dtype = t.dtype;
  TraceEvent ev{s, layer, name, b.seqs, mtp};
  tr->observer(ev, t, be_);
  if (t.shape != shape || t.dtype != dtype)
    input_error("trace observer replaced ", name, " ", shape_str(shape), " ", dtype_name(dtype), " with ",
                shape_str(t.shape), " ", dtype_name(t.dtype), ": shape and dtype must stay");
}

Tensor& Engine::normed(Normed& in) {
  if (in.x.empty()) {
    in.x = be_.rmsnorm(*in.h, *in.pre.w, in.pre.eps, in.pre.kind);
    if (in.tr) tap(in.tr, in.step, in.layer, in.x, *in.b, in.mtp);  // the op's output: a boundary
  }
  return in.x;
}

std::vector<Tensor> Engine::project(Normed& in, std::span<const TensorView* const> ws) {
  if (!in.x.empty()) return be_.matmul_many(in.x, ws);
  TapScope ts(be_, in.tr);
  std::vector<Tensor> p = be_.norm_matmul_many(*in.h, in.pre, ws);
  if (in.tr) offer_taps(in.tr, ts.sink, {{Backend::TapRole::normed_input, in.step}}, in.layer, *in.b, in.mtp, "norm_matmul_many");
  return p;
}

Tensor Engine::out_proj(const Tensor& y, const TensorView& w, const Tensor* residual) {
  return residual ? be_.matmul_add(y, w, *residual) : be_.matmul(y, w);
}

// ---- §4.4 gated full attention ----
Tensor Engine::attention_mixer(int l, const AttnWeights& aw, Normed& in_x, Batch& b, Trace* tr, bool mtp,
                               const LayerNumerics& n, const Tensor* residual) {
  const int64_t N = b.N, nq = cfg_.n_q, nkv = cfg_.n_kv, D = cfg_.head_dim;
  const NormKind zc = decoder_norm_kind(n);
  const int rotary = n.has(Fault::rope_all_dims) ? static_cast<int>(D) : cfg_.rotary_dim;
  // 1. q_proj -> per head [query (D) | gate (D)], interleaved per head (with k_proj and v_proj, one
  // call: a backend may read x once for the three)
  const TensorView* const qkv_w[3] = {aw.q_proj, aw.k_proj, aw.v_proj};
  std::vector<Tensor> qkv_p = project(in_x, qkv_w);
  Tensor qg = std::move(qkv_p[0]);
  Tensor q, gate, k;
  Tensor v = std::move(qkv_p[2]).reshape({N, nkv, D});  // 2. k, v
  std::vector<KvCache*> caches;
  for (SeqState* s : b.states) caches.push_back(mtp ? &s->mtp_kv : &s->kv[l]);
  if (n.has(Fault::qgate_split)) {  // fault: read as [all queries | all gates]
    q = be_.slice_cols(qg, 0, nq * D).reshape({N * nq, D});
    gate = be_.slice_cols(qg, nq * D, nq * D);
    k = std::move(qkv_p[1]).reshape({N * nkv, D});
    // 3. QK-norm (zero-centred, per head), 4. partial RoPE
    q = be_.rmsnorm(q, *aw.q_norm, cfg_.rms_norm_eps, zc).reshape({N, nq, D});
    k = be_.rmsnorm(k, *aw.k_norm, cfg_.rms_norm_eps, zc).reshape({N, nkv, D});
    be_.rope_partial(q, b.pos, rotary, cfg_.rope_theta);
    be_.rope_partial(k, b.pos, rotary, cfg_.rope_theta);
  } else {  // the split and 3-6 in one op, 7-8 in another (the steps inside them: tapped)
    tap(tr, Step::attn_v, l, v, b, mtp);
    TapScope ts(be_, tr);
    Backend::AttnCore c = be_.attn_inputs_attention(qg, qkv_p[1], v, *aw.q_norm, *aw.k_norm, cfg_.rms_norm_eps, zc,
                                                    b.pos, rotary, cfg_.rope_theta, nq, nkv, D, b.spans, caches);
    offer_taps(tr, ts.sink, {{Backend::TapRole::attn_q, Step::attn_q}, {Backend::TapRole::attn_k, Step::attn_k}}, l, b,
               mtp, "attn_inputs_attention");
    tap(tr, Step::attn_gate, l, c.gate, b, mtp);
    tap(tr, Step::attn_core, l, c.out, b, mtp);
    return gated_o_proj(l, aw, c.out, c.gate, b, tr, mtp, residual);
  }
  tap(tr, Step::attn_q, l, q, b, mtp);
  tap(tr, Step::attn_gate, l, gate, b, mtp);
  tap(tr, Step::attn_k, l, k, b, mtp);
  tap(tr, Step::attn_v, l, v, b, mtp);
  // 5-6. KV cache append + causal GQA attention
  Tensor a = be_.attention(q, k, v, b.spans, caches);
  tap(tr, Step::attn_core, l, a, b, mtp);
  return gated_o_proj(l, aw, a, gate, b, tr, mtp, residual);
}

// 7. sigmoid output gate, 8. o_proj, with `residual` the residual add: one op
// (Backend::sigmoid_gate_matmul), whose steps inside are tapped when the layer is observed.
Tensor Engine::gated_o_proj(int l, const AttnWeights& aw, const Tensor& a, const Tensor& gate, Batch& b, Trace* tr,
                            bool mtp, const Tensor* residual) {
  TapScope ts(be_, tr);
  Tensor out = be_.sigmoid_gate_matmul(a, gate, *aw.o_proj, residual);
  offer_taps(tr, ts.sink, {{Backend::TapRole::gated, Step::attn_gated}, {Backend::TapRole::product, Step::mixer_out}}, l,
             b, mtp, "sigmoid_gate_matmul");
  return out;
}

// ---- §4.7 Gated DeltaNet ----
Tensor Engine::gdn_mixer(int l, const GdnWeights& gw, Normed& in, Batch& b, Trace* tr, const LayerNumerics& n,
                         const Tensor* residual) {
  const int64_t N = b.N, dval = cfg_.d_val(), dconv = cfg_.d_conv();
  const int64_t nk = cfg_.n_k, nv = cfg_.n_v, dk = cfg_.d_k, dv = cfg_.d_v;
  // 1. projections, in the split layout [q | k | v], z, b, a (§4.7.1)
  Tensor qkv, z, bb, aa;
  if (gw.fused) {  // Qwen3-Next: de-interleave the per-key-group layout by a column permutation
    const Tensor& x = normed(in);
    Tensor qkvz = be_.gather_cols(be_.matmul(x, *gw.in_proj_qkvz), qkvz_rows_);
    qkv = be_.slice_cols(qkvz, 0, dconv);
    z = be_.slice_cols(qkvz, dconv, dval);
    // (fault tp-ba-midpoint-split: the rank's in_proj_ba as the midpoint split gives it, read the same way)
    const TensorView* ba_w = n.has(Fault::tp_ba_midpoint_split) && shard_ ? shard_->ba_midpoint(l) : gw.in_proj_ba;
    DEGEN_ASSERT(ba_w, "fault tp-ba-midpoint-split: the shard of layer ", l, " has no midpoint-split in_proj_ba");
    Tensor ba = be_.gather_cols(be_.matmul(x, *ba_w), ba_rows_);
    bb = be_.slice_cols(ba, 0, nv);
    aa = be_.slice_cols(ba, nv, nv);
  } else {
    const TensorView* const w[4] = {gw.in_proj_qkv, gw.in_proj_z, gw.in_proj_b, gw.in_proj_a};
    std::vector<Tensor> p = project(in, w);
    qkv = std::move(p[0]);
    z = std::move(p[1]);
    bb = std::move(p[2]);
    aa = std::move(p[3]);
  }
  tap(tr, Step::gdn_qkv, l, qkv, b);
  tap(tr, Step::gdn_z, l, z, b);
  tap(tr, Step::gdn_b, l, bb, b);
  tap(tr, Step::gdn_a, l, aa, b);
  // 2. depthwise causal conv + SiLU over the pre-conv rows, carrying the window (§4.7.2)
  std::vector<Tensor*> windows, states;
  for (SeqState* s : b.states) {
    windows.push_back(&s->gdn[l].conv);
    states.push_back(&s->gdn[l].S);
  }
  // 3. split, L2 norm (q also scaled by d_k^-1/2; head expansion j -> j / r happens in gdn(),
  // §4.7.3), 4. gates (§4.7.4): 2-4 in one op (Backend::gdn_inputs), which writes its conv output
  // when the layer is observed
  const double q_scale = 1.0 / std::sqrt(double(dk));
  TapScope ts(be_, tr);
  Backend::GdnInputs gi = be_.gdn_inputs(qkv, *gw.conv1d, b.spans, windows, aa, bb, *gw.A_log, *gw.dt_bias,
                                         {nk, dk, nv, dv}, 1e-6, q_scale);
  offer_taps(tr, ts.sink, {{Backend::TapRole::gdn_conv, Step::gdn_conv}}, l, b, false, "gdn_inputs");
  tap(tr, Step::gdn_q, l, gi.q, b);
  tap(tr, Step::gdn_k, l, gi.k, b);
  tap(tr, Step::gdn_g, l, gi.g, b);
  tap(tr, Step::gdn_beta, l, gi.beta, b);
  // 5. the gated delta rule (§4.7.5 / §4.7.6)
  const GdnAlgo algo = b.one_token ? GdnAlgo::recurrent : Scoped<GdnAlgo>{opt_.gdn, opt_.run.gdn.overrides}.at(l, &cfg_);
  Tensor o = be_.gdn(gi.q, gi.k, gi.v, gi.g, gi.beta, b.spans, states, algo);
  tap(tr, Step::gdn_core, l, o, b);
  // 6. gated RMSNorm per value head (plain weight), out_proj (§4.7.7), in one op
  // (Backend::gated_norm_matmul), whose steps inside are tapped when the layer is observed
  TapScope tn(be_, tr);
  Tensor out = be_.gated_norm_matmul(o.reshape({N, dval}), z, *gw.norm, cfg_.rms_norm_eps, *gw.out_proj, residual);
  offer_taps(tr, tn.sink, {{Backend::TapRole::gated, Step::gdn_norm}, {Backend::TapRole::product, Step::mixer_out}}, l,
             b, false, "gated_norm_matmul");
  return out;
}

// ---- §4.8 dense MLP ----
Tensor Engine::mlp(const MlpWeights& mw, const Tensor& x) {
  return be_.matmul(be_.matmul_swiglu(x, *mw.gate, *mw.up), *mw.down);
}

// With its norm (when `in` left it, Backend::norm_matmul_swiglu) and the residual add after it
// (Backend::matmul_add): the steps inside those ops are tapped when the layer is observed.
Tensor Engine::mlp(const MlpWeights& mw, Normed& in, const Tensor* residual) {
  Tensor s;
  if (in.x.empty()) {
    TapScope ts(be_, in.tr);
    s = be_.norm_matmul_swiglu(*in.h, in.pre, *mw.gate, *mw.up);
    if (in.tr)
      offer_taps(in.tr, ts.sink, {{Backend::TapRole::normed_input, in.step}}, in.layer, *in.b, in.mtp, "norm_matmul_swiglu");
  } else {
    s = be_.matmul_swiglu(in.x, *mw.gate, *mw.up);
  }
  TapScope ts(be_, in.tr);
  Tensor out = out_proj(s, *mw.down, residual);
  if (in.tr && residual)
    offer_taps(in.tr, ts.sink, {{Backend::TapRole::product, Step::ffn_out}}, in.layer, *in.b, in.mtp, "matmul_add");
  return out;
}

// ---- §4.8 dense MLP or sparse MoE block ----
Tensor Engine::ffn(int l, const LayerWeights& lw, const Tensor& x, Batch& b, Trace* tr, bool mtp,
                   const LayerNumerics& n) {
  if (!lw.moe) return mlp(lw.mlp, x);
  const MoeWeights& m = lw.moe_w;
  // 1-4. router logits (with the shared expert's gate: both products read x), softmax over all
  // experts, top-k, renormalisation
  Tensor logits, shared_gate;
  if (m.shared_gate) {
    const TensorView* const ws[2] = {m.router, m.shared_gate};
    std::vector<Tensor> r = be_.matmul_many(x, ws);
    logits = std::move(r[0]);
    shared_gate = std::move(r[1]);
  } else {
    logits = be_.matmul(x, *m.router);
  }
  tap(tr, Step::moe_router, l, logits, b, mtp);
  const bool renormalise = cfg_.norm_topk_prob && !n.has(Fault::moe_no_renorm);
  // 2-5 without the routing leaving the device where the backend can (no observer: a traced run
  // computes them step by step, below)
  std::optional<Tensor> on_device = be_.moe_experts_on_device(x, logits, m.experts, cfg_.experts_per_tok, renormalise);
  Tensor routed = on_device ? std::move(*on_device) : routed_on_host(m, x, logits, b, renormalise);
  tap(tr, Step::moe_routed, l, routed, b, mtp);
  // 6. shared expert with its scalar sigmoid gate, 7. routed + shared: the down projection, the
  // gate and the sum in one op (Backend::matmul_gate_add), which writes the gated expert when asked
  if (!m.shared_gate) return routed;
  TapScope ts(be_, tr);
  Tensor out =
      be_.matmul_gate_add(be_.matmul_swiglu(x, *m.shared.gate, *m.shared.up), *m.shared.down, shared_gate, routed);
  offer_taps(tr, ts.sink, {{Backend::TapRole::gated, Step::moe_shared}}, l, b, mtp, "matmul_gate_add");
  return out;
}

// §4.8 steps 2-5 with the routing on the host, which drives the experts.
Tensor Engine::routed_on_host(const MoeWeights& m, const Tensor& x, const Tensor& logits, Batch& b, bool renormalise) {
  // graphs=on: the routing is read on the host, so the step's graph pauses here; `routed` is
  // allocated before, as a buffer of the graph the next segment reads.
  Tensor routed = be_.zeros({b.N, cfg_.hidden_size});
  if (graph_step_) be_.graph_step_pause();
  MoeRouting route = be_.moe_route(logits, cfg_.experts_per_tok, renormalise);
  // 5. routed experts: gather each expert's tokens, SwiGLU MLP, weighted scatter-add (in expert order)
  const int E = cfg_.num_experts, k = route.k;
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(E));
  std::vector<std::vector<double>> wts(static_cast<size_t>(E));
  for (int64_t t = 0; t < b.N; ++t)
    for (int i = 0; i < k; ++i) {
      int32_t e = route.experts[t * k + i];
      rows[e].push_back(t);
      wts[e].push_back(route.weights[t * k + i]);
    }
  for (int e = 0; e < E; ++e) {
    if (rows[e].empty()) continue;
    Tensor ye = mlp(m.experts[e], be_.gather_rows(x, rows[e]));
    be_.scatter_add_rows(routed, ye, rows[e], wts[e]);
  }
  if (graph_step_) be_.graph_step_resume();
  return routed;
}

// ---- §4.3 decoder layer ----
void Engine::prefetch_layer(int l) {
  auto hint = [&](const TensorView* t) {
    if (t) be_.prefetch(*t);
  };
  if (l >= cfg_.num_layers) {
    hint(w_.final_norm);
    hint(w_.lm_head);
    return;
  }
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  for (const TensorView* t : {lw.input_norm, lw.post_norm, lw.attn.q_proj, lw.attn.k_proj, lw.attn.v_proj, lw.attn.o_proj,
                              lw.attn.q_norm, lw.attn.k_norm, lw.gdn.in_proj_qkvz, lw.gdn.in_proj_ba, lw.gdn.in_proj_qkv,
                              lw.gdn.in_proj_z, lw.gdn.in_proj_b, lw.gdn.in_proj_a, lw.gdn.conv1d, lw.gdn.dt_bias,
                              lw.gdn.A_log, lw.gdn.norm, lw.gdn.out_proj, lw.mlp.gate, lw.mlp.up, lw.mlp.down,
                              lw.moe_w.router, lw.moe_w.shared.gate, lw.moe_w.shared.up, lw.moe_w.shared.down,
                              lw.moe_w.shared_gate})
    hint(t);  // (not the routed experts: a token reaches only k of them)
}

Tensor Engine::layer(int l, const LayerWeights& lw, Tensor h, Batch& b, Trace* tr, bool mtp, Tensor x_in,
                     NextNorm* next) {
  const LayerNumerics n = numerics(l, mtp);
  be_.begin_layer(n);
  const NormKind zc = decoder_norm_kind(n);
  const double eps = cfg_.rms_norm_eps;
  // Each norm is left to the product that reads it, and without tensor parallelism (whose
  // all-reduce comes between an output projection and its residual add) each residual add is done
  // by the output projection before it: the same values in fewer ops, observed or not.
  const bool observed = observes_layers(tr), fold = !comm_;
  Trace* otr = observed ? tr : nullptr;  // the norms' observer (Normed)
  // A replaced input reaches the norm after it: one computed with the old rows is dropped.
  if (tap_replaced(tr, Step::l_in, l, h, b, mtp)) x_in = Tensor{};
  Normed in{std::move(x_in), &h, {lw.input_norm, eps, zc}, otr, Step::attn_norm, l, &b, mtp};
  if (observed && !in.x.empty()) tap(tr, Step::attn_norm, l, in.x, b, mtp);  // made by the layer before
  const Tensor* res = fold ? &h : nullptr;
  Tensor m = lw.kind == LayerKind::full ? attention_mixer(l, lw.attn, in, b, tr, mtp, n, res)
                                        : gdn_mixer(l, lw.gdn, in, b, tr, n, res);
  Tensor u;
  Normed post{{}, &u, {lw.post_norm, eps, zc}, otr, Step::ffn_norm, l, &b, mtp};
  if (fold) {
    u = std::move(m);  // h + o_proj / out_proj
    tap(tr, Step::h_mid, l, u, b, mtp);
  } else {
    m = reduce(m, n.has(Fault::tp_gdn_no_allreduce));  // tp > 1: o_proj / out_proj partial sums
    tap(tr, Step::mixer_out, l, m, b, mtp);
    std::tie(u, post.x) = be_.add_rmsnorm(h, m, *lw.post_norm, eps, zc);  // both in one op
    if (tap_replaced(tr, Step::h_mid, l, u, b, mtp))
      post.x = Tensor{};  // normed(post) norms the replacement (and offers it)
    else if (observed)
      tap(tr, Step::ffn_norm, l, post.x, b, mtp);
  }
  if (fold && !lw.moe) {  // u + down(swiglu(norm(u))): the dense MLP with its norm and residual add
    Tensor out = mlp(lw.mlp, post, &u);
    tap(tr, Step::l_out, l, out, b, mtp);
    return out;
  }
  Tensor f = ffn(l, lw, normed(post), b, tr, mtp, n);
  // tp > 1: the down projections' partial sums (fault tp-skip-last-allreduce: not at the last
  // decoder layer, as SGLang's deferred all-reduce fusion did, PR #19411)
  f = reduce(f, skip_last_allreduce_ && !mtp && l == cfg_.num_layers - 1);
  if (n.has(Fault::tp_moe_double_allreduce)) f = reduce(f);  // fault: once more (SGLang PR #20110)
  tap(tr, Step::ffn_out, l, f, b, mtp);
  Tensor out;
  if (next) {
    std::tie(out, next->x) = be_.add_rmsnorm(u, f, *next->w, eps, next->kind);
  } else {
    out = be_.add(u, f);
  }
  if (tap_replaced(tr, Step::l_out, l, out, b, mtp) && next) next->x = Tensor{};  // the next norm reads the replacement
  return out;
}

// ---- §4.9 LM head ----
Tensor Engine::lm_head(const Tensor& hn, const std::vector<int64_t>& rows, const std::vector<uint8_t>* mask) {
  Tensor logits = be_.matmul(rows.empty() ? hn : be_.gather_rows(hn, rows), *w_.lm_head);
  if (mask) be_.mask_logits(logits, *mask);
  return logits;
}

ForwardOutput Engine::forward_rank(const std::vector<SeqInput>& inputs, const ForwardOptions& fo, Trace* tr) {
  if (inputs.empty()) input_error("forward: no sequences given");
  // Batch layout: the rows of every sequence, concatenated in order.
  Batch b;
  std::vector<int32_t> ids;
  int64_t max_rows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqInput& in = inputs[i];
    DEGEN_ASSERT(in.state, "forward: sequence ", i, " has no state");
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    if (n == 0) input_error("forward: sequence ", i, " has no tokens");
    const int64_t pos0 = in.state->pos;
    if (cfg_.max_position_embeddings > 0 && pos0 + n > cfg_.max_position_embeddings)
      input_error("sequence ", i, ": ", pos0 + n, " tokens exceed max_position_embeddings ",
                  cfg_.max_position_embeddings, " of ", cfg_.origin);
    if (in.state->kv.size() != static_cast<size_t>(cfg_.num_layers))
      input_error("forward: sequence ", i, " state was not made by this engine");
    for (const SeqState* other : b.states)
      if (other == in.state) input_error("forward: sequence ", i, " shares its state with an earlier one");
    b.spans.push_back({b.N, n, pos0});
    b.seqs.push_back({static_cast<int>(i), b.N, n, pos0});
    b.states.push_back(in.state);
    for (int64_t t = 0; t < n; ++t) b.pos.push_back(pos0 + t);
    ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
    b.N += n;
    max_rows = std::max(max_rows, n);
  }
  // note: one-token calls always use the recurrent form, as HF does for cached decode.
  b.one_token = max_rows == 1;

  GraphStepScope graph(be_, graph_step_, graph_key(b, fo, tr));

  // §4.1 embedding, §4.3 layers, final norm
  const LayerNumerics model_level = numerics(-1, false);
  be_.begin_layer(model_level);
  Tensor h = be_.embed(*w_.embed, ids);
  tap(tr, Step::embed, -1, h, b);
  prefetch_layer(0);
  // Without an observer, a layer whose last residual add is not the down projection's (MoE, tp > 1)
  // computes the norm after it with it: the next layer's input norm (with that layer's norm kind),
  // or the final norm after the last layer. Otherwise the next layer's first product norms its input.
  const bool fuse = true;  // one path: observed or not (see Engine::layer)
  Tensor x_next;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    prefetch_layer(l + 1);  // read ahead while this layer computes
    NextNorm nn;
    if (l + 1 < cfg_.num_layers) {
      nn.w = w_.layers[size_t(l) + 1].input_norm;
      nn.kind = decoder_norm_kind(numerics(l + 1, false));
    } else {
      nn.w = w_.final_norm;
      nn.kind = final_norm_kind(opt_.run, cfg_);
    }
    h = layer(l, w_.layers[l], std::move(h), b, tr, false, std::move(x_next), fuse ? &nn : nullptr);
    x_next = std::move(nn.x);
  }
  be_.begin_layer(model_level);
  Tensor hn = !x_next.empty() ? std::move(x_next)
                               : be_.rmsnorm(h, *w_.final_norm, cfg_.rms_norm_eps, final_norm_kind(opt_.run, cfg_));
  tap(tr, Step::final_norm, -1, hn, b);
  for (size_t i = 0; i < b.states.size(); ++i) b.states[i]->pos += b.spans[i].rows;

  ForwardOutput out;
  out.seqs = b.seqs;
  if (fo.keep_hidden) out.hidden = hn;
  if (fo.logits == LogitsRows::none) {
    graph.end();
    return out;
  }
  std::vector<int64_t> rows;  // empty: all rows
  Batch lb;                   // row layout of the logits, for the trace
  for (const TraceSeq& s : b.seqs) {
    const int64_t n = fo.logits == LogitsRows::all ? s.rows : 1;
    out.logits_row0.push_back(lb.N);
    lb.seqs.push_back({s.seq, lb.N, n, fo.logits == LogitsRows::all ? s.pos0 : s.pos0 + s.rows - 1});
    lb.N += n;
    if (fo.logits == LogitsRows::last) rows.push_back(s.row0 + s.rows - 1);
  }
  out.logits = lm_head(hn, rows, fo.vocab_mask);
  graph.end();  // the step ends before the trace copies the logits to the host
  tap(tr, Step::logits, -1, out.logits, lb);
  return out;
}

Tensor Engine::mtp_rank(const std::vector<MtpInput>& inputs, const std::vector<uint8_t>* vocab_mask, Trace* tr) {
  if (w_.mtp.empty()) input_error("this checkpoint has no MTP weights (mtp.*)");
  if (inputs.empty()) input_error("mtp: no sequences given");
  const MtpWeights& mw = w_.mtp[0];  // one MTP layer; chained drafts reuse it (§6.6)
  Batch b;
  std::vector<int32_t> ids;
  std::vector<Tensor> hidden;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const MtpInput& in = inputs[i];
    const int64_t n = static_cast<int64_t>(in.next_tokens.size());
    if (n == 0 || in.hidden.rows() != n || in.hidden.cols() != cfg_.hidden_size)
      input_error("mtp: sequence ", i, ": ", n, " next tokens with hidden ", shape_str(in.hidden.shape),
                  ", expected [", n, ", ", cfg_.hidden_size, "]");
    const int64_t pos0 = in.state->mtp_pos;
    b.spans.push_back({b.N, n, pos0});
    b.seqs.push_back({static_cast<int>(i), b.N, n, pos0});
    b.states.push_back(in.state);
    for (int64_t t = 0; t < n; ++t) b.pos.push_back(pos0 + t);  // the hidden state's token position
    ids.insert(ids.end(), in.next_tokens.begin(), in.next_tokens.end());
    hidden.push_back(in.hidden.reshape({n, cfg_.hidden_size}));
    b.N += n;
  }
  const double eps = cfg_.rms_norm_eps;
  const LayerNumerics model_level = numerics(-1, false);
  be_.begin_layer(model_level);
  // 1. embedding of the next token (shared table)
  Tensor e = be_.embed(*w_.embed, ids);
  // 2. u = [norm_emb(e) ; norm_hidden(ĥ)] W_fcᵀ  (embedding first; fault mtp-concat-order: hidden first)
  Tensor en = be_.rmsnorm(e, *mw.pre_fc_norm_embedding, eps, NormKind::zero_centred);
  Tensor hn = be_.rmsnorm(be_.concat_rows(hidden), *mw.pre_fc_norm_hidden, eps, NormKind::zero_centred);
  const bool hidden_first = opt_.run.has_fault(fault_name(Fault::mtp_concat_order), -1, &cfg_);
  Tensor u = be_.matmul(hidden_first ? be_.concat_cols(hn, en) : be_.concat_cols(en, hn), *mw.fc);
  tap(tr, Step::mtp_in, -1, u, b, true);
  // 3. one full-attention decoder layer with its own KV cache
  u = layer(0, mw.layer, std::move(u), b, tr, true);
  be_.begin_layer(model_level);
  tap(tr, Step::mtp_out, -1, u, b, true);
  // 4. mtp.norm, 5. shared lm_head
  Tensor hm = be_.rmsnorm(u, *mw.norm, eps, NormKind::zero_centred);
  tap(tr, Step::mtp_norm, -1, hm, b, true);
  for (size_t i = 0; i < b.states.size(); ++i) b.states[i]->mtp_pos += b.spans[i].rows;
  if (rank_ != 0) return Tensor{};  // tp > 1: the draft logits are rank 0's
  Tensor logits = lm_head(hm, {}, vocab_mask);
  tap(tr, Step::mtp_logits, -1, logits, b, true);
  return logits;
}

}  // namespace degen
