// Per-sequence decode state (spec model.md §5.1): a KV cache per full-attention layer, the conv
// window and recurrent state per Gated DeltaNet layer, and the MTP layer's own KV cache.
// States are allocated by the backend (so they live on its device) and can be snapshotted
// (deep copy) for MTP rollback (spec §5.4).
// note: copying a SeqState by value shares its buffers (Tensors are reference-counted views);
// Engine::snapshot() makes an independent copy.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "util/error.h"

namespace degen {

// K and V of one attention layer for one sequence. Keys are stored post-RoPE.
struct KvCache {
  Tensor k;         // [capacity, n_kv, D]
  Tensor v;         // [capacity, n_kv, D]
  int64_t len = 0;  // rows in use (= tokens seen by this layer)
  int64_t capacity() const { return k.empty() ? 0 : k.shape[0]; }
};

// One Gated DeltaNet layer's state for one sequence.
struct GdnState {
  Tensor conv;  // [K-1, d_conv]: the last K-1 pre-conv qkv rows, oldest first (zeros before the start)
  Tensor S;     // [n_v, d_k, d_v] fp32 (fp64 under precision=fp64): key index first (spec §4.7.5)
};

struct SeqState {
  int64_t pos = 0;            // tokens consumed so far = absolute position of the next token
  std::vector<KvCache> kv;    // [L]; used only at full-attention layers
  std::vector<GdnState> gdn;  // [L]; used only at GDN layers
  KvCache mtp_kv;             // the MTP layer's cache (spec §6)
  int64_t mtp_pos = 0;        // rows the MTP layer has consumed
  // Tensor parallelism (tp > 1): this struct is rank 0's state (its heads only) and `peers` the
  // states of ranks 1..tp-1, on their devices, with the same pos and mtp_pos. Empty at tp = 1.
  std::vector<SeqState> peers;
};

// The GDN state of every layer of one sequence at one moment (an MTP verify position): [L], empty
// at full-attention layers; `peers` as in SeqState.
struct GdnCheckpoint {
  std::vector<Tensor> conv;  // [K-1, d_conv]
  std::vector<Tensor> S;     // [n_v, d_k, d_v]
  std::vector<GdnCheckpoint> peers;
};

// Moves a checkpoint back into the state it was taken from (every rank).
inline void restore_gdn_checkpoint(SeqState& s, GdnCheckpoint& cp) {
  DEGEN_ASSERT(cp.conv.size() == s.gdn.size() && cp.peers.size() == s.peers.size(),
               "GDN checkpoint taken from another state");
  for (size_t l = 0; l < s.gdn.size(); ++l) {
    if (!cp.conv[l].empty()) s.gdn[l].conv = std::move(cp.conv[l]);
    if (!cp.S[l].empty()) s.gdn[l].S = std::move(cp.S[l]);
  }
  for (size_t i = 0; i < s.peers.size(); ++i) restore_gdn_checkpoint(s.peers[i], cp.peers[i]);
}

// fn(rank state) for the state and every peer rank's.
template <typename F>
void for_each_rank_state(SeqState& s, F&& fn) {
  fn(s);
  for (SeqState& p : s.peers) fn(p);
}

}  // namespace degen
