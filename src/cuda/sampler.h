// The shared token sampler (src/engine/sampler.h) on the device: the same steps, comparisons and
// Philox draw as degen::sample(), over one row of device logits, so a GPU path need not copy [V]
// logits to the host. It returns the token sample() returns wherever the two distributions agree
// (sums on the device are parallel fp64 reductions, so a draw within ~1e-15 of a CDF or top-p
// boundary may fall the other way; see kernels/sample.h). Generation on backend=cuda samples
// through it (CudaBackend::sample_row); tests/cuda/test_sample_cuda.cpp checks it against sample().
#pragma once
#include <cstdint>
#include <span>

#include "engine/sampler.h"
#include "engine/tensor.h"

namespace degen {
class CudaBackend;

namespace cuda {

// Row `row` of logits [rows, V] (bf16 or f32, on be's device); banned [V] or empty, prompt_ids /
// generated_ids and case_index / position as for sample(). Throws InputError as sample() does (bad
// parameters, every id banned). Synchronises the backend's stream (the token comes back to the host).
int32_t sample_on_device(CudaBackend& be, const SamplingParams& params, const Tensor& logits, int64_t row,
                         std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                         std::span<const int32_t> generated_ids, uint32_t case_index, uint32_t position);

}  // namespace cuda
}  // namespace degen
