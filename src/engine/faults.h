// The fault catalogue (DESIGN.md §7): named, layer-targetable bug classes that real engines have
// shipped for this model family. A fault is a deviation of ONE op of the forward pass (not a second
// model), selected with the toggle `fault=NAME[@layers]` and honoured by every backend. It is the
// ground truth of the test suite: inject fault X at layer L, the tool must name X's op at L.
// One table (fault_catalogue), one row per fault, holds its typed id (Fault), name, site, first
// corrupted op, where it is applied (an op flag of the forward pass, or the engine's own steps),
// whether it needs tp > 1, and the rule saying when it cannot change a model; everything else
// (fault_name, fault_from_name, check_faults, `degenbisect faults`, selftest) reads it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace degen {

struct RunConfig;

// Every fault of the catalogue (src/engine/faults.cpp), in its order; FaultInfo::applied says where
// each is implemented. Those of the forward pass (FaultApplied::op_flag) are each a deviation of one
// op (DESIGN.md §7): the engine decides per layer which are active (LayerNumerics::faults, a bit per
// Fault) and implements the ones that change the layer's data flow through the ops' own parameters;
// the backend ops read the others from LayerNumerics, and a CUDA kernel mirrors them with the same
// flag (a bool argument: no kernel sees these numbers). The others (FaultApplied::engine_step) are
// faults of the engine's own steps: mtp-no-rollback and mtp-prenorm-hidden in engine/spec_decode,
// tp-skip-last-allreduce in the engine's layer loop.
enum class Fault : uint8_t {
  rope_interleaved,         // op rope_partial: pairs (2i, 2i+1) instead of (i, i + R/2)
  rope_all_dims,            // engine: rope_partial with rotary_dim = head_dim
  rope_freq_head_dim,       // op rope_partial: frequencies 1/θ^(2i/head_dim) on the first R dims
  norm_no_plus_one,         // engine: the layer's zero-centred norms with NormKind::plain
  gdn_norm_plus_one,        // op gated_rmsnorm: weight (1 + w)
  qgate_split,              // engine: q_proj output split as [all queries | all gates]
  gdn_read_before_decay,    // op gdn: error read from the state before the decay
  gdn_skip_l2norm,          // op l2norm: x * scale, not normalised
  gdn_head_mod,             // op gdn: value head j reads key head j mod n_k
  gdn_out_fp16,             // op gdn: o rounded to fp16 (inf beyond 65504)
  conv_window_stuck,        // op conv1d_causal: window not advanced by one-token calls
  alog_no_exp,              // op gdn_gates: g = -A_log * softplus(.)
  kv_off_by_one,            // op attention: one-token calls write their K/V row at pos + 1
  moe_no_renorm,            // engine: moe_route without renormalisation
  mtp_prenorm_hidden,       // engine step (spec_decode): the MTP head fed the pre-norm hidden state
  mtp_no_rollback,          // engine step (spec_decode): no state rollback after rejected drafts
  tp_skip_last_allreduce,   // engine step (tp > 1): the last layer's FFN all-reduce skipped
  tp_gdn_no_allreduce,      // engine (tp > 1): the GDN out_proj partial sums are not all-reduced
  tp_moe_double_allreduce,  // engine (tp > 1): the MoE block output is all-reduced twice (x tp)
  // From the public bug reports (../shared/spec/real-bugs.md, docs/faults.md):
  norm_double_plus_one,     // engine: zero-centred norms with weight (2 + w): the +1 shift applied twice
  mtp_concat_order,         // engine step (MTP head): fc input [hidden | embedding] instead of [embedding | hidden]
  tp_ba_midpoint_split,     // engine (tp > 1): Qwen3-Next's interleaved in_proj_ba split at its midpoint
  spec_stale_slot,          // engine step (spec_decode): after m > 0 accepted drafts the state of draft 0 is kept
  prefix_snapshot_drafts,   // engine step (serving): a prefix-cache snapshot taken over rejected drafts
  pad_slot_alias,           // engine step (serving): a padding row's state slot aliases a live sequence's
  pad_updates_state,        // engine step (serving): the padded last prefill chunk's pad tokens update the state
  chunk_state_twice,        // engine step (serving): a chunk's initial state counted twice
  chunk_state_zero,         // engine step (serving): a chunk's scan starts from a zero state
  count
};
const char* fault_name(Fault f);                          // the catalogue name, "rope-interleaved"
std::optional<Fault> fault_from_name(std::string_view name);  // nullopt: not in the catalogue

