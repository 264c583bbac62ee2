// The fused ops of the engine's one path (engine.cpp): backend ops that compute several trace steps
// (engine/trace.h) in one call, and on a GPU often in one kernel. An observed run computes with the
// same ops as a run that is not observed; it reads the steps inside a fused op where the backend
// writes them (Backend::TapSink: the default compositions write all of them, a CUDA kernel those it
// was given a tap output for). Where a step stays inside a kernel, localisation cannot see it on its
// own, so it names the fused op and its steps in order: the fault is in there.
#pragma once
#include <string>
#include <vector>

#include "engine/trace.h"
#include "model/config.h"

namespace degen {

struct FusedOp {
  const char* op;           // the Backend op, "gated_norm_matmul"
  std::vector<Step> steps;  // the trace steps it computes, in forward order (its output last)
  const char* what;         // what it computes, in words
};

// The fused op that computes step s in a decoder layer of this kind without tensor parallelism
// (moe: the layer's FFN is the MoE block); nullptr where s is computed by an op of its own (the GDN
// recurrence, attention's projections, the router, ...).
const FusedOp* fused_op_of(Step s, LayerKind kind, bool moe);

// "gated_norm_matmul (gdn_norm -> mixer_out -> h_mid: gated RMSNorm, out_proj, + residual)"
std::string fused_op_words(const FusedOp& f);

}  // namespace degen
