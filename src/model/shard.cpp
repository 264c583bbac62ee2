// Tensor-parallel sharding (see shard.h for the scheme).
#include "model/shard.h"

#include <cstring>

#include "util/error.h"

namespace degen {

void check_tp_split(const ModelConfig& c, int tp) {
  if (tp < 1) input_error("tp=", tp, ": the number of tensor-parallel ranks must be at least 1");
  if (tp == 1) return;
  std::vector<std::string> bad;
  auto need = [&](int64_t value, const char* what, const char* why) {
    if (value % tp != 0) bad.push_back(cat(what, " = ", value, " is not a multiple of ", tp, ": ", why));
  };
  need(c.n_q, "num_attention_heads (n_q)", "each rank computes whole query heads");
  need(c.n_kv, "num_key_value_heads (n_kv)", "each rank holds whole KV heads (KV heads are not replicated)");
  if (c.num_linear_layers() > 0)
    need(c.n_k, "linear_num_key_heads (n_k)",
         "each rank holds whole GDN key heads and the r value heads that read each of them");
  bool dense = false;
  for (int l = 0; l < c.num_layers; ++l) dense = dense || !c.is_moe_layer(l);
  if (dense || !c.is_moe()) need(c.intermediate_size, "intermediate_size (I)", "the dense MLP is split along I");
  if (c.is_moe()) {
    need(c.moe_intermediate_size, "moe_intermediate_size (I_e)", "every expert is split along its intermediate");
    if (c.shared_expert_intermediate_size > 0)
      need(c.shared_expert_intermediate_size, "shared_expert_intermediate_size (I_s)",
           "the shared expert is split along its intermediate");
  }
  if (bad.empty()) return;
  std::string msg = cat("tp=", tp, " cannot split ", c.origin, ":");
  for (const std::string& b : bad) msg += "\n  " + b;
  throw InputError(msg);
}

ModelConfig rank_config(const ModelConfig& c, int tp) {
  check_tp_split(c, tp);
  ModelConfig r = c;
  r.n_q /= tp;
  r.n_kv /= tp;
  r.n_k /= tp;
  r.n_v /= tp;
  r.intermediate_size /= tp;
  r.moe_intermediate_size /= tp;
  r.shared_expert_intermediate_size /= tp;
  return r;
}

const TensorView* RankShard::keep(const TensorView* v) {
  if (!v) return nullptr;
  for (const Entry& e : entries_)
    if (e.name == v->name) return v;  // tied lm_head, a norm seen twice
  entries_.push_back({v->name, v->numel(), v->numel(), static_cast<int64_t>(v->nbytes), false});
  return v;
}

// Rows [a, a + n) of each range, in order, of v as [rows, ...] (listed: an entry of entries()).
const TensorView* RankShard::take(const TensorView* v, std::vector<std::pair<int64_t, int64_t>> ranges, bool listed) {
  if (!v) return nullptr;
  DEGEN_ASSERT(!v->shape.empty(), "shard: scalar tensor ", v->name);
  const int64_t rows = v->shape[0];
  const size_t row_bytes = v->nbytes / static_cast<size_t>(rows);
  int64_t total = 0;
  for (auto [a, n] : ranges) {
    DEGEN_ASSERT(a >= 0 && n >= 0 && a + n <= rows, "shard: rows ", a, "+", n, " outside ", v->name);
    total += n;
  }
  auto buf = std::make_unique<uint8_t[]>(std::max<size_t>(1, row_bytes * static_cast<size_t>(total)));
  size_t at = 0;
  for (auto [a, n] : ranges) {
    std::memcpy(buf.get() + at, v->data + static_cast<size_t>(a) * row_bytes, static_cast<size_t>(n) * row_bytes);
    at += static_cast<size_t>(n) * row_bytes;
  }
  std::vector<int64_t> shape = v->shape;
  shape[0] = total;
  return adopt(v, std::move(buf), std::move(shape), at, listed);
}

// Columns [c0, c0 + n) of v as [rows, cols].
const TensorView* RankShard::take_cols(const TensorView* v, int64_t c0, int64_t n) {
  if (!v) return nullptr;
  DEGEN_ASSERT(v->shape.size() == 2 && c0 >= 0 && c0 + n <= v->shape[1], "shard: columns of ", v->name);
  const int64_t rows = v->shape[0], cols = v->shape[1];
  const size_t es = dtype_size(v->dtype);
  auto buf = std::make_unique<uint8_t[]>(std::max<size_t>(1, static_cast<size_t>(rows * n) * es));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf.get() + static_cast<size_t>(r * n) * es, v->data + static_cast<size_t>(r * cols + c0) * es,
                static_cast<size_t>(n) * es);
  return adopt(v, std::move(buf), {rows, n}, static_cast<size_t>(rows * n) * es);
}

