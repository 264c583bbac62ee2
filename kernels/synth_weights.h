// Launcher of kernels/synth_weights.cu: random weights generated on the device (bench --synthetic),
// so a 27B-shaped model needs nothing from disk. Device pointers, caller's stream.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// p[i] = offset + scale * z_i with z_i approximately standard normal (a counter hash of (seed, key,
// i): Irwin-Hall sum of 4 uniforms), stored as `dtype` (bf16 or f32). Not the bytes of
// model/synth.cpp: only the scale matters for timing.
void fill_random_cuda(void* p, DType dtype, int64_t n, uint64_t seed, uint64_t key, float offset, float scale,
                      cudaStream_t stream);

}  // namespace degen::cuda
