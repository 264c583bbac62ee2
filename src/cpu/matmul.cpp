// CPU matrix product y = x Wᵀ against a memory-mapped weight (bf16 / f16 / f32).
// fp32 activations with a weight stored in bf16 or fp32 (the reference's case) go through the product
// kernels of gemm.h, compiled per ISA and chosen at start-up (util/cpu_isa.h): decode (at most
// kGemvMaxRows rows) streams each weight once, widening bf16 in registers; wider inputs widen a tile
// of weight rows to fp32 once and run a register-tiled GEMM on it. Tiles of output rows are spread
// over the threads; every output element is computed the same way whichever thread or tile holds
// it, so results are identical with any number of threads. No full fp32 copy of a matrix or of the
// model is ever made.
// The other cases (fp64, an f16 weight, q8_0, an fp32 weight rounded to bf16 under precision=bf16)
// convert the weight tile by tile (at most kTileBytes) into a per-thread buffer and multiply with
// Eigen, built for the baseline ISA.
// Under precision=bf16: x holds bf16 values (widened exactly), a weight stored wider than bf16 is
// rounded to bf16 tile by tile, products accumulate in fp32 (as cuBLAS with fp32 compute), and the
// output is rounded to bf16 once. Under precision=q8_0: weight rows and input rows through Q8_0.
#include "cpu/eigen.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include <algorithm>
#include <chrono>
#include <vector>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"

namespace degen {

namespace {

constexpr size_t kTileBytes = 512 * 1024;  // converted weight tile: fits in L2 next to the activations

template <typename T>
void matmul_tiles(const T* x, int64_t N, int64_t in, const TensorView& w, T* y, bool w_bf16, bool q8) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t out = w.shape[0];
  int64_t tile = static_cast<int64_t>(kTileBytes / (sizeof(T) * static_cast<size_t>(in)));
  tile = std::max<int64_t>(8, std::min<int64_t>(tile / 8 * 8, out));
  const int64_t ntiles = (out + tile - 1) / tile;
  const bool direct = w.dtype == DType::f32 && std::is_same_v<T, float> && !w_bf16 && !q8;
  Eigen::Map<const Mat> X(x, N, in);
#pragma omp parallel if (ntiles > 1 && double(N) * double(in) * double(out) >= cpu::kParallelMinWork)
  {
    std::vector<T> buf(direct ? 0 : static_cast<size_t>(tile * in));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t r0 = t * tile, n = std::min(tile, out - r0);
      const T* wp;
      if (direct) {
        wp = reinterpret_cast<const T*>(w.data) + r0 * in;
      } else {
        cpu::load_weight(w, static_cast<size_t>(r0 * in), static_cast<size_t>(n * in), buf.data(), w_bf16);
        if (q8)
          for (int64_t r = 0; r < n; ++r) cpu::q8_0_round(buf.data() + r * in, in);
        wp = buf.data();
      }
      Eigen::Map<const Mat> W(wp, n, in);
      Eigen::Map<Mat, 0, Eigen::OuterStride<>> Y(y + r0, N, n, Eigen::OuterStride<>(out));
      Y.noalias() = X * W.transpose();
    }
  }
}

// The per-ISA kernels (gemm.h) for fp32 x against a bf16 or fp32 weight.
// The output rows are split into one contiguous range per thread, the same ranges for every N
// (multiples of the register tile's rows): on a machine with several NUMA nodes, each thread reads
// the same weight rows in decode as in prefill, so that the pages it first touched stay local to it;
// and with 64 threads every one still gets an equal share (no task granularity to balance). Inside
// its range a thread runs the GEMM in tiles of kGemmTileRows rows (a multiple of every ISA's register
// tile; one cache block of them widened is at most 96 x 512 floats, 192 KiB, in L2). None of this
// changes a value: every output element is computed the same way wherever it falls (gemm.h).
constexpr int64_t kGemmTileRows = 96;

