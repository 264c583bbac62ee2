// Elementwise kernels of the CUDA backend (src/cpu/elementwise.cpp is the reference): embedding
// gather, residual add, sigmoid gate (the attention output gate and the shared expert's scalar
// gate), SwiGLU, logits padding mask. fp32 math from bf16 operands, one rounding on store.
#include "cuda/check.h"
#include "common.cuh"
#include "elementwise.h"

namespace degen::cuda {

namespace {
constexpr int kThreads = 256;
unsigned grid_for(int64_t n) { return std::min<unsigned>(blocks_for(n, kThreads), 65535u * 8); }
}  // namespace

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

static __global__ void embed_bf16_kernel(const bf16* table, int64_t H, const int32_t* ids, int64_t N, bf16* out) {
  GRID_STRIDE(i, N * H) { out[i] = table[int64_t(ids[i / H]) * H + i % H]; }
}

void embed_cuda(const bf16* table, int64_t H, const int32_t* ids, int64_t N, bf16* out, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N * H == 0) return;
  embed_bf16_kernel<<<grid_for(N * H), kThreads, 0, stream>>>(table, H, ids, N, out);
  CUDA_CHECK_LAUNCH("embed_bf16_kernel");
}

static __global__ void add_bf16_kernel(const bf16* a, const bf16* b, bf16* out, int64_t n) {
  GRID_STRIDE(i, n) { out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i])); }
}

void add_cuda(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n == 0) return;
  add_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, out, n);
  CUDA_CHECK_LAUNCH("add_bf16_kernel");
}

static __global__ void sigmoid_mul_bf16_kernel(const bf16* x, const bf16* gate, bf16* out, int64_t R, int64_t C, bool bcast) {
  GRID_STRIDE(i, R * C) {
    const float g = __bfloat162float(bcast ? gate[i / C] : gate[i]);
    out[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * sigmoidf_(g));
  }
}

void sigmoid_mul_cuda(const bf16* x, const bf16* gate, bf16* out, int64_t R, int64_t C, bool bcast,
                      cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R * C == 0) return;
  sigmoid_mul_bf16_kernel<<<grid_for(R * C), kThreads, 0, stream>>>(x, gate, out, R, C, bcast);
  CUDA_CHECK_LAUNCH("sigmoid_mul_bf16_kernel");
}

static __global__ void swiglu_bf16_kernel(const bf16* gate, const bf16* up, bf16* out, int64_t n) {
  GRID_STRIDE(i, n) { out[i] = __float2bfloat16_rn(siluf_(__bfloat162float(gate[i])) * __bfloat162float(up[i])); }
}

void swiglu_cuda(const bf16* gate, const bf16* up, bf16* out, int64_t n, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n == 0) return;
  swiglu_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, out, n);
  CUDA_CHECK_LAUNCH("swiglu_bf16_kernel");
}

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
