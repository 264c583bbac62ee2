// Error reporting for the CUDA check macros.
#include "kernels/check.h"

namespace degen::cuda {

namespace {
bool g_sync_debug = false;
}

void set_sync_debug(bool on) { g_sync_debug = on; }

void throw_cuda_error(const char* call, const char* file, int line, cudaError_t err) {
  throw UntestableError(cat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", call, " at ",
                            file, ":", line));
}

void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t st) {
  throw UntestableError(cat("cuBLAS error ", cublasGetStatusName(st), " (", cublasGetStatusString(st), ") in ", call,
                            " at ", file, ":", line));
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(kernel, file, line, err);
  if (g_sync_debug) {
    err = cudaDeviceSynchronize();
    if (err != cudaSuccess) throw_cuda_error(kernel, file, line, err);
  }
}

}  // namespace degen::cuda
