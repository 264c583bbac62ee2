// The token sampler on the device (src/engine/sampler.h is the specification and sampler.cpp the
// reference; step numbers below are that header's). All arithmetic in fp64 on the logits row read
// exactly (bf16 or fp32 -> double). Reductions, sorts and scans are CUB's device-wide algorithms:
//   top-k: the k-th largest z from a descending radix sort of z;
//   top-p: (p, id) pairs radix-sorted descending by p — the sort is stable and the ids enter in
//          ascending order, so ties stay lowest id first, the CPU's order — then an exclusive scan
//          of the sorted p gives the mass above each id;
//   draw:  inclusive scan of the final p in ascending id order; the token is the first id with
//          p > 0 and u·C[V-1] < C[i], u = philox_uniform(seed; case, position) computed here.
// note: the CPU's sums are serial; these are parallel trees, equal up to the last bits (sample.h).
#include <cub/cub.cuh>

#include "kernels/common.cuh"
#include "kernels/check.h"
#include "kernels/sample.h"
#include "util/philox.h"

namespace degen::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool live_d(double s) { return !isnan(s) && s != -INFINITY; }

struct Scratch {  // carved out of the caller's buffer
  double *x, *z_sorted, *p, *p_sorted, *scan, *scalars;  // scalars: [0] sum, [1] max p, [2] max x
  int32_t *ids, *ids_sorted, *ints;                       // ints: [0] argmax, [1] live, [2] token, [3] last
  void* cub_tmp;
  size_t cub_bytes;
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t cub_temp_bytes(int64_t V) {
  size_t a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
  const int n = static_cast<int>(V);
  cub::DeviceRadixSort::SortKeysDescending(nullptr, a, static_cast<double*>(nullptr), static_cast<double*>(nullptr), n);
  cub::DeviceRadixSort::SortPairsDescending(nullptr, b, static_cast<double*>(nullptr), static_cast<double*>(nullptr),
                                            static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n);
  cub::DeviceScan::ExclusiveSum(nullptr, c, static_cast<double*>(nullptr), static_cast<double*>(nullptr), n);
  cub::DeviceScan::InclusiveSum(nullptr, f, static_cast<double*>(nullptr), static_cast<double*>(nullptr), n);
  cub::DeviceReduce::Sum(nullptr, d, static_cast<double*>(nullptr), static_cast<double*>(nullptr), n);
  cub::DeviceReduce::Max(nullptr, e, static_cast<double*>(nullptr), static_cast<double*>(nullptr), n);
  return std::max({a, b, c, d, e, f});
}

Scratch carve(void* base, int64_t V) {
  Scratch s;
  uint8_t* p = static_cast<uint8_t*>(base);
  const size_t dv = align256(sizeof(double) * size_t(V)), iv = align256(sizeof(int32_t) * size_t(V));
  s.x = reinterpret_cast<double*>(p); p += dv;
  s.z_sorted = reinterpret_cast<double*>(p); p += dv;
  s.p = reinterpret_cast<double*>(p); p += dv;
  s.p_sorted = reinterpret_cast<double*>(p); p += dv;
  s.scan = reinterpret_cast<double*>(p); p += dv;
  s.scalars = reinterpret_cast<double*>(p); p += 256;
  s.ids = reinterpret_cast<int32_t*>(p); p += iv;
  s.ids_sorted = reinterpret_cast<int32_t*>(p); p += iv;
  s.ints = reinterpret_cast<int32_t*>(p); p += 256;
  s.cub_tmp = p;
  s.cub_bytes = cub_temp_bytes(V);
  return s;
}

unsigned grid_for(int64_t n) { return std::min<unsigned>(blocks_for(n, kThreads), 4096); }

// 1. copy, banned and NaN removed
__global__ void load_logits_kernel(const void* logits, bool f32, int64_t V, const uint8_t* banned, double* x) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = f32 ? static_cast<const float*>(logits)[i] : __bfloat162float(static_cast<const bf16*>(logits)[i]);
    x[i] = ((banned && banned[i]) || isnan(v)) ? -INFINITY : static_cast<double>(v);
  }
}

// 2. repetition penalty (ids distinct, in range)
__global__ void repetition_penalty_kernel(double* x, const int32_t* ids, int n, double r) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double& v = x[ids[i]];
  if (v != -INFINITY) v = v < 0 ? v * r : v / r;
}

// 3. presence penalty (ids distinct, in range)
__global__ void presence_penalty_kernel(double* x, const int32_t* ids, int n, double q) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double& v = x[ids[i]];
  if (v != -INFINITY) v -= q;
}

