// One check-macro family for CUDA runtime and cuBLAS calls (STYLE.md principle 4): the failing call is
// stringified and reported with file, line and the library's error string, as an Error whose exit code
// is "untestable" (125) — a GPU failure says nothing about whether the engine under test is good or bad.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "util/error.h"

namespace degen::cuda {

[[noreturn]] void throw_cuda_error(const char* call, const char* file, int line, cudaError_t err);
[[noreturn]] void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t st);
// After a kernel launch: cudaGetLastError(), and with --sync-debug a device synchronise.
void check_launch(const char* kernel, const char* file, int line);
void set_sync_debug(bool on);

}  // namespace degen::cuda

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) ::degen::cuda::throw_cuda_error(#call, __FILE__, __LINE__, err_); \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t st_ = (call);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS) ::degen::cuda::throw_cublas_error(#call, __FILE__, __LINE__, st_); \
  } while (0)

#define CUDA_CHECK_LAUNCH(name) ::degen::cuda::check_launch(name, __FILE__, __LINE__)
