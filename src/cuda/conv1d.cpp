// CudaBackend's depthwise causal conv + SiLU (spec §4.7 step 2; src/cpu/conv1d.cpp is the
// reference): kernels/conv1d.cu, per sequence span, from and into each sequence's window (stored in
// the window tensor's dtype, numerics().conv_dtype); fault conv-window-stuck honoured there.
// Shapes and spans are checked by Backend::conv1d_causal (src/engine/backend.cpp).
#include <algorithm>

#include "conv1d.h"
#include "cuda/bf16_args.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/seq_tables.h"

namespace degen {

using cuda_detail::GdnTimer;
using cuda_detail::words;

static_assert(sizeof(cuda::Conv1dSeq) == 3 * sizeof(int64_t), "the per-sequence table travels as int64 words");

Tensor CudaBackend::do_conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                                     const std::vector<Tensor*>& windows) {
  require_device(x, "conv1d_causal");
  DEGEN_ASSERT(x.dtype == act_dtype(), "conv1d_causal: ", dtype_name(act_dtype()), " activations, got ", dtype_name(x.dtype));
  const int64_t N = x.rows(), C = x.cols();
  const int64_t K = w.shape[2];
  GdnTimer timer(*this);
  std::vector<cuda::Conv1dSeq> seqs;
  DType wdt = numerics_.conv_dtype;
  int64_t max_rows = 0;
  for (size_t s = 0; s < spans.size(); ++s) {
    Tensor& win = *windows[s];
    require_device(win, "conv1d window");
    if (s == 0) wdt = win.dtype;
    DEGEN_ASSERT(win.dtype == wdt, "conv1d: windows of one call in one dtype (", dtype_name(wdt), " and ",
                 dtype_name(win.dtype), ")");
    seqs.push_back(cuda::Conv1dSeq{spans[s].row0, spans[s].rows, win.raw()});
    max_rows = std::max(max_rows, spans[s].rows);
  }
  Tensor out = device_tensor({N, C}, x.dtype, "conv1d_causal");
  if (seqs.empty()) return out;
  const Tensor table = upload(words(seqs), DType::i64, "conv1d sequences");
  const Tensor& W = weight(w);
  cuda::with_act_weight(x.dtype, W.dtype, "conv1d_causal", [&](auto a, auto b) {
    using T = decltype(a);
    using Wt = decltype(b);
    cuda::conv1d_causal_cuda<T, Wt>(cuda::cptr<T>(x), cuda::cptr<Wt>(W), cuda::mptr<T>(out), C, K,
                                    static_cast<const cuda::Conv1dSeq*>(table.raw()), static_cast<int>(seqs.size()),
                                    max_rows, wdt, numerics_.has(Fault::conv_window_stuck), context()->stream());
  });
  return out;
}

}  // namespace degen