// 4. argmax over live x, lowest id on ties, and the live count; one block.
__global__ void argmax_live_kernel(const double* x, int64_t V, int32_t* out) {
  __shared__ double bv[1024];
  __shared__ int32_t bi[1024];
  __shared__ int32_t bc[1024];
  double best = -INFINITY;
  int32_t idx = -1, count = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const double v = x[i];
    if (!live_d(v)) continue;
    ++count;
    if (idx < 0 || v > best) { best = v; idx = static_cast<int32_t>(i); }  // ascending i: first max kept
  }
  bv[threadIdx.x] = best;
  bi[threadIdx.x] = idx;
  bc[threadIdx.x] = count;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const int o = threadIdx.x + s;
      bc[threadIdx.x] += bc[o];
      const int32_t a = bi[threadIdx.x], b = bi[o];
      if (b >= 0 && (a < 0 || bv[o] > bv[threadIdx.x] || (bv[o] == bv[threadIdx.x] && b < a))) {
        bv[threadIdx.x] = bv[o];
        bi[threadIdx.x] = b;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = bi[0];
    out[1] = bc[0];
  }
}

// 5. z = (x - x_max) / T; removed ids stay -inf
// note: x_max is read from a copy (scalars[2]): the kernel overwrites x[best] itself.
__global__ void copy_max_kernel(const double* x, int32_t best, double* out) { *out = x[best]; }

__global__ void temperature_shift_kernel(double* x, int64_t V, const double* xmax_p, double t) {
  const double xmax = *xmax_p;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    if (!live_d(v)) continue;
    x[i] = isinf(xmax) ? (v == xmax ? 0.0 : -INFINITY) : (v - xmax) / t;
  }
}

// 6. top-k: remove z < the k-th largest
__global__ void top_k_cut_kernel(double* z, int64_t V, const double* sorted, int k) {
  const double kth = sorted[k - 1];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x)
    if (live_d(z[i]) && z[i] < kth) z[i] = -INFINITY;
}

// 7. unnormalised weights w = exp(z) (z_max = 0: the argmax survives every filter), ids 0..V-1
__global__ void exp_weights_kernel(const double* z, int64_t V, double* w, int32_t* ids) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x) {
    w[i] = live_d(z[i]) ? exp(z[i]) : 0.0;
    ids[i] = static_cast<int32_t>(i);
  }
}

__global__ void scale_by_inverse_kernel(double* p, int64_t V, const double* sum) {
  const double s = *sum;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x)
    p[i] /= s;
}

// 8. top-p: keep the sorted entry j iff j == 0 or the mass above it < top_p
__global__ void top_p_cut_kernel(double* p, int64_t V, const int32_t* ids_sorted, const double* p_sorted,
                          const double* above, double top_p) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < V; j += int64_t(gridDim.x) * blockDim.x)
    if (j > 0 && p_sorted[j] > 0 && !(above[j] < top_p)) p[ids_sorted[j]] = 0.0;
}

// 9. min-p: remove p < min_p * p_max
__global__ void min_p_cut_kernel(double* p, int64_t V, const double* pmax, double min_p) {
  const double th = min_p * *pmax;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x)
    if (p[i] < th) p[i] = 0.0;
}

__global__ void init_token_kernel(int32_t* ints) {
  ints[2] = INT32_MAX;
  ints[3] = -1;
}

// 11. the first id with p > 0 and u·T < C (T = C[V-1]); the last id with p > 0 as a guard
__global__ void inverse_cdf_pick_kernel(const double* p, const double* C, int64_t V, DeviceSampling ps, int32_t* ints) {
  const double u = philox_uniform(ps.seed, ps.case_index, ps.position, kPhiloxStreamToken);
  const double target = u * C[V - 1];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x) {
    if (!(p[i] > 0)) continue;
    atomicMax(&ints[3], static_cast<int32_t>(i));
    if (target < C[i]) atomicMin(&ints[2], static_cast<int32_t>(i));
  }
}

__global__ void finish_token_kernel(const int32_t* ints, int32_t* token) { *token = ints[2] != INT32_MAX ? ints[2] : ints[3]; }

}  // namespace

size_t sample_scratch_bytes(int64_t V) {
  return 5 * align256(sizeof(double) * size_t(V)) + 2 * align256(sizeof(int32_t) * size_t(V)) + 512 +
         cub_temp_bytes(V) + 256;
}