void matmul_kernels(const float* x, int64_t N, int64_t in, const TensorView& w, float* y) {
  const cpu::GemmKernels& k = cpu::gemm_kernels();
  const int64_t out = w.shape[0], step = k.row_step;
  const bool bf = w.dtype == DType::bf16;
  const int64_t es = bf ? 2 : 4;
  const uint8_t* wp = w.data;
  const bool gemv = N <= cpu::kGemvMaxRows;
  std::vector<float> xt;
  if (!gemv) {
    xt.resize(static_cast<size_t>(cpu::packed_xt_floats(N, in, k.panel)));
    cpu::pack_xt(x, N, in, k.panel, xt.data());
  }
  const int64_t steps = (out + step - 1) / step;  // row ranges are cut at multiples of `step`
  const bool parallel = steps > 1 && double(N) * double(in) * double(out) >= cpu::kParallelMinWork;
#pragma omp parallel if (parallel)
  {
#ifdef _OPENMP
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    const int64_t nt = 1, id = 0;
#endif
    const int64_t r_begin = std::min(out, steps * id / nt * step), r_end = std::min(out, steps * (id + 1) / nt * step);
    if (r_end > r_begin) {
      if (gemv) {
        k.gemv_rows(x, in, N, in, wp + r_begin * in * es, bf, r_end - r_begin, y + r_begin, out);
      } else {
        const int64_t tile = std::min(kGemmTileRows, (r_end - r_begin + step - 1) / step * step);
        std::vector<float> scratch(static_cast<size_t>(cpu::gemm_scratch_floats(N, tile, k.panel)));
        for (int64_t r0 = r_begin; r0 < r_end; r0 += tile)
          k.gemm_tile(xt.data(), N, in, wp + r0 * in * es, bf, std::min(tile, r_end - r0), y + r0, out,
                      scratch.data());
      }
    }
  }
}

}  // namespace

Tensor CpuBackend::matmul(const Tensor& x0, const TensorView& w) {
  if (w.shape.size() != 2 || w.shape[1] != x0.cols())
    input_error("matmul: weight ", w.name, " has shape ", shape_str(w.shape), ", expected [out, ", x0.cols(), "]");
  const Tensor x = wide(x0);
  const int64_t N = x.rows(), in = x.cols(), out = w.shape[0];
  std::vector<int64_t> shape = x.shape;
  shape.back() = out;
  Tensor y = zeros(shape, x.dtype);
  if (N == 0 || out == 0) return store(y);
  auto t0 = std::chrono::steady_clock::now();
  // precision=q8_0: the weight and this input both through Q8_0 (ggml quantises a Q8_0 product's
  // f32 input to its vec_dot type, Q8_0, row by row), when the rows split into blocks of 32.
  const bool q8 = q8_0() && in % cpu::kQ8Block == 0;
  cpu::dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (q8) {
      std::vector<T> xq(x.data<T>(), x.data<T>() + N * in);
      for (int64_t r = 0; r < N; ++r) cpu::q8_0_round(xq.data() + r * in, in);
      matmul_tiles<T>(xq.data(), N, in, w, y.data<T>(), false, true);
    } else if constexpr (std::is_same_v<T, float>) {
      if (w.dtype == DType::bf16 || (w.dtype == DType::f32 && !gpu_storage()))
        matmul_kernels(x.data<float>(), N, in, w, y.data<float>());
      else
        matmul_tiles<T>(x.data<T>(), N, in, w, y.data<T>(), gpu_storage(), false);
    } else {
      matmul_tiles<T>(x.data<T>(), N, in, w, y.data<T>(), gpu_storage(), false);
    }
  });
  stats_.matmul_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.matmul_flops += 2.0 * double(N) * double(in) * double(out);
  stats_.weight_bytes += static_cast<double>(w.nbytes);
  stats_.matmul_calls++;
  return store(y);
}

}  // namespace degen
