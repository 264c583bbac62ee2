// Noise-floor classes (metrics.md §1): which floor a tested configuration is judged with.
#pragma once
#include <cstdint>

#include "engine/run_config.h"

namespace degen {

// Noise floors (metrics.md §1) come in two classes, because a fixed threshold cannot serve both a
// bf16 path and an fp32 path, and neither can one floor:
//   bf16: the isolated error of a known-good low-precision run (precision=bf16: bf16 activations,
//         fp32 state, exact attention) against the golden; for GPU paths and anything storing
//         activations or state below fp32;
//   fp32: the golden reference's own round-off, the isolated error of the other high precision
//         (precision=fp64 for an fp32 record, fp32 for an fp64 one) against the golden (PyTorch's
//         same() compares with 2-3x the reference's error against fp64); for CPU ref/fp64 paths,
//         which must agree with the reference to fp32 round-off.
// A bf16 floor of a layer is dominated by the bf16 storage of the residual stream, so the bf16 class
// cannot see a few-percent error inside one layer (a 5 % weight change gives 2-5x floor, attention
// o_proj less than 3x); the fp32 class sees it at ~1e4-1e5x.
enum class FloorClass : uint8_t { bf16 = 0, fp32 = 1 };
const char* floor_class_name(FloorClass c);  // "bf16", "fp32"
// The class a tested configuration is judged with: fp32 for the CPU backend at precision ref or fp64
// and for the reference on the GPU (backend=cuda,precision=ref), with no storage or attention toggle
// (gdn, sampling, batch, mtp and faults keep it fp32), else bf16.
FloorClass floor_class_for(const RunConfig& rc);

}  // namespace degen