// This rank's slice of v, held in buf: its view, and its entry.
const TensorView* RankShard::adopt(const TensorView* v, std::unique_ptr<uint8_t[]> buf, std::vector<int64_t> shape,
                                   size_t nbytes, bool listed) {
  auto s = std::make_unique<TensorView>(*v);
  s->name = cat(v->name, "[tp ", rank_, "/", tp_, listed ? "]" : ", midpoint split]");
  s->shape = std::move(shape);
  s->data = buf.get();
  s->nbytes = nbytes;
  s->offset = 0;
  if (listed) entries_.push_back({v->name, v->numel(), s->numel(), static_cast<int64_t>(nbytes), true});
  buffers_.push_back(std::move(buf));
  views_.push_back(std::move(s));
  return views_.back().get();
}

void RankShard::shard_mlp(MlpWeights& m, int64_t inter) {
  if (!m.gate) return;
  const int64_t il = inter / tp_, a = rank_ * il;
  m.gate = take(m.gate, {{a, il}});
  m.up = take(m.up, {{a, il}});
  m.down = take_cols(m.down, a, il);
}

void RankShard::shard_layer(LayerWeights& lw, const ModelConfig& c) {
  lw.input_norm = keep(lw.input_norm);
  lw.post_norm = keep(lw.post_norm);
  if (lw.kind == LayerKind::full) {
    AttnWeights& a = lw.attn;
    const int64_t D = c.head_dim, nq = c.n_q / tp_, nkv = c.n_kv / tp_;
    a.q_proj = take(a.q_proj, {{rank_ * nq * 2 * D, nq * 2 * D}});  // [query | gate] per head: whole heads
    a.k_proj = take(a.k_proj, {{rank_ * nkv * D, nkv * D}});
    a.v_proj = take(a.v_proj, {{rank_ * nkv * D, nkv * D}});
    a.o_proj = take_cols(a.o_proj, rank_ * nq * D, nq * D);
    a.q_norm = keep(a.q_norm);
    a.k_norm = keep(a.k_norm);
  } else {
    GdnWeights& g = lw.gdn;
    const int64_t dk = c.d_k, dv = c.d_v, r = c.r();
    const int64_t nk = c.n_k / tp_, nv = c.n_v / tp_, k0 = rank_ * nk, v0 = rank_ * nv;
    // [q | k | v] channel ranges of this rank (conv1d and in_proj_qkv share them)
    const std::vector<std::pair<int64_t, int64_t>> qkv = {
        {k0 * dk, nk * dk}, {c.d_key() + k0 * dk, nk * dk}, {2 * c.d_key() + v0 * dv, nv * dv}};
    if (g.fused) {  // per key group g: [q_g (dk) | k_g (dk) | v of its r heads | z of its r heads]
      const int64_t P = 2 * dk + 2 * r * dv;
      g.in_proj_qkvz = take(g.in_proj_qkvz, {{k0 * P, nk * P}});
      g.in_proj_ba = take(g.in_proj_ba, {{k0 * 2 * r, nk * 2 * r}});
    } else {
      g.in_proj_qkv = take(g.in_proj_qkv, qkv);
      g.in_proj_z = take(g.in_proj_z, {{v0 * dv, nv * dv}});
      g.in_proj_b = take(g.in_proj_b, {{v0, nv}});
      g.in_proj_a = take(g.in_proj_a, {{v0, nv}});
    }
    g.conv1d = take(g.conv1d, qkv);
    g.dt_bias = take(g.dt_bias, {{v0, nv}});
    g.A_log = take(g.A_log, {{v0, nv}});
    g.norm = keep(g.norm);
    g.out_proj = take_cols(g.out_proj, v0 * dv, nv * dv);
  }
  if (!lw.moe) {
    shard_mlp(lw.mlp, c.intermediate_size);
    return;
  }
  MoeWeights& m = lw.moe_w;
  m.router = keep(m.router);
  for (MlpWeights& e : m.experts) shard_mlp(e, c.moe_intermediate_size);
  if (m.shared.gate) shard_mlp(m.shared, c.shared_expert_intermediate_size);
  m.shared_gate = keep(m.shared_gate);
}

