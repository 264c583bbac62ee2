// The fault catalogue (DESIGN.md §7): named, layer-targetable bug classes that real engines have
// shipped for this model family. A fault is a deviation of ONE op of the forward pass (not a second
// model), selected with the toggle `fault=NAME[@layers]` and honoured by every backend. It is the
// ground truth of the test suite: inject fault X at layer L, the tool must name X's op at L.
#pragma once
#include <string>
#include <vector>

namespace degen {

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
  const char* name;         // toggle value: fault=NAME
  FaultSite site;
  const char* op;           // the trace step (src/engine/trace.h) whose output it corrupts first
  const char* description;  // one line: what the buggy engine does
  const char* source;       // the public report it mirrors (../shared/spec/model.md §8)
  // The fault shows only on activations of a size small models do not reach (e.g. fp16 overflow
  // of the GDN readout needs |o| > 65504); selftest reports it as skipped, not failed, where the
  // injected run stays good.
  bool magnitude_dependent = false;
};

const std::vector<FaultInfo>& fault_catalogue();
const FaultInfo* find_fault(const std::string& name);  // nullptr when unknown

}  // namespace degen
