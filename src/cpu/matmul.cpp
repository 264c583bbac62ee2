// CPU matrix product y = x Wᵀ against a memory-mapped weight (bf16 / f16 / f32).
// The weight is processed in fixed tiles of output rows: each tile is converted to T (exactly)
// into a per-thread buffer of at most kTileBytes and multiplied with Eigen (GEMM, or GEMV when
// x has one row). Tiles are spread over the threads; the tiling does not depend on the thread
// count, so results are identical with any number of threads. An fp32 weight under precision=ref
// is used in place. No full fp32 copy of a matrix or of the model is ever made.
// Under precision=bf16: x holds bf16 values (widened exactly), a weight stored wider than bf16 is
// rounded to bf16 tile by tile, products accumulate in fp32 (as cuBLAS with fp32 compute), and the
// output is rounded to bf16 once. Under precision=q8_0: weight rows and input rows through Q8_0.
#include "cpu/eigen.h"
#include <chrono>
#include <vector>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

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