void sample_penalise_argmax_cuda(const void* logits, DType dtype, int64_t V, const uint8_t* banned,
                                 const int32_t* rep_ids, int n_rep, const int32_t* pres_ids, int n_pres,
                                 const DeviceSampling& p, void* scratch, int32_t* best, int32_t* live,
                                 cudaStream_t stream) {
  DEGEN_ASSERT(dtype == DType::f32 || dtype == DType::bf16, "device sampler: logits in f32 or bf16, got ",
               dtype_name(dtype));
  DEGEN_ASSERT(V > 0 && V < (int64_t(1) << 31), "device sampler: vocabulary ", V);
  Scratch s = carve(scratch, V);
  load_logits_kernel<<<grid_for(V), kThreads, 0, stream>>>(logits, dtype == DType::f32, V, banned, s.x);
  CUDA_CHECK_LAUNCH("load_logits_kernel");
  if (n_rep > 0 && p.repetition_penalty != 1.0) {
    repetition_penalty_kernel<<<blocks_for(n_rep, kThreads), kThreads, 0, stream>>>(s.x, rep_ids, n_rep, p.repetition_penalty);
    CUDA_CHECK_LAUNCH("repetition_penalty_kernel");
  }
  if (n_pres > 0 && p.presence_penalty != 0.0) {
    presence_penalty_kernel<<<blocks_for(n_pres, kThreads), kThreads, 0, stream>>>(s.x, pres_ids, n_pres, p.presence_penalty);
    CUDA_CHECK_LAUNCH("presence_penalty_kernel");
  }
  argmax_live_kernel<<<1, 1024, 0, stream>>>(s.x, V, s.ints);
  CUDA_CHECK_LAUNCH("argmax_live_kernel");
  CUDA_CHECK(cudaMemcpyAsync(best, s.ints, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(live, s.ints + 1, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
}

void sample_draw_cuda(int64_t V, int32_t best, int32_t live, const DeviceSampling& p, void* scratch, int32_t* token,
                      cudaStream_t stream) {
  DEGEN_ASSERT(best >= 0 && p.temperature > 0, "sample_draw_cuda: needs a live argmax and temperature > 0");
  Scratch s = carve(scratch, V);
  const int n = static_cast<int>(V);
  size_t tmp = s.cub_bytes;
  const unsigned g = grid_for(V);
  copy_max_kernel<<<1, 1, 0, stream>>>(s.x, best, s.scalars + 2);
  CUDA_CHECK_LAUNCH("copy_max_kernel");
  temperature_shift_kernel<<<g, kThreads, 0, stream>>>(s.x, V, s.scalars + 2, p.temperature);
  CUDA_CHECK_LAUNCH("temperature_shift_kernel");
  if (p.top_k > 0 && p.top_k < live) {
    CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(s.cub_tmp, tmp, s.x, s.z_sorted, n, 0, 64, stream));
    top_k_cut_kernel<<<g, kThreads, 0, stream>>>(s.x, V, s.z_sorted, p.top_k);
    CUDA_CHECK_LAUNCH("top_k_cut_kernel");
  }
  exp_weights_kernel<<<g, kThreads, 0, stream>>>(s.x, V, s.p, s.ids);
  CUDA_CHECK_LAUNCH("exp_weights_kernel");
  CUDA_CHECK(cub::DeviceReduce::Sum(s.cub_tmp, tmp, s.p, s.scalars, n, stream));
  scale_by_inverse_kernel<<<g, kThreads, 0, stream>>>(s.p, V, s.scalars);
  CUDA_CHECK_LAUNCH("scale_by_inverse_kernel");
  if (p.top_p < 1.0) {
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(s.cub_tmp, tmp, s.p, s.p_sorted, s.ids, s.ids_sorted, n, 0, 64,
                                                         stream));
    CUDA_CHECK(cub::DeviceScan::ExclusiveSum(s.cub_tmp, tmp, s.p_sorted, s.scan, n, stream));
    top_p_cut_kernel<<<g, kThreads, 0, stream>>>(s.p, V, s.ids_sorted, s.p_sorted, s.scan, p.top_p);
    CUDA_CHECK_LAUNCH("top_p_cut_kernel");
  }
  if (p.min_p > 0) {
    CUDA_CHECK(cub::DeviceReduce::Max(s.cub_tmp, tmp, s.p, s.scalars + 1, n, stream));
    min_p_cut_kernel<<<g, kThreads, 0, stream>>>(s.p, V, s.scalars + 1, p.min_p);
    CUDA_CHECK_LAUNCH("min_p_cut_kernel");
  }
  // 10. renormalise
  CUDA_CHECK(cub::DeviceReduce::Sum(s.cub_tmp, tmp, s.p, s.scalars, n, stream));
  scale_by_inverse_kernel<<<g, kThreads, 0, stream>>>(s.p, V, s.scalars);
  CUDA_CHECK_LAUNCH("scale_by_inverse_kernel");
  // 11. inverse CDF in ascending id order
  CUDA_CHECK(cub::DeviceScan::InclusiveSum(s.cub_tmp, tmp, s.p, s.scan, n, stream));
  init_token_kernel<<<1, 1, 0, stream>>>(s.ints);
  CUDA_CHECK_LAUNCH("init_token_kernel");
  inverse_cdf_pick_kernel<<<g, kThreads, 0, stream>>>(s.p, s.scan, V, p, s.ints);
  CUDA_CHECK_LAUNCH("inverse_cdf_pick_kernel");
  finish_token_kernel<<<1, 1, 0, stream>>>(s.ints, token);
  CUDA_CHECK_LAUNCH("finish_token_kernel");
}

}  // namespace degen::cuda
