// The CUDA emulator's own tests: each check it claims (tests/emu/README.md) is shown to fire on a
// kernel with that bug, and the pieces the project's kernels rely on (shuffles, barriers, shared
// memory, CUB's orderings, cuBLAS's column-major GEMM) are shown to compute what CUDA defines.
// Compiled through tests/emu/rewrite.cmake like kernels/*.cu, so it is C++ for the emulator only.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <cub/cub.cuh>
#include <cublas_v2.h>
#include <mma.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>

#include "kernels/common.cuh"
#include "cuda/device_counters.h"
#include <string>
#include <vector>

namespace {

__global__ void warp_sums(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

// warp_sum / warp_max as the emulator computes them (one meeting point, ::emu::warp_reduce) against
// the five shuffles they stand for, on the same values.
__global__ void warp_reductions(const float* x, float* out) {
  const float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  float s = v, m = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float* o4 = out + 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  o4[0] = s;
  o4[1] = degen::cuda::warp_sum(v);
  o4[2] = m;
  o4[3] = degen::cuda::warp_max(v);
}

// block_sum / block_max as the emulator computes them (one meeting point, ::emu::block_reduce)
// against the code they stand for (kernels/common.cuh without the emulator: shuffles, scratch,
// two __syncthreads), which the emulator runs as written here, on the same values.
__global__ void block_reductions(const float* x, float* out) {
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  const float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  float s = v, m = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  s = lane < nw ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  m = lane < nw ? scratch[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float* o4 = out + 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  o4[0] = s;
  o4[1] = degen::cuda::block_sum(v, scratch);
  o4[2] = m;
  o4[3] = degen::cuda::block_max(v, scratch);
}

__global__ void divergent_block_sum(float* out) {  // a thread that returns never reaches the barrier
  __shared__ float scratch[32];
  if (threadIdx.x == 40) return;
  out[threadIdx.x] = degen::cuda::block_sum(1.0f, scratch);
}

__global__ void block_sum_beside_barrier(float* out) {  // half the block at another barrier
  __shared__ float scratch[32];
  if (threadIdx.x < 32) __syncthreads();
  else out[threadIdx.x] = degen::cuda::block_sum(1.0f, scratch);
}

// Of n records of 4 floats (a reference, the emulator's value, a reference, the emulator's value),
// how many have both pairs equal bit for bit.
int pairs_bit_equal(const std::vector<float>& y, int n) {
  int same = 0;
  for (int i = 0; i < n; ++i) {
    const float* r = &y[size_t(i) * 4];
    same += std::memcmp(&r[0], &r[1], 4) == 0 && std::memcmp(&r[2], &r[3], 4) == 0;
  }
  return same;
}

__global__ void divergent_warp_sum(float* out) {
  if (threadIdx.x % 32 >= 20) return;
  out[threadIdx.x] = degen::cuda::warp_sum(1.0f);
}

__global__ void block_reverse(const int* x, int* out, int n) {
  __shared__ int s[1024];
  const int i = threadIdx.x;
  s[i] = x[i];
  __syncthreads();
  out[i] = s[n - 1 - i];
}

__global__ void racy_reverse(const int* x, int* out, int n) {  // the barrier is missing
  __shared__ int s[1024];
  const int i = threadIdx.x;
  s[i] = x[i] + 1000 * blockIdx.x;
  out[i] = s[n - 1 - i];
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, float(threadIdx.x), 1);
}

__global__ void dyn_smem_first_read(float* out) {
  extern __shared__ float smem[];
  out[blockIdx.x] = smem[threadIdx.x];  // never written: NaN in the emulator
}

__global__ void write_at(float* p, int i) { p[i] = 1.0f; }

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

// Warp w: D_w = A (16 x 32, row-major) B (32 x 16) + C (16 x 16, row-major), B read column-major by
// warp 0 (bc: element (k, n) at bc[n * 32 + k]) and row-major by warp 1 (br: at br[k * 16 + n]);
// D stored column-major by warp 0, row-major by warp 1.
__global__ void wmma_products(const bf16* a, const bf16* bc, const bf16* br, const float* c, float* d) {
  const int w = threadIdx.x / 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
  for (int k = 0; k < 32; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k, 32);
    if (w == 0) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
      wmma::load_matrix_sync(fb, bc + k, 32);
      wmma::mma_sync(acc, fa, fb, acc);
    } else {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, br + k * 16, 16);
      wmma::mma_sync(acc, fa, fb, acc);
    }
  }
  wmma::store_matrix_sync(d + w * 256, acc, 16, w == 0 ? wmma::mem_col_major : wmma::mem_row_major);
}

