// The serving mechanisms of the tool's own engine (DESIGN.md §7 "Where engines break"): what a
// serving engine does around the forward pass, and where most public bugs on these models live
// (../shared/spec/real-bugs.md, docs/faults.md). Each is a toggle (DESIGN.md §5):
//  - prefill_chunk=N: a prompt is prefilled in calls of at most N tokens, the state carried between
//    them (a continued prefill: Engine::forward on a state with pos > 0);
//  - prefix_cache=on|N: after every N-token block boundary a prompt or a generation reaches, the
//    sequence's state (KV caches, GDN conv windows and S, the MTP input rows of those positions) is
//    kept as a snapshot keyed by the tokens before it; a later request whose tokens start with a
//    stored block prefix restores the longest such snapshot and computes only the rest. A snapshot is
//    taken only of committed tokens: under MTP the state at a boundary a verify pass crossed is the
//    per-position checkpoint of that boundary, never a state that saw a rejected draft;
//  - batch=N: plain decode steps run exactly N rows, padding rows filling the places of sequences
//    that are missing or finished, as CUDA-graph capture sizes force. Each padding row has a state
//    slot of its own that no sequence reads.
// Off (the defaults), generate() makes exactly the forward calls it made before (bit for bit).
// On, the results equal those of off within the floors (chunk and block boundaries are fp32
// reorderings of the same sums; the padded rows of a decode step are independent rows).
//
// The faults of these mechanisms (engine/faults.h, FaultInfo::mechanism) are applied here, per GDN
// layer of their scope, the same code on every backend (the state edits go through the backend):
//   chunk-state-twice: a chunk that continues a sequence starts from 2·S (its initial state counted twice);
//   chunk-state-zero: such a chunk starts from S = 0;
//   pad-updates-state: the last chunk, padded to N tokens, lets the pad tokens update the GDN state;
//   pad-slot-alias: a padding row's slot is the first live sequence's (it reads that state and its
//     update is the one written back);
//   prefix-snapshot-drafts: a snapshot at a block boundary crossed by a verify pass is the state after
//     the whole pass (rejected drafts included);
//   spec-stale-slot: after m > 0 accepted drafts the state of verify position 0 is kept (spec_decode).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/run_config.h"

namespace degen {

struct VerifyPass;

// The token id of padding rows and pad positions (any id runs the same arithmetic).
inline constexpr int32_t kPadToken = 0;

struct ServingOptions {
  int prefill_chunk = 0;  // 0: a prompt in one call
  int prefix_block = 0;   // 0: no prefix cache
  int batch_rows = 0;     // 0: decode steps of the live sequences only
  // The faults of the mechanisms: [L] 1 where the fault acts (GDN layers of its scope); empty: off.
  std::vector<uint8_t> chunk_twice, chunk_zero, pad_updates, pad_alias, snapshot_drafts, stale_slot;
  // Whether a prefill needs serve_prefill (else one Engine::forward call, as before).
  bool shapes_prefill() const { return prefill_chunk > 0 || prefix_block > 0; }
};
ServingOptions serving_options(const RunConfig& rc, const ModelConfig& cfg);

// A snapshot of a sequence after the tokens of its key.
struct PrefixEntry {
  SeqState state;
  Tensor hidden;  // [n, H] the MTP input rows of positions [0, n) (empty when the run keeps none)
};

// The prefix cache of one engine (one compare run, one `run`): exact token keys.
class PrefixCache {
 public:
  explicit PrefixCache(int block) : block_(block) {}
  int block() const { return block_; }
  // The longest stored prefix of `tokens` shorter than tokens.size() (a request always computes its
  // last token): its length (0: none) and its entry.
  std::pair<int64_t, const PrefixEntry*> lookup(std::span<const int32_t> tokens) const;
  bool has(std::span<const int32_t> prefix) const;
  // Keeps the first snapshot stored under a key (a cached block is not recomputed).
  void store(std::span<const int32_t> prefix, PrefixEntry e);
  int64_t hits = 0, stores = 0;

 private:
  int block_;
  std::map<std::vector<int32_t>, PrefixEntry> entries_;
};

struct PrefillOut {
  Tensor logits;                // [n, V]: each sequence's last row, in input order (fo.logits == last)
  std::vector<Tensor> hidden;   // with a hidden source: per sequence [T_i, H] (restored rows first)
  std::vector<int64_t> cached;  // per sequence: tokens restored from the prefix cache
};

// The rows a prefill call gives as MTP input (o.hidden, or a trace capture of the pre-norm rows).
using HiddenSource = std::function<Tensor(const ForwardOutput& o)>;

// Prefills fresh states under the serving options: restores the longest cached prefix, runs the rest
// in calls split at chunk and block boundaries, stores snapshots at block boundaries, and applies the
// chunk faults. `tr` sees every call; `hidden` (optional) gives each call's MTP input rows.
PrefillOut serve_prefill(Engine& eng, const std::vector<SeqInput>& in, const ForwardOptions& fo, Trace* tr,
                         const ServingOptions& so, PrefixCache* cache, const HiddenSource* hidden = nullptr);

// A decode step of `step` (one token per live sequence) under batch=N: padding rows fill it to N rows
// (pad_slots grows to the slots they need), the pad-slot-alias fault applied; returns the live rows'
// logits (the padding rows' dropped).
ForwardOutput serve_decode_step(Engine& eng, const std::vector<SeqInput>& step, const ForwardOptions& fo, Trace* tr,
                                const ServingOptions& so, std::vector<SeqState>& pad_slots);

// After a plain decode step or an MTP round: the snapshots of the block boundaries the committed
// tokens `tokens` (prompt + generated, tokens.size() == state.pos) reached since `from` (exclusive).
// With a verify pass (MTP) the state at a boundary inside it is its checkpoint there, or under
// prefix-snapshot-drafts the state after the whole pass (`after_pass`, taken before the rollback).
void store_decode_snapshots(Engine& eng, PrefixCache& cache, const SeqState& state, std::span<const int32_t> tokens,
                            int64_t from, const ServingOptions& so, const VerifyPass* pass = nullptr,
                            const SeqState* after_pass = nullptr, const Tensor* hidden = nullptr);

}  // namespace degen