// Where a fault is applied.
enum class FaultApplied : uint8_t {
  op_flag,      // an op flag of the forward pass (LayerNumerics::faults), per layer
  engine_step,  // the engine's own steps (MTP drafting and rollback, the last tensor-parallel all-reduce)
};

// Where a fault can apply.
enum class FaultSite : uint8_t {
  full_layer,    // full-attention layers
  linear_layer,  // Gated DeltaNet layers
  any_layer,     // every decoder layer
  moe_layer,     // layers whose FFN is the MoE block
  model,         // not tied to a decoder layer (MTP, tensor parallelism)
};
const char* fault_site_name(FaultSite s);

struct FaultInfo {
  Fault id;
  const char* name;         // toggle value: fault=NAME
  FaultSite site;
  const char* op;           // the trace step (src/engine/trace.h) whose output it corrupts first
  const char* description;  // one line: what the buggy engine does
  const char* source;       // the public report it mirrors (../shared/spec/model.md §8)
  // The fault shows only on activations of a size small models do not reach (e.g. fp16 overflow
  // of the GDN readout needs |o| > 65504); selftest reports it as skipped, not failed, where the
  // injected run stays good.
  bool magnitude_dependent = false;
  // Where it is applied: an op flag of the forward pass (its bit in LayerNumerics::faults), or the
  // engine's own steps (the MTP drafting and rollback, the last tensor-parallel all-reduce).
  FaultApplied applied = FaultApplied::op_flag;
  bool needs_tp = false;    // a fault of the tensor-parallel all-reduces: untestable at tp = 1
  bool needs_mtp = false;   // a fault of MTP drafting: shows only with mtp > 0
  // Why the fault cannot change this model (e.g. gdn-head-mod where n_v = n_k), or nullptr.
  const char* (*inert_on)(const ModelConfig& cfg) = nullptr;
  // The serving toggles the fault needs in order to act ("prefill_chunk=8"): the mechanism it lives
  // in is off without them. check_faults makes a run without them untestable; selftest adds them.
  const char* needs = nullptr;
  // The serving mechanism the fault lives in (engine/serving.h): "chunk", "snapshot", "slot",
  // "rollback"; nullptr for a fault of the forward pass. compare's serving-state check names it.
  const char* mechanism = nullptr;
};

const std::vector<FaultInfo>& fault_catalogue();
const FaultInfo* find_fault(const std::string& name);  // nullptr when unknown
const FaultInfo& fault_info(Fault id);

// Whether decoder layer l (or the MTP layer, mtp = true) can host a fault of this site.
bool fault_site_hosts(FaultSite site, const ModelConfig& cfg, int l, bool mtp);

// Checks the RunConfig's faults against the model: InputError for a fault whose scope selects no
// layer that can host it (naming the layers' kind), UntestableError for one that cannot change
// anything on this model (e.g. gdn-head-mod when n_v = n_k) or needs what this run lacks
// (tp-skip-last-allreduce without tensor parallelism).
void check_faults(const RunConfig& rc, const ModelConfig& cfg);
// f.needs as a configuration (read once from the catalogue's text); the default configuration when
// the fault needs nothing.
const RunConfig& fault_needs(const FaultInfo& f);
// The toggles of f.needs that `rc` leaves at their defaults ("prefill_chunk, mtp"), "" when none.
std::string missing_needs(const FaultInfo& f, const RunConfig& rc);

}  // namespace degen
