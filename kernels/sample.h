// Launchers of kernels/sample.cu: the token sampler of src/engine/sampler.h run on the device, over
// one row of logits that is already there (no [V] copy to the host). Device pointers, caller's
// stream. src/cuda/sampler.cpp is the host side (validation, penalty id sets, scratch).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

struct DeviceSampling {
  double temperature = 0;
  int top_k = 0;
  double top_p = 1;
  double min_p = 0;
  double repetition_penalty = 1;
  double presence_penalty = 0;
  uint64_t seed = 0;
  uint32_t case_index = 0;
  uint32_t position = 0;
};

// Bytes of scratch the two launchers need for a vocabulary of V.
size_t sample_scratch_bytes(int64_t V);

// Steps 1-4 of sampler.h: the penalised logits x [V] fp64 in the scratch (banned and NaN removed as
// -inf; repetition penalty over rep_ids, then presence penalty over pres_ids: distinct, in-range
// ids), then the argmax over live x (lowest id on ties) -> *best (-1 when none is live) and the
// number of live ids -> *live (both device int32).
void sample_penalise_argmax_cuda(const void* logits, DType dtype, int64_t V, const uint8_t* banned,
                                 const int32_t* rep_ids, int n_rep, const int32_t* pres_ids, int n_pres,
                                 const DeviceSampling& p, void* scratch, int32_t* best, int32_t* live,
                                 cudaStream_t stream);

// Steps 5-11 after sample_penalise_argmax_cuda (temperature > 0, best >= 0): temperature, top-k,
// softmax, top-p, min-p, renormalisation, and the inverse-CDF draw with the Philox uniform of
// (seed; case, position, stream 0) drawn on the device -> *token (device int32).
// note: sums and prefix sums are parallel reductions/scans in fp64 (the CPU sums serially in
// ascending id order), so a boundary of top-p or of the CDF may fall the other way when the draw
// lies within ~1e-15 (relative) of it.
void sample_draw_cuda(int64_t V, int32_t best, int32_t live, const DeviceSampling& p, void* scratch, int32_t* token,
                      cudaStream_t stream);

}  // namespace degen::cuda
