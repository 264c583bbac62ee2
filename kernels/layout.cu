// Layout kernels of the CUDA backend: dtype casts (weight upload, KV-cache stores), column and row
// gathers, and the MoE scatter-add (src/cpu/cpu_backend.cpp mirrors these on the host).
#include "kernels/check.h"
#include "kernels/dispatch.cuh"
#include "kernels/layout.h"

namespace degen::cuda {

template <typename S, typename D>
static __global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

void convert_cuda(const void* src, DType sd, void* dst, DType dd, int64_t n, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n == 0) return;
  if (sd == dd) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(sd), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const unsigned blocks = std::min<unsigned>(blocks_for(n, 256), 65535u * 4);
  dispatch_float(sd, "convert", [&](auto s) {
    dispatch_float(dd, "convert", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      convert_kernel<S, D><<<blocks, 256, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  CUDA_CHECK_LAUNCH("convert_kernel");
}

template <typename E>
static __global__ void gather_cols_kernel(const E* x, int64_t R, int64_t C, const int64_t* cols, int64_t n, E* out) {
  const int64_t total = R * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, j = i % n;
    out[i] = x[r * C + cols[j]];
  }
}

template <typename E>
static __global__ void gather_rows_kernel(const E* x, int64_t C, const int64_t* rows, int64_t n, E* out) {
  const int64_t total = n * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    out[i] = x[rows[r] * C + c];
  }
}

// Element types by size, for the byte-level layout ops.
template <typename F>
static void by_size(size_t es, F&& f) {
  switch (es) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: throw std::logic_error(cat("layout op: element size ", es));
  }
}

void gather_cols_cuda(const void* x, int64_t R, int64_t C, const int64_t* cols, int64_t n, void* out, size_t es,
                      cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (R * n == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(R * n, 256), 65535u * 4);
  by_size(es, [&](auto e) {
    using E = decltype(e);
    gather_cols_kernel<E><<<blocks, 256, 0, stream>>>(static_cast<const E*>(x), R, C, cols, n, static_cast<E*>(out));
  });
  CUDA_CHECK_LAUNCH("gather_cols_kernel");
}

void gather_rows_cuda(const void* x, int64_t C, const int64_t* rows, int64_t n, void* out, size_t es,
                      cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n * C == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(n * C, 256), 65535u * 4);
  by_size(es, [&](auto e) {
    using E = decltype(e);
    gather_rows_kernel<E><<<blocks, 256, 0, stream>>>(static_cast<const E*>(x), C, rows, n, static_cast<E*>(out));
  });
  CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

// unique rows: one thread per (i, c); else one thread per column walking the rows in order.
template <typename T>
static __global__ void scatter_add_rows_kernel(T* out, const T* y, int64_t C, const int64_t* rows, const float* w,
                                               int64_t n, bool unique) {
  if (unique) {
    const int64_t total = n * C;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = k / C, c = k % C;
      T* o = out + rows[i] * C + c;
      const float wy = to_f32(from_f32<T>(w[i] * to_f32(y[k])));  // the weighted output, rounded
      *o = from_f32<T>(to_f32(*o) + wy);
    }
  } else {
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
      for (int64_t i = 0; i < n; ++i) {
        T* o = out + rows[i] * C + c;
        const float wy = to_f32(from_f32<T>(w[i] * to_f32(y[i * C + c])));
        *o = from_f32<T>(to_f32(*o) + wy);
      }
  }
}

void scatter_add_rows_cuda(void* out, const void* y, DType dtype, int64_t C, const int64_t* rows, const float* w,
                           int64_t n, bool unique, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (n * C == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(unique ? n * C : C, 256), 65535u * 4);
  if (dtype == DType::bf16)
    scatter_add_rows_kernel<bf16><<<blocks, 256, 0, stream>>>(static_cast<bf16*>(out), static_cast<const bf16*>(y), C,
                                                               rows, w, n, unique);
  else if (dtype == DType::f32)
    scatter_add_rows_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(y),
                                                                C, rows, w, n, unique);
  else
    throw std::logic_error(cat("scatter_add_rows: dtype ", dtype_name(dtype)));
  CUDA_CHECK_LAUNCH("scatter_add_rows_kernel");
}

}  // namespace degen::cuda
