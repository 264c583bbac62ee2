// Launchers of kernels/layout.cu: dtype casts and row/column layout ops on device buffers
// (device pointers, caller's stream). Mirrors the layout ops of src/cpu/cpu_backend.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// dst[i] = src[i] converted from `sd` to `dd` (float dtypes; rounded to nearest, e4m3 saturating).
void convert_cuda(const void* src, DType sd, void* dst, DType dd, int64_t n, cudaStream_t stream);

// out[r, j] = x[r, cols[j]]  (x [R, C], out [R, n], element size es; cols: device int64 [n]).
void gather_cols_cuda(const void* x, int64_t R, int64_t C, const int64_t* cols, int64_t n, void* out, size_t es,
                      cudaStream_t stream);

// out[i, :] = x[rows[i], :]  (x [R, C], out [n, C]; rows: device int64 [n]).
void gather_rows_cuda(const void* x, int64_t C, const int64_t* rows, int64_t n, void* out, size_t es,
                      cudaStream_t stream);

// out[rows[i], :] += round(w[i] * y[i, :]), each product and each sum rounded to out's dtype (bf16
// or f32), rows in order. `unique`: no row repeats, so the rows are processed in parallel.
void scatter_add_rows_cuda(void* out, const void* y, DType dtype, int64_t C, const int64_t* rows, const float* w,
                           int64_t n, bool unique, cudaStream_t stream);

}  // namespace degen::cuda
