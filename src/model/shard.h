// Tensor-parallel sharding (DESIGN.md §5 `tp`, §9), written once for every backend: which part of
// each weight rank r of tp holds, and the config that rank runs with. The engine runs the same
// forward pass on every rank with that rank's config and weights and sums the partial outputs of
// the row-parallel products with an all-reduce (src/engine/tp.h).
//
// The split (the Megatron scheme that vLLM and SGLang use for this family):
//   full attention  q_proj (query and gate interleaved per head), k_proj, v_proj: by head (rows);
//                   o_proj: the matching input columns; q_norm / k_norm: replicated (per head-dim).
//                   Needs n_q and n_kv divisible by tp (no KV-head replication).
//   Gated DeltaNet  key heads split in contiguous groups, value heads with them (value head j
//                   reads key head j / r, so rank r's value heads [r n_v/tp, ...) read exactly its
//                   key heads): in_proj_qkv rows of q, k and v; in_proj_z, in_proj_b, in_proj_a,
//                   dt_bias, A_log and conv1d (channels in [q | k | v] order) by head; the fused
//                   Qwen3-Next in_proj_qkvz / in_proj_ba by key group (contiguous rows there);
//                   out_proj: the matching input columns; the gated norm weight [d_v]: replicated.
//                   Needs n_k divisible by tp.
//   dense MLP       gate_proj / up_proj rows, down_proj columns of the intermediate; I % tp == 0.
//   MoE             every expert's intermediate split like a dense MLP (each rank holds a slice of
//                   every expert), the shared expert likewise; router and shared_expert_gate
//                   replicated (every rank routes identically). I_e and I_s divisible by tp.
//   MTP             fc and its norms replicated; its decoder layer split as above.
//   embedding, lm_head, final norm, layer norms: replicated. (Vocabulary-parallel lm_head would
//   save V*H/tp*(tp-1) bytes per rank; replicated is chosen so that every rank can compute the
//   full logits and sampling needs no gather; the cost shows in `inspect --tp`.)
// All-reduces: after o_proj, after out_proj and after the MLP/MoE block (down projections), i.e.
// two per decoder layer per forward call, each of N x H activations.
// Fault tp-ba-midpoint-split (vLLM PR #36242): built on request beside the right slices, the rank's
// in_proj_ba as a loader that takes the interleaved tensor for [all b | all a] gives it: rows
// [r n_v/tp, (r+1) n_v/tp) of each half, instead of its key groups' contiguous rows.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace degen {

// Throws InputError naming every dimension of `cfg` that tp does not divide, and why it must.
void check_tp_split(const ModelConfig& cfg, int tp);

// The config rank r runs with: head counts and intermediate sizes divided by tp.
ModelConfig rank_config(const ModelConfig& cfg, int tp);

// One rank's weights: views of the replicated tensors (no copy) and owned copies of its slices.
class RankShard {
 public:
  // ba_midpoint: also build ba_midpoint() for every fused GDN layer (fault tp-ba-midpoint-split).
  RankShard(const ModelConfig& cfg, const ModelWeights& w, int tp, int rank, bool ba_midpoint = false);
  RankShard(const RankShard&) = delete;
  RankShard& operator=(const RankShard&) = delete;

  int tp() const { return tp_; }
  int rank() const { return rank_; }
  const ModelConfig& config() const { return cfg_; }    // rank_config(cfg, tp)
  const ModelWeights& weights() const { return w_; }

  // Every tensor the rank uses, once: its full and per-rank element counts.
  struct Entry {
    std::string name;
    int64_t full_numel = 0;
    int64_t rank_numel = 0;  // == full_numel when replicated
    int64_t rank_bytes = 0;
    bool sharded = false;
  };
  const std::vector<Entry>& entries() const { return entries_; }
  int64_t bytes() const;  // weight bytes this rank holds (sharded slices + replicated tensors)
  // Decoder layer l's in_proj_ba split at its midpoint (fault tp-ba-midpoint-split): [n_v/tp rows
  // of the first half | n_v/tp rows of the second half] in this rank's shape, read as interleaved
  // per key group like the right slice; nullptr unless built (a fused GDN layer, ba_midpoint on).
  // Not in entries(): no right run holds it.
  const TensorView* ba_midpoint(int l) const {
    return l >= 0 && static_cast<size_t>(l) < ba_midpoint_.size() ? ba_midpoint_[static_cast<size_t>(l)] : nullptr;
  }

 private:
  const TensorView* keep(const TensorView* v);                          // replicated
  const TensorView* take(const TensorView* v, std::vector<std::pair<int64_t, int64_t>> row_ranges, bool listed = true);
  const TensorView* take_cols(const TensorView* v, int64_t c0, int64_t n);
  const TensorView* adopt(const TensorView* v, std::unique_ptr<uint8_t[]> buf, std::vector<int64_t> shape,
                          size_t nbytes, bool listed = true);
  void shard_mlp(MlpWeights& m, int64_t inter);
  void shard_layer(LayerWeights& lw, const ModelConfig& full);

  int tp_, rank_;
  ModelConfig cfg_;
  ModelWeights w_;
  std::vector<std::unique_ptr<TensorView>> views_;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
  std::vector<Entry> entries_;
  std::vector<const TensorView*> ba_midpoint_;  // per decoder layer (fault tp-ba-midpoint-split)
};

// Memory of one rank for a config at tp, from the weight table alone (every weight counted as bf16,
// as the GPU path uploads it): what `inspect --tp` prints. sharded_bytes: the part split tp ways.
struct TpMemory {
  int64_t rank_weight_bytes = 0;  // what one rank holds
  int64_t sharded_bytes = 0;      // all ranks together, of the tensors split tp ways
  int64_t replicated_bytes = 0;   // held by every rank
  int allreduces_per_forward = 0;           // 2 per decoder layer (+ 2 for the MTP layer when it runs)
  int64_t allreduce_bytes_per_token = 0;    // bf16 H per all-reduce, per token row
};
// (KV cache and GDN state per rank: estimate_memory(rank_config(cfg, tp), ...) of model/model.h.)
TpMemory tp_memory(const ModelConfig& cfg, int tp, bool with_mtp);

}  // namespace degen