RankShard::RankShard(const ModelConfig& c, const ModelWeights& w, int tp, int rank, bool ba_midpoint)
    : tp_(tp), rank_(rank), cfg_(rank_config(c, tp)) {
  DEGEN_ASSERT(rank >= 0 && rank < tp, "shard: rank ", rank, " of ", tp);
  w_.experts_fused = w.experts_fused;
  w_.embed = keep(w.embed);
  w_.lm_head = keep(w.lm_head);
  w_.final_norm = keep(w.final_norm);
  w_.layers = w.layers;
  for (LayerWeights& lw : w_.layers) shard_layer(lw, c);
  if (ba_midpoint) {  // fault tp-ba-midpoint-split: [b | a] halves of n_v rows each, split by rank
    ba_midpoint_.assign(w.layers.size(), nullptr);
    const int64_t half = c.n_v, nv = c.n_v / tp_;
    for (size_t l = 0; l < w.layers.size(); ++l)
      if (w.layers[l].kind == LayerKind::linear && w.layers[l].gdn.fused)
        ba_midpoint_[l] = take(w.layers[l].gdn.in_proj_ba, {{rank_ * nv, nv}, {half + rank_ * nv, nv}}, false);
  }
  w_.mtp = w.mtp;
  for (MtpWeights& m : w_.mtp) {
    m.fc = keep(m.fc);
    m.pre_fc_norm_embedding = keep(m.pre_fc_norm_embedding);
    m.pre_fc_norm_hidden = keep(m.pre_fc_norm_hidden);
    m.norm = keep(m.norm);
    shard_layer(m.layer, c);
  }
}

int64_t RankShard::bytes() const {
  int64_t b = 0;
  for (const Entry& e : entries_) b += e.rank_bytes;
  return b;
}

namespace {
// Whether a weight of the table is split across ranks (shard.h), by its name.
bool sharded_name(const std::string& n) {
  static const char* kSplit[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                                 "in_proj_qkvz.weight", "in_proj_ba.weight", "in_proj_qkv.weight",
                                 "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight", "conv1d.weight",
                                 "dt_bias", "A_log", "out_proj.weight", "gate_proj.weight", "up_proj.weight",
                                 "down_proj.weight", "experts.gate_up_proj", "experts.down_proj"};
  for (const char* s : kSplit) {
    const size_t k = std::strlen(s);
    if (n.size() >= k && n.compare(n.size() - k, k, s) == 0) return true;
  }
  return false;
}
}  // namespace

TpMemory tp_memory(const ModelConfig& c, int tp, bool with_mtp) {
  check_tp_split(c, tp);
  CheckpointLayout lay;
  lay.mtp_layers = with_mtp ? c.mtp_num_layers : 0;
  TpMemory m;
  for (const WeightSpec& w : weight_table(c, lay)) {
    if (w.need == Need::optional) continue;
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    (sharded_name(w.name) ? m.sharded_bytes : m.replicated_bytes) += 2 * n;
  }
  m.rank_weight_bytes = m.replicated_bytes + m.sharded_bytes / tp;
  m.allreduces_per_forward = tp > 1 ? 2 * c.num_layers : 0;
  m.allreduce_bytes_per_token = tp > 1 ? 2 * c.hidden_size : 0;
  return m;
}

}  // namespace degen