// Each lane writes 8 elements of a 16 x 16 tile into shared memory, then (sync) a __syncwarp, then
// the warp loads the tile as A and multiplies it by the identity (eye): out = the tile, or stale values.
__global__ void wmma_after_lane_writes(const bf16* x, const bf16* eye, float* out, bool sync) {
  extern __shared__ bf16 tile[];
  const int lane = threadIdx.x;
  for (int i = 0; i < 8; ++i) tile[(lane * 8 + i + 37) % 256] = x[(lane * 8 + i + 37) % 256];
  if (sync) __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, tile, 16);
  wmma::load_matrix_sync(fb, eye, 16);
  wmma::fill_fragment(acc, 0.0f);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

__global__ void wmma_misaligned(const bf16* a, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a + 1, 16);  // 2 bytes past a 256-bit boundary
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

__global__ void wmma_divergent(const bf16* a, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, a, 16);
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x < 16) wmma::mma_sync(acc, fa, fb, acc);  // half the warp
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess); }
  ~Buf() { cudaFree(p); }
  template <typename T> T* as() { return static_cast<T*>(p); }
};

template <typename T>
std::vector<T> down(const T* d, size_t n) {
  std::vector<T> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

// Runs f in a child process; returns its signal (0 if it exited) and what it wrote to stderr.
template <typename F>
std::pair<int, std::string> in_child(F f) {
  int fd[2];
  REQUIRE(pipe(fd) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    f();
    _exit(0);
  }
  close(fd[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFSIGNALED(st) ? WTERMSIG(st) : 0, err};
}

}  // namespace

namespace emu {
void set_reverse_order(bool on);
}

TEST_CASE("emu: a full-mask xor shuffle gives every lane the warp's sum") {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i);
  Buf dx(64 * 4), dy(64 * 4);
  REQUIRE(cudaMemcpy(dx.p, x.data(), 64 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  warp_sums<<<1, 64>>>(dx.as<float>(), dy.as<float>());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto y = down(dy.as<float>(), 64);
  CHECK(y[0] == 496.0f);   // 0 + ... + 31
  CHECK(y[31] == 496.0f);
  CHECK(y[32] == 1520.0f);  // 32 + ... + 63
  CHECK(y[63] == 1520.0f);
}

TEST_CASE("emu: warp_sum and warp_max at one meeting point equal their five shuffles bit for bit") {
  // values of mixed magnitude and sign, so that the order of the additions shows in the last bits;
  // +0 and -0, an infinity and a NaN in the last warp
  const int n = 4 * 64;
  std::vector<float> x(n);
  uint32_t s = 12345;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[size_t(i)] = std::ldexp(float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23), int(s % 40) - 20);
  }
  x[size_t(n - 64)] = 0.0f;
  x[size_t(n - 63)] = -0.0f;
  x[size_t(n - 40)] = INFINITY;
  x[size_t(n - 2)] = NAN;
  Buf dx(n * 4), dy(n * 16);
  REQUIRE(cudaMemcpy(dx.p, x.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  for (bool rev : {false, true}) {
    emu::set_reverse_order(rev);
    warp_reductions<<<4, 64>>>(dx.as<float>(), dy.as<float>());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto y = down(dy.as<float>(), size_t(n) * 4);
    CHECK(pairs_bit_equal(y, n) == n);
    CHECK(y[0] != y[4 * 32]);  // two warps, two sums
  }
  emu::set_reverse_order(false);
  // every lane must arrive, as at the shuffles
  Buf d(1024);
  divergent_warp_sum<<<1, 64>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("emu: block_sum and block_max at one meeting point give the bits of shuffles and barriers") {
  for (int threads : {32, 96, 256, 1024}) {
    CAPTURE(threads);
    const int blocks = 3, n = blocks * threads;
    std::vector<float> x(static_cast<size_t>(n));
    uint32_t seed = 12345u + static_cast<uint32_t>(threads);
    for (float& v : x) {  // magnitudes over many binades: a different order of sums would show
      seed = seed * 1664525u + 1013904223u;
      v = std::ldexp(float(seed >> 8) / float(1 << 24) - 0.5f, int(seed % 23) - 11);
    }
    Buf dx(size_t(n) * 4), dy(size_t(n) * 16);
    REQUIRE(cudaMemcpy(dx.p, x.data(), size_t(n) * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    for (bool rev : {false, true}) {
      emu::set_reverse_order(rev);
      block_reductions<<<blocks, threads>>>(dx.as<float>(), dy.as<float>());
      REQUIRE(cudaGetLastError() == cudaSuccess);
      const auto y = down(dy.as<float>(), size_t(n) * 4);
      CHECK(pairs_bit_equal(y, n) == n);
      CHECK(y[0] != y[size_t(4) * threads]);  // two blocks, two sums
    }
    emu::set_reverse_order(false);
  }
  // every thread must arrive, and at the same barrier
  Buf d(4096);
  divergent_block_sum<<<1, 64>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
  block_sum_beside_barrier<<<1, 64>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("emu: __syncthreads orders shared memory, and without it the result depends on thread order") {
  const int n = 256;
  std::vector<int> x(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = i;
  Buf dx(n * 4), dy(n * 4);
  REQUIRE(cudaMemcpy(dx.p, x.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  for (bool rev : {false, true}) {
    emu::set_reverse_order(rev);
    block_reverse<<<1, n>>>(dx.as<int>(), dy.as<int>(), n);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto y = down(dy.as<int>(), n);
    CHECK(y[0] == n - 1);
    CHECK(y[size_t(n - 1)] == 0);
  }
  // the racy kernel: two blocks, so the second reads the first block's stale values in one order
  std::vector<int> fwd, rev;
  for (bool r : {false, true}) {
    emu::set_reverse_order(r);
    racy_reverse<<<2, n>>>(dx.as<int>(), dy.as<int>(), n);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    (r ? rev : fwd) = down(dy.as<int>(), n);
  }
  emu::set_reverse_order(false);
  CHECK(fwd != rev);
}

TEST_CASE("emu: a barrier some threads never reach and a shuffle in a partial warp are launch failures") {
  Buf d(1024);
  divergent_barrier<<<1, 64>>>(d.as<int>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  partial_warp_shuffle<<<1, 48>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);  // read and cleared
}

TEST_CASE("emu: launch limits and pointer arguments are checked") {
  Buf d(4096);
  write_at<<<1, 1025>>>(d.as<float>(), 0);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  write_at<<<dim3(1, 70000), 32>>>(d.as<float>(), 0);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  float host = 0;
  write_at<<<1, 1>>>(&host, 0);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(host == 0.0f);
  // dynamic shared memory above 48 KiB needs the kernel's attribute, and the memory starts as NaN
  dyn_smem_first_read<<<2, 32, 64 * 1024>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(dyn_smem_first_read, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) ==
          cudaSuccess);
  dyn_smem_first_read<<<2, 32, 64 * 1024>>>(d.as<float>());
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(std::isnan(down(d.as<float>(), 2)[1]));
  CHECK(cudaFuncSetAttribute(dyn_smem_first_read, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
        cudaErrorInvalidValue);
}

TEST_CASE("emu: copies check which side is device memory and its extent") {
  Buf d(100);
  std::vector<char> h(200);
  CHECK(cudaMemcpy(d.p, h.data(), 100, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(d.p, h.data(), 101, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // past the end
  CHECK(cudaMemcpy(h.data(), d.p, 100, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // sides swapped
  CHECK(cudaMemcpy(h.data(), d.p, 100, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaGetLastError();
}

TEST_CASE("emu: a kernel writing past its buffer fails its launch, or dies at the access, named") {
  {  // one element past (within the alignment slack): the canary fails the launch
    Buf d(1000 * sizeof(float));
    write_at<<<1, 1>>>(d.as<float>(), 999);  // the last element: fine
    CHECK(cudaGetLastError() == cudaSuccess);
    write_at<<<1, 1>>>(d.as<float>(), 1000);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    write_at<<<1, 1>>>(d.as<float>(), 0);  // the canary was restored: later launches are clean
    CHECK(cudaGetLastError() == cudaSuccess);
    Buf small(64);  // (a 64-byte buffer ends its page, so the word before it is canary, not guard)
    write_at<<<1, 1>>>(small.as<float>(), -1);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  }
  // a page past the end: the guard page stops the write itself
  auto [sig, err] = in_child([] {
    void* p = nullptr;
    cudaMalloc(&p, 1000 * sizeof(float));
    write_at<<<1, 1>>>(static_cast<float*>(p), 1000 + 1024);
  });
  CHECK(sig == SIGSEGV);
  CHECK_MESSAGE(err.find("in kernel write_at, block (0,0,0), thread (0,0,0)") != std::string::npos, err);
  CHECK_MESSAGE(err.find("past the end of a 4000-byte device allocation") != std::string::npos, err);
  auto [sig2, err2] = in_child([] {
    void* p = nullptr;
    cudaMalloc(&p, 64);
    write_at<<<1, 1>>>(static_cast<float*>(p), -1100);  // 4400 bytes before: the guard page
  });
  CHECK(sig2 == SIGSEGV);
  CHECK_MESSAGE(err2.find("before the start of a 64-byte device allocation") != std::string::npos, err2);
}

TEST_CASE("emu: freed device memory faults when touched, and a new allocation starts as garbage again") {
  {  // freed memory is kept for reuse: an allocation of the same size starts as 0xA5 bytes again
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, 1000 * sizeof(float)) == cudaSuccess);
    write_at<<<1, 1>>>(static_cast<float*>(p), 7);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    REQUIRE(cudaFree(p) == cudaSuccess);
    write_at<<<1, 1>>>(static_cast<float*>(p), 7);  // a freed pointer as an argument
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
    Buf again(1000 * sizeof(float));
    const auto bytes = down(again.as<unsigned char>(), 1000 * sizeof(float));
    CHECK(std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0xA5; }));
  }
  auto [sig, err] = in_child([] {  // a use after free: the access itself faults
    void* p = nullptr;
    cudaMalloc(&p, 1000 * sizeof(float));
    cudaFree(p);
    static_cast<volatile float*>(p)[10] = 1.0f;
  });
  CHECK(sig == SIGSEGV);
}

TEST_CASE("emu: cuBLAS GemmEx is column-major with op(A) op(B), and checks the extents it touches") {
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  // A 2x3 column-major = [[1,2,3],[4,5,6]]; B 3x2 = [[1,0],[0,1],[1,1]]; C = A B = [[4,5],[10,11]]
  const std::vector<float> a = {1, 4, 2, 5, 3, 6}, b = {1, 0, 1, 0, 1, 1};
  Buf da(24), db(24), dc(16);
  cudaMemcpy(da.p, a.data(), 24, cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, b.data(), 24, cudaMemcpyHostToDevice);
  const float one = 1, zero = 0;
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da.p, CUDA_R_32F, 2, db.p, CUDA_R_32F, 3, &zero,
                       dc.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(down(dc.as<float>(), 4) == std::vector<float>{4, 10, 5, 11});
  // Aᵀ read from the same bytes as a 3x2 matrix with lda 3: C = Aᵀ(3x2)ᵀ ... = [[1,2],[3,4],[5,6]]ᵀ B'
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 3, &one, da.p, CUDA_R_32F, 3, db.p, CUDA_R_32F, 3, &zero,
                       dc.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  // op(A) = (3x2 col-major [1,4,2 | 5,3,6])ᵀ = [[1,4,2],[5,3,6]]; times b[:,0] = [1,0,1]: [3, 11]
  CHECK(down(dc.as<float>(), 2) == std::vector<float>{3, 11});
  // C too small for m x n
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 3, &one, da.p, CUDA_R_32F, 2, db.p, CUDA_R_32F, 3, &zero,
                     dc.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  // a leading dimension below the rows
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da.p, CUDA_R_32F, 1, db.p, CUDA_R_32F, 3, &zero,
                     dc.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(h);
}

TEST_CASE("emu: CUB's descending radix sort is stable and orders -0.0 below +0.0") {
  const std::vector<double> k = {1.0, -0.0, 2.0, 0.0, 1.0, -INFINITY};
  const std::vector<int> v = {0, 1, 2, 3, 4, 5};
  Buf dk(48), dk2(48), dv(24), dv2(24), tmp(256);
  cudaMemcpy(dk.p, k.data(), 48, cudaMemcpyHostToDevice);
  cudaMemcpy(dv.p, v.data(), 24, cudaMemcpyHostToDevice);
  size_t bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, dk.as<double>(), dk2.as<double>(), dv.as<int>(),
                                                    dv2.as<int>(), 6) == cudaSuccess);
  REQUIRE(bytes <= 256);
  REQUIRE(cub::DeviceRadixSort::SortPairsDescending(tmp.p, bytes, dk.as<double>(), dk2.as<double>(), dv.as<int>(),
                                                    dv2.as<int>(), 6) == cudaSuccess);
  CHECK(down(dv2.as<int>(), 6) == std::vector<int>{2, 0, 4, 3, 1, 5});
}

TEST_CASE("emu: streams and pointers belong to one device") {
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  if (n < 2) return;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  Buf on1(64);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  write_at<<<1, 1>>>(on1.as<float>(), 0);  // device 1's memory from device 0
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  cudaStream_t s1;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&s1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Buf on0(64);
  write_at<<<1, 1, 0, s1>>>(on0.as<float>(), 0);  // device 1's stream while device 0 is current
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  cudaStreamDestroy(s1);
}

namespace {
__global__ void add_scalar(float* p, float v, int n) {
  const int i = threadIdx.x;
  if (i < n) p[i] += v;
}
}  // namespace

TEST_CASE("emu: a captured graph runs nothing until launched, then replays the arguments of the capture") {
  cudaStream_t s;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  Buf d(4 * sizeof(float));
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)) == cudaSuccess);
  for (int i = 0; i < 4; ++i) pinned[i] = float(i);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaStreamCaptureStatus st;
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  CHECK(st == cudaStreamCaptureStatusActive);
  REQUIRE(cudaMemcpyAsync(d.p, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  float v = 10.0f;
  add_scalar<<<1, 4, 0, s>>>(d.as<float>(), v, 4);
  v = 1000.0f;  // a graph keeps the value an argument had at capture
  cudaGraph_t g;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t ex;
  REQUIRE(cudaGraphInstantiate(&ex, g, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
  REQUIRE(cudaMemset(d.p, 0, 4 * sizeof(float)) == cudaSuccess);
  CHECK(down(d.as<float>(), 4) == std::vector<float>{0, 0, 0, 0});  // captured, not run
  REQUIRE(cudaGraphLaunch(ex, s) == cudaSuccess);
  CHECK(down(d.as<float>(), 4) == std::vector<float>{10, 11, 12, 13});
  for (int i = 0; i < 4; ++i) pinned[i] = float(100 * i);  // the copy node reads the pinned buffer at launch
  REQUIRE(cudaGraphLaunch(ex, s) == cudaSuccess);
  CHECK(down(d.as<float>(), 4) == std::vector<float>{10, 110, 210, 310});
  REQUIRE(cudaGraphExecDestroy(ex) == cudaSuccess);
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
  cudaStreamDestroy(s);
}

TEST_CASE("emu: a synchronisation, an allocation or a pageable copy in a capture invalidates it") {
  cudaStream_t s;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  Buf d(16);
  std::vector<float> pageable(4, 1.0f);
  struct Case { const char* what; cudaError_t (*call)(cudaStream_t, void*, void*); };
  const Case cases[] = {
      {"sync", [](cudaStream_t st, void*, void*) { return cudaStreamSynchronize(st); }},
      {"malloc", [](cudaStream_t st, void*, void*) { void* p; return cudaMallocAsync(&p, 64, st); }},
      {"pageable", [](cudaStream_t st, void* dev, void* host) {
         return cudaMemcpyAsync(dev, host, 16, cudaMemcpyHostToDevice, st); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(c.call(s, d.p, pageable.data()) == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr);
    cudaGetLastError();
  }
  cudaStreamDestroy(s);
}

namespace {
__global__ void copy_n(const float* x, float* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}
__global__ void read_thrice(const float* x, float* y, int n) {
  float s = 0;
  for (int r = 0; r < 3; ++r)
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  if (threadIdx.x == 0) y[0] = s;
}
__global__ void add_one(float* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] += 1.0f;
}
}  // namespace

TEST_CASE("emu: counting: each call's distinct bytes read and written, launches, copies, allocations, syncs") {
  using degen::cuda::DeviceCounters;
  REQUIRE(degen::cuda::counters_supported());
  constexpr int kN = 1 << 20;  // floats: 4 MiB, a whole number of pages, so the buffers start on a page
  Buf x(kN * sizeof(float)), y(kN * sizeof(float));
  std::vector<float> h(kN);
  for (int i = 0; i < kN; ++i) h[size_t(i)] = float(i % 1000);
  REQUIRE(cudaMemcpy(x.p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  const int64_t kMiB = 1 << 20;

  degen::cuda::counters_start();
  copy_n<<<1, 128>>>(x.as<float>(), y.as<float>(), kN / 4);  // 1 MiB read, 1 MiB written
  REQUIRE(cudaGetLastError() == cudaSuccess);
  DeviceCounters a = degen::cuda::counters_read();
  CHECK(a.launches == 1);
  CHECK(a.bytes_read == kMiB);
  CHECK(a.bytes_written == kMiB);
  copy_n<<<1, 128>>>(x.as<float>(), y.as<float>(), kN / 4);  // again: the pages were closed in between
  read_thrice<<<1, 128>>>(x.as<float>(), y.as<float>(), kN / 2);  // 2 MiB once, however often read; 1 page written
  add_one<<<1, 128>>>(y.as<float>(), kN / 4);  // read and written
  DeviceCounters b = degen::cuda::counters_diff(degen::cuda::counters_read(), a);
  CHECK(b.launches == 3);
  CHECK(b.bytes_read == kMiB + 2 * kMiB + kMiB);
  CHECK(b.bytes_written == kMiB + 4096 + kMiB);
  REQUIRE(b.by_name.size() == 3);
  CHECK(b.by_name[0].name == "read_thrice");
  CHECK(b.by_name[0].bytes_read == 2 * kMiB);

  // cuBLAS: A [64 x 4096] and B [4096 x 1] read whole, C written; a copy each way; an allocation
  const DeviceCounters c0 = degen::cuda::counters_read();
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 64, 1, 4096, &one, x.p, CUDA_R_32F, 4096, y.p, CUDA_R_32F,
                       4096, &zero, static_cast<float*>(y.p) + kN / 2, CUDA_R_32F, 64, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  void* z = nullptr;
  REQUIRE(cudaMalloc(&z, 8192) == cudaSuccess);
  REQUIRE(cudaMemcpy(z, h.data(), 8192, cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<float> back(2048);
  REQUIRE(cudaMemcpy(back.data(), z, 8192, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaFree(z) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  const DeviceCounters c = degen::cuda::counters_diff(degen::cuda::counters_read(), c0);
  CHECK(c.blas_calls == 1);
  CHECK(c.launches == 0);
  CHECK(c.allocs == 1);
  CHECK(c.frees == 1);
  CHECK(c.copies_h2d == 1);
  CHECK(c.copies_d2h == 1);
  CHECK(c.bytes_h2d == 8192);
  CHECK(c.pageable_copies == 2);
  CHECK(c.host_syncs == 3);  // two blocking copies and the stream synchronisation
  // the product: 64 x 4096 floats of A (1 MiB) + 4096 of B (16 KiB) read, 64 floats of C written (one
  // page's overlap is the page); the H2D copy writes 8 KiB, the D2H copy reads them
  CHECK(c.bytes_read == kMiB + 16384 + 8192);
  CHECK(c.bytes_written == 4096 + 8192);
  degen::cuda::counters_stop();
  CHECK(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);

  // counting changed nothing: the values are what they would be, and memory is open again
  const std::vector<float> got = down(y.as<float>(), kN / 4);
  bool same = true;
  for (int i = 1; i < kN / 4; ++i) same &= got[size_t(i)] == h[size_t(i)] + 1.0f;  // y[0]: read_thrice's sum
  CHECK(same);
  copy_n<<<1, 128>>>(x.as<float>(), y.as<float>(), 16);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(degen::cuda::counters_read().launches == 4);  // what was counted stays; nothing after the stop
}

TEST_CASE("emu: wmma m16n16k16 bf16 products in both layouts, D = A B + C") {
  // small multiples of 1/4: every product and sum is exact in fp32, whatever the order
  std::vector<bf16> a(16 * 32), bc(32 * 16), br(32 * 16);
  std::vector<float> c(256), want(256);
  auto val = [](int i, int m) { return float((i * 7 + m) % 9 - 4) * 0.25f; };
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 32; ++k) a[size_t(r * 32 + k)] = __float2bfloat16(val(r * 32 + k, 1));
  for (int k = 0; k < 32; ++k)
    for (int n = 0; n < 16; ++n) {
      bc[size_t(n * 32 + k)] = br[size_t(k * 16 + n)] = __float2bfloat16(val(k * 16 + n, 5));
    }
  for (int i = 0; i < 256; ++i) c[size_t(i)] = val(i, 3);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      double s = c[size_t(r * 16 + n)];
      for (int k = 0; k < 32; ++k) s += double(val(r * 32 + k, 1)) * double(val(k * 16 + n, 5));
      want[size_t(r * 16 + n)] = float(s);
    }
  Buf da(a.size() * 2), dbc(bc.size() * 2), dbr(br.size() * 2), dc(256 * 4), dd(512 * 4);
  REQUIRE(cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dbc.p, bc.data(), bc.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dbr.p, br.data(), br.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dc.p, c.data(), 256 * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  wmma_products<<<1, 64>>>(da.as<bf16>(), dbc.as<bf16>(), dbr.as<bf16>(), dc.as<float>(), dd.as<float>());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto d = down(dd.as<float>(), 512);
  int bad_col = 0, bad_row = 0;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      bad_col += d[size_t(n * 16 + r)] != want[size_t(r * 16 + n)];        // warp 0 stored column-major
      bad_row += d[size_t(256 + r * 16 + n)] != want[size_t(r * 16 + n)];  // warp 1 row-major
    }
  CHECK(bad_col == 0);
  CHECK(bad_row == 0);
  CHECK(d[0] != d[1]);  // not a constant result
}

TEST_CASE("emu: a wmma tile written by other lanes needs a __syncwarp, misaligned tiles and half-warp mma_sync fail") {
  std::vector<bf16> x(256), eye(256);
  for (int i = 0; i < 256; ++i) {
    x[size_t(i)] = __float2bfloat16(float(i % 17) - 8.0f);
    eye[size_t(i)] = __float2bfloat16(i / 16 == i % 16 ? 1.0f : 0.0f);
  }
  Buf dx(512), de(512), dout(1024);
  REQUIRE(cudaMemcpy(dx.p, x.data(), 512, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(de.p, eye.data(), 512, cudaMemcpyHostToDevice) == cudaSuccess);
  for (bool sync : {true, false}) {
    wmma_after_lane_writes<<<1, 32, 512>>>(dx.as<bf16>(), de.as<bf16>(), dout.as<float>(), sync);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto out = down(dout.as<float>(), 256);
    int same = 0;
    for (int i = 0; i < 256; ++i) same += out[size_t(i)] == __bfloat162float(x[size_t(i)]);
    if (sync) CHECK(same == 256);
    else CHECK(same < 256);  // lane 0 loaded the tile before the other lanes wrote it (NaN-filled)
  }
  wmma_misaligned<<<1, 32>>>(dx.as<bf16>(), dout.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  wmma_divergent<<<1, 32>>>(dx.as<bf16>(), dout.as<float>());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
}
