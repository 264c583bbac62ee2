// CudaContext (see context.h).
#include "cuda/context.h"

#include <cstdio>

#include "kernels/check.h"
#include "util/error.h"

namespace degen::cuda {

namespace {
int g_default_device = 0;

// Freed buffers kept for reuse, at most this many bytes per context (beyond it a freed buffer goes
// back to the stream-ordered pool). note: a decode step frees and asks for the same sizes every
// step; kept here, the steady state makes no allocation call at all (bench --count shows it). The
// reuse is ordered by the one stream every buffer of the context is used on, as cudaFreeAsync's
// would be. The cost: a use after free of a cached buffer reads its next owner's data instead of
// faulting on the emulator.
constexpr int64_t kCacheMaxBytes = int64_t(1) << 30;
}

void set_default_device(int index) { g_default_device = index; }
int default_device() { return g_default_device; }

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / 1073741824.0);
  return buf;
}

std::string device_unusable_reason(int index) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state
    return cat("no usable CUDA device: ", cudaGetErrorString(err));
  }
  if (n == 0) return "no CUDA device is visible";
  if (index < 0 || index >= n) return cat("--device ", index, " does not exist: ", n, " CUDA device(s) visible (0..", n - 1, ")");
  return "";
}

std::shared_ptr<CudaContext> CudaContext::open(int index) {
  std::string why = device_unusable_reason(index);
  if (!why.empty()) throw UntestableError(why);
  std::shared_ptr<CudaContext> c(new CudaContext());
  c->device_ = index;
  CUDA_CHECK(cudaSetDevice(index));
  CUDA_CHECK(cudaGetDeviceProperties(&c->props_, index));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&c->cublas_));
  CUBLAS_CHECK(cublasSetStream(c->cublas_, c->stream_));
  // A workspace of our own, so that cuBLAS allocates nothing inside a captured graph (graphs=on),
  // set for every run so that graphs=on and graphs=off choose the same algorithms. 32 MiB is the
  // size cuBLAS's documentation gives for Hopper (cublasSetWorkspace; 4 MiB before Hopper).
  // note: after cublasSetStream, which resets the workspace to cuBLAS's default pool.
  constexpr size_t kCublasWorkspace = size_t(32) << 20;
  if (cudaMalloc(&c->cublas_workspace_, kCublasWorkspace) != cudaSuccess) {
    cudaGetLastError();
    throw UntestableError(cat("CUDA device ", index, " out of memory for the cuBLAS workspace (", gib(kCublasWorkspace), ")"));
  }
  c->live_ += int64_t(kCublasWorkspace);
  c->peak_ = c->live_.load();
  CUBLAS_CHECK(cublasSetWorkspace(c->cublas_, c->cublas_workspace_, kCublasWorkspace));
  // note: the stream-ordered pool keeps freed memory for reuse instead of returning it at every
  // synchronisation (the default threshold 0 would make each decode step re-map its scratch).
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
  uint64_t threshold = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return c;
}

CudaContext::~CudaContext() {
  // note: errors are ignored here (the runtime may already be unloading at process exit).
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  for (auto& [n, p] : cache_) cudaFree(p);
}

void* CudaContext::take_cached(size_t n) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = cache_.find(n);
  if (it == cache_.end()) return nullptr;
  void* p = it->second;
  cache_.erase(it);
  cache_bytes_ -= int64_t(n);
  return p;
}

void CudaContext::trim_cache() {
  std::multimap<size_t, void*> all;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    all.swap(cache_);
    cache_bytes_ = 0;
  }
  for (auto& [n, p] : all) cudaFreeAsync(p, stream_);  // note: errors ignored, as in release()
}

void CudaContext::mem_info(int64_t* free_bytes, int64_t* total_bytes) const {
  size_t f = 0, t = 0;
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  if (free_bytes) *free_bytes = static_cast<int64_t>(f);
  if (total_bytes) *total_bytes = static_cast<int64_t>(t);
}

void CudaContext::sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

std::shared_ptr<uint8_t> CudaContext::alloc(const std::shared_ptr<CudaContext>& self, size_t bytes, const char* what) {
  // note: at least 256 bytes, so an empty tensor still has a non-null buffer (Tensor::empty()).
  // sizes rounded up to 256 bytes, so that near sizes share cached buffers
  const size_t n = bytes < 256 ? 256 : (bytes + 255) / 256 * 256;
  void* p = self->take_cached(n);
  cudaError_t err = cudaSuccess;
  if (!p) {
    err = cudaMallocAsync(&p, n, self->stream_);
    if (err != cudaSuccess) {  // the cache may hold what is missing: return it and try once more
      cudaGetLastError();
      self->trim_cache();
      err = cudaMallocAsync(&p, n, self->stream_);
    }
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    int64_t f = 0, t = 0;
    size_t fs = 0, ts = 0;
    if (cudaMemGetInfo(&fs, &ts) == cudaSuccess) { f = int64_t(fs); t = int64_t(ts); }
    throw UntestableError(cat("CUDA device ", self->device_, " out of memory: ", what, " needs ", gib(int64_t(n)),
                              "; this backend holds ", gib(self->live_bytes()), ", the device has ", gib(f), " free of ",
                              gib(t), " (", cudaGetErrorString(err), ")"));
  }
  const int64_t live = self->live_.fetch_add(int64_t(n)) + int64_t(n);
  int64_t peak = self->peak_.load();
  while (live > peak && !self->peak_.compare_exchange_weak(peak, live)) {}
  std::shared_ptr<CudaContext> keep = self;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [keep, n](uint8_t* q) { keep->release(q, n); });
}

void CudaContext::release(void* p, size_t n) {
  // note: every buffer's deleter comes here; only during a capture does it take the lock
  if (capturing_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    if (capturing_.load(std::memory_order_relaxed)) {
      deferred_.emplace_back(p, n);
      return;
    }
  }
  live_.fetch_sub(int64_t(n));
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_bytes_ + int64_t(n) <= kCacheMaxBytes) {
      cache_.emplace(n, p);
      cache_bytes_ += int64_t(n);
      return;
    }
  }
  cudaFreeAsync(p, stream_);  // note: errors ignored (deleters must not throw)
}

void CudaContext::set_capturing(bool on) {
  std::vector<std::pair<void*, size_t>> now;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    capturing_.store(on, std::memory_order_release);
    if (!on) now.swap(deferred_);
  }
  for (auto& [p, n] : now) release(p, n);
}

}  // namespace degen::cuda
