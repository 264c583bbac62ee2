// The KV-cache store of the CUDA attention op (src/cuda/attention.cpp): each new K/V row converted
// to the cache's dtype (bf16 copy, or fp8 e4m3 saturated as convert_cuda rounds it) at the row its
// sequence's position gives. Destinations are read from device tables (not kernel arguments) so
// that a CUDA graph replaying a decode step stores at the current position.
#include "kernels/attention.h"
#include "kernels/check.h"
#include "kernels/dispatch.cuh"

namespace degen::cuda {

template <typename KV, typename A>
static __global__ void kv_append_kernel(const A* k, const A* v, const AttnSeq* seqs, const int32_t* row_seq,
                                        const int64_t* dst_row, int64_t N, int64_t row_elems) {
  const int64_t total = N * row_elems;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_elems, e = i % row_elems;
    const AttnSeq s = seqs[row_seq[r]];
    const int64_t at = dst_row[r] * row_elems + e;
    static_cast<KV*>(const_cast<void*>(s.k))[at] = from_f32<KV>(to_f32(k[i]));
    static_cast<KV*>(const_cast<void*>(s.v))[at] = from_f32<KV>(to_f32(v[i]));
  }
}

void kv_append_cuda(const void* k, const void* v, DType act_dtype, const AttnSeq* seqs, const int32_t* row_seq, const int64_t* dst_row,
                    int64_t N, int64_t row_elems, DType kv_dtype, cudaStream_t stream) {
  DEGEN_LAUNCH_GATE();
  if (N * row_elems == 0) return;
  const unsigned blocks = std::min<unsigned>(blocks_for(N * row_elems, 256), 65535u * 4);
  DEGEN_ASSERT(act_dtype == DType::bf16 || act_dtype == DType::f32, "kv_append: activations in ", dtype_name(act_dtype));
  dispatch_float(kv_dtype, "kv_append", [&](auto kv) {
    using KV = decltype(kv);
    if (act_dtype == DType::bf16)
      kv_append_kernel<KV, bf16><<<blocks, 256, 0, stream>>>(static_cast<const bf16*>(k), static_cast<const bf16*>(v),
                                                             seqs, row_seq, dst_row, N, row_elems);
    else
      kv_append_kernel<KV, float><<<blocks, 256, 0, stream>>>(static_cast<const float*>(k), static_cast<const float*>(v),
                                                              seqs, row_seq, dst_row, N, row_elems);
  });
  CUDA_CHECK_LAUNCH("kv_append_kernel");
}

}  // namespace degen::cuda
