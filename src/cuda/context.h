// CudaContext: one device, its stream, its cuBLAS handle and the device-memory accounting of the
// CUDA backend (DESIGN.md §2 "context (stream, cuBLAS, NCCL handles)"). Device buffers are
// reference-counted Tensor storage whose deleter frees them on the context's stream (stream-ordered
// allocator, so an op's scratch costs no device synchronisation); every buffer keeps the context
// alive, so tensors may outlive the backend that made them.
// Device selection: the global `--device N` option (set_default_device) or CUDA_VISIBLE_DEVICES.
// Tensor parallelism (tp > 1): one context per rank; the ranks' NCCL communicator is cuda/nccl_comm.h.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace degen::cuda {

// The device CUDA backends open (default 0); the CLI's global --device N sets it.
void set_default_device(int index);
int default_device();

// Why `index` cannot be used ("" when it can): no driver, no device, index out of range.
std::string device_unusable_reason(int index);

class CudaContext {
 public:
  // Opens device `index`: stream, cuBLAS handle (bound to the stream), the device's memory pool
  // kept across synchronisations. UntestableError when the device cannot be opened.
  static std::shared_ptr<CudaContext> open(int index);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  const cudaDeviceProp& props() const { return props_; }

  // `bytes` of device memory, freed on this stream when the last reference goes. UntestableError
  // naming the request, the backend's live bytes and the device's free memory when it fails.
  // note: the shared_ptr holds `self` (this context) so the stream outlives every buffer.
  static std::shared_ptr<uint8_t> alloc(const std::shared_ptr<CudaContext>& self, size_t bytes, const char* what);

  // Memory accounting of this context's buffers (in use; not the freed ones kept for reuse).
  int64_t live_bytes() const { return live_.load(); }
  int64_t peak_bytes() const { return peak_.load(); }
  // Device memory free and total now (cudaMemGetInfo), for messages and the fit check.
  void mem_info(int64_t* free_bytes, int64_t* total_bytes) const;

  void sync() const;  // cudaStreamSynchronize, with the check macro

  // While a CUDA graph is captured on this stream (cuda/graphs.h), buffers whose last reference
  // goes are freed when the capture ends: a cudaFreeAsync inside it would become part of the graph.
  void set_capturing(bool on);

 private:
  CudaContext() = default;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaDeviceProp props_{};
  std::atomic<int64_t> live_{0}, peak_{0};
  void* cublas_workspace_ = nullptr;
  std::mutex deferred_mutex_;
  std::atomic<bool> capturing_{false};  // written under deferred_mutex_; read first without it
  std::vector<std::pair<void*, size_t>> deferred_;  // (buffer, bytes) released during a capture
  std::mutex cache_mutex_;
  std::multimap<size_t, void*> cache_;  // size -> freed buffer, kept for the next request of that size
  int64_t cache_bytes_ = 0;             // under cache_mutex_
  void release(void* p, size_t n);
  void* take_cached(size_t n);
  void trim_cache();  // every cached buffer back to the device allocator
};

// "12.3 GiB"
std::string gib(int64_t bytes);

}  // namespace degen::cuda
