// Launchers of kernels/convert.cu (device pointers, caller's stream).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace degen::cuda {

// bf16/f16/e4m3 bit patterns of each x[i], rounded as the CUDA backend stores them.
void round_dtypes_f32_cuda(const float* x, uint16_t* bf16, uint16_t* f16, uint8_t* e4m3, size_t n,
                           cudaStream_t stream);

}  // namespace degen::cuda
