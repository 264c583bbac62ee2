// CPU depthwise causal conv + SiLU of the GDN layer (spec §4.7.2, §5.1-5.2):
//   out[t, c] = silu( Σ_{i<K} w[c, i] · x[t-(K-1)+i, c] ),  w[c, K-1] multiplies the current row;
// rows before the sequence start come from the window (the K-1 previous pre-conv rows, zeros for
// a fresh sequence). Afterwards the window holds the last K-1 rows of [window; x].
// note: the K-tap sum is accumulated in double. The window is stored in its own tensor's dtype
// (conv_dtype: rounded when narrower than the rows), the output in the activation dtype.
// Fault conv-window-stuck (numerics()): a one-token call (decode) leaves the window as it was.
#include <cstring>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

Tensor CpuBackend::do_conv1d_causal(const Tensor& x0, const TensorView& w, const std::vector<SeqSpan>& spans,
                                    const std::vector<Tensor*>& windows) {
  const Tensor x = wide(x0);
  const int64_t N = x.rows(), C = x.cols();
  const int64_t K = w.shape[2];
  const bool stuck = numerics_.has(Fault::conv_window_stuck);
  Tensor out = zeros({N, C}, x.dtype);
  cpu::dispatch(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<double> wv = cpu::weight_vector<double>(w, gpu_storage());  // [C, K]
    for (size_t s = 0; s < spans.size(); ++s) {
      const SeqSpan& sp = spans[s];
      Tensor& win = *windows[s];
      const Tensor wwin = wide(win);  // the window's values in T (win itself when stored in T)
      const T* xs = x.data<T>() + sp.row0 * C;
      const T* ws = wwin.data<T>();
      // row r of [window; x] (r in [0, K-1+rows))
      auto src = [&](int64_t r) { return r < K - 1 ? ws + r * C : xs + (r - (K - 1)) * C; };
      T* os = out.data<T>() + sp.row0 * C;
#pragma omp parallel for schedule(static) if (double(sp.rows) * double(C * K) >= cpu::kParallelMinWork)
      for (int64_t t = 0; t < sp.rows; ++t)
        for (int64_t c = 0; c < C; ++c) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += wv[c * K + i] * double(src(t + i)[c]);
          os[t * C + c] = static_cast<T>(cpu::silu(acc));
        }
      if (stuck && sp.rows == 1) continue;  // fault: decode does not advance the window
      // New window: the last K-1 rows of [window; x], in the window's dtype.
      Tensor nw = zeros({K - 1, C}, x.dtype);
      for (int64_t r = 0; r < K - 1; ++r)
        std::memcpy(nw.data<T>() + r * C, src(sp.rows + r), static_cast<size_t>(C) * sizeof(T));
      if (win.dtype != nw.dtype) nw = convert(nw, win.dtype);
      std::memcpy(win.raw(), nw.raw(), nw.nbytes());
    }
  });
  return store(out);
}

}  // namespace degen
