// Noise-floor classes (floor_class.h).
#include "record/floor_class.h"

namespace degen {

const char* floor_class_name(FloorClass c) { return c == FloorClass::bf16 ? "bf16" : "fp32"; }

FloorClass floor_class_for(const RunConfig& rc) {
  if ((rc.backend != BackendKind::cpu && !rc.cuda_reference()) || rc.precision == Precision::bf16 ||
      rc.precision == Precision::q8_0)
    return FloorClass::bf16;
  // Any other toggle that differs from its default (storage dtypes, attention algorithm, tensor
  // parallelism on the CPU, CUDA-only keys of the GPU path) makes the path lower-precision than the
  // reference, unless the registry marks it precision-neutral (Toggle::floor: gdn, sampling, batch,
  // mtp, faults; and the reference on the GPU, backend=cuda,precision=ref, is fp32 whatever its
  // matrix product, graphs or tensor parallelism: fp32 partial sums, summed in fp32).
  const RunConfig neutral = without_toggles(rc, [&](const Toggle& t) { return t.floor_neutral(rc); });
  return neutral.str() == RunConfig{}.str() ? FloorClass::fp32 : FloorClass::bf16;
}

}  // namespace degen
