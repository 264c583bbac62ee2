// Elementwise kernels of the CUDA backend (src/cpu/elementwise.cpp is the reference): embedding
// gather, residual add, sigmoid gate (the attention output gate and the shared expert's scalar
// gate), SwiGLU, logits padding mask. fp32 math from bf16 (or, for precision=ref, fp32) operands,
// one rounding on store.
#include "kernels/check.h"
#include "kernels/common.cuh"
#include "kernels/elementwise.h"

namespace degen::cuda {

namespace {
constexpr int kThreads = 256;
unsigned grid_for(int64_t n) { return std::min<unsigned>(blocks_for(n, kThreads), 65535u * 8); }
}  // namespace

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T, typename W>
static __global__ void embed_kernel(const W* table, int64_t H, const int32_t* ids, int64_t N, T* out) {
  GRID_STRIDE(i, N * H) { out[i] = from_f32<T>(to_f32(table[int64_t(ids[i / H]) * H + i % H])); }
}

template <typename T, typename W>
void embed_cuda(const W* table, int64_t H, const int32_t* ids, int64_t N, T* out, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N * H == 0) return;
  embed_kernel<T, W><<<grid_for(N * H), kThreads, 0, stream>>>(table, H, ids, N, out);
  CUDA_CHECK_LAUNCH("embed_kernel");
}

template <typename T>
static __global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  GRID_STRIDE(i, n) { out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i])); }
}

template <typename T>
void add_cuda(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n == 0) return;
  add_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(a, b, out, n);
  CUDA_CHECK_LAUNCH("add_kernel");
}

template <typename T>
static __global__ void sigmoid_mul_kernel(const T* x, const T* gate, T* out, int64_t R, int64_t C, bool bcast) {
  GRID_STRIDE(i, R * C) {
    const float g = to_f32(bcast ? gate[i / C] : gate[i]);
    out[i] = from_f32<T>(to_f32(x[i]) * sigmoidf_(g));
  }
}

template <typename T>
void sigmoid_mul_cuda(const T* x, const T* gate, T* out, int64_t R, int64_t C, bool bcast, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R * C == 0) return;
  sigmoid_mul_kernel<T><<<grid_for(R * C), kThreads, 0, stream>>>(x, gate, out, R, C, bcast);
  CUDA_CHECK_LAUNCH("sigmoid_mul_kernel");
}

template <typename T>
static __global__ void swiglu_kernel(const T* gate, const T* up, T* out, int64_t n) {
  GRID_STRIDE(i, n) { out[i] = from_f32<T>(siluf_(to_f32(gate[i])) * to_f32(up[i])); }
}

template <typename T>
void swiglu_cuda(const T* gate, const T* up, T* out, int64_t n, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n == 0) return;
  swiglu_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK_LAUNCH("swiglu_kernel");
}

// bf16 activations (the GPU path) and float ones (precision=ref, with bf16 or float tables).
template void embed_cuda<bf16, bf16>(const bf16*, int64_t, const int32_t*, int64_t, bf16*, cudaStream_t);
template void embed_cuda<float, bf16>(const bf16*, int64_t, const int32_t*, int64_t, float*, cudaStream_t);
template void embed_cuda<float, float>(const float*, int64_t, const int32_t*, int64_t, float*, cudaStream_t);
#define DEGEN_ELEMENTWISE_INSTANTIATE(T)                                                  \
  template void add_cuda<T>(const T*, const T*, T*, int64_t, cudaStream_t);               \
  template void sigmoid_mul_cuda<T>(const T*, const T*, T*, int64_t, int64_t, bool, cudaStream_t); \
  template void swiglu_cuda<T>(const T*, const T*, T*, int64_t, cudaStream_t);
DEGEN_ELEMENTWISE_INSTANTIATE(bf16)
DEGEN_ELEMENTWISE_INSTANTIATE(float)
#undef DEGEN_ELEMENTWISE_INSTANTIATE

template <typename T>
static __global__ void mask_logits_kernel(T* logits, int64_t R, int64_t V, const uint8_t* mask) {
  GRID_STRIDE(i, R * V) {
    if (mask[i % V]) logits[i] = from_f32<T>(-INFINITY);
  }
}

void mask_logits_cuda(void* logits, DType dtype, int64_t R, int64_t V, const uint8_t* mask, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R * V == 0) return;
  if (dtype == DType::bf16)
    mask_logits_kernel<bf16><<<grid_for(R * V), kThreads, 0, stream>>>(static_cast<bf16*>(logits), R, V, mask);
  else if (dtype == DType::f32)
    mask_logits_kernel<float><<<grid_for(R * V), kThreads, 0, stream>>>(static_cast<float*>(logits), R, V, mask);
  else
    throw std::logic_error(cat("mask_logits: dtype ", dtype_name(dtype)));
  CUDA_CHECK_LAUNCH("mask_logits_kernel");
}

}  // namespace degen::cuda
