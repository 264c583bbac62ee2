// CudaBackend Gated DeltaNet ops (spec §4.7; src/cpu/gdn.cpp is the reference), all on the device
// (the short convolution before them is cuda/conv1d.cpp):
//   gdn_gates: kernels/gdn_gates.cu, fault alog-no-exp honoured there.
//   gdn: kernels/gdn.cu — recurrent (one token per step) or chunked (C = 64) gated delta rule per
//     sequence span, continuing from and updating each state S (stored in S's dtype after every
//     token / chunk); faults gdn-read-before-decay, gdn-head-mod, gdn-out-fp16 honoured there;
//     gdn=fla: kernels/gdn_fla.cu on tensor cores (bf16 activations; under precision=ref its
//     storage points are fp32, the identity, and the chunked kernels run).
// The per-sequence tables (rows, window / state pointers, chunks) are small host arrays uploaded
// with each call. With CudaStats::time_gdn on (bench), each of these ops is bracketed by stream
// synchronisations and its wall time added to CudaStats::gdn_seconds.

#include <algorithm>

#include "cuda/bf16_args.h"
#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/seq_tables.h"
#include "kernels/gdn.h"
#include "kernels/gdn_gates.h"

namespace degen {

using cuda_detail::GdnTimer;
using cuda_detail::words;

namespace {

static_assert(sizeof(cuda::GdnSeq) == 3 * sizeof(int64_t) &&
                  sizeof(cuda::GdnChunk) == 2 * sizeof(int64_t),
              "the per-sequence tables travel as int64 arrays");

void check_spans(const std::vector<SeqSpan>& spans, int64_t N, const char* op) {
  for (const SeqSpan& s : spans)
    DEGEN_ASSERT(s.row0 >= 0 && s.rows >= 0 && s.row0 + s.rows <= N, op, ": span rows ", s.row0, "+", s.rows,
                 " outside the ", N, " rows of the batch");
}

}  // namespace

void CudaBackend::gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                            Tensor& g, Tensor& beta) {
  require_device(a, "gdn_gates");
  require_device(b, "gdn_gates");
  DEGEN_ASSERT(a.shape == b.shape && a.dtype == act_dtype() && b.dtype == a.dtype, "gdn_gates: a, b of one shape in ",
               dtype_name(act_dtype()));
  GdnTimer timer(*this);
  const int64_t R = a.rows(), nv = a.cols();
  DEGEN_ASSERT(A_log.numel() == nv && dt_bias.numel() == nv, "gdn_gates: A_log/dt_bias size vs ", nv, " heads");
  const Tensor& A = weight(A_log, /*keep_dtype=*/true);
  const Tensor& dt = weight(dt_bias, /*keep_dtype=*/true);
  g = device_tensor(a.shape, DType::f32, "gdn g");
  beta = device_tensor(a.shape, a.dtype, "gdn beta");
  cuda::with_act(a.dtype, "gdn_gates", [&](auto z) {
    using T = decltype(z);
    cuda::gdn_gates_cuda<T>(cuda::cptr<T>(a), cuda::cptr<T>(b), A.raw(), A.dtype, dt.raw(), dt.dtype, g.data<float>(),
                            cuda::mptr<T>(beta), R, nv, numerics_.has(Fault::alog_no_exp), context()->stream());
  });
}

Tensor CudaBackend::gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) {
  for (const Tensor* t : {&q, &k, &v, &g, &beta}) require_device(*t, "gdn");
  DEGEN_ASSERT(q.shape.size() == 3 && q.shape == k.shape && v.shape.size() == 3, "gdn shapes: q ", shape_str(q.shape),
               " k ", shape_str(k.shape), " v ", shape_str(v.shape));
  DEGEN_ASSERT(q.dtype == act_dtype() && k.dtype == q.dtype && v.dtype == q.dtype && beta.dtype == q.dtype,
               "gdn: q, k, v, beta in ", dtype_name(act_dtype()));
  DEGEN_ASSERT(g.dtype == DType::f32, "gdn: g in fp32 (gdn_gates), got ", dtype_name(g.dtype));
  const int64_t N = q.shape[0];
  cuda::GdnShape sh;
  sh.n_k = static_cast<int>(q.shape[1]);
  sh.d_k = static_cast<int>(q.shape[2]);
  sh.n_v = static_cast<int>(v.shape[1]);
  sh.d_v = static_cast<int>(v.shape[2]);
  DEGEN_ASSERT(sh.n_v % sh.n_k == 0, "gdn: n_v ", sh.n_v, " not a multiple of n_k ", sh.n_k);
  DEGEN_ASSERT(v.shape[0] == N && g.rows() == N && g.cols() == sh.n_v && beta.shape == g.shape, "gdn gate shapes");
  DEGEN_ASSERT(spans.size() == states.size(), "gdn: one state per sequence");
  check_spans(spans, N, "gdn");
  sh.head_mod = numerics_.has(Fault::gdn_head_mod);
  sh.read_before_decay = numerics_.has(Fault::gdn_read_before_decay);
  sh.out_fp16 = numerics_.has(Fault::gdn_out_fp16);
  GdnTimer timer(*this);
  std::vector<cuda::GdnSeq> seqs;
  std::vector<cuda::GdnChunk> chunks;
  DType sdt = numerics_.ssm_dtype;
  for (size_t s = 0; s < spans.size(); ++s) {
    Tensor& St = *states[s];
    require_device(St, "gdn state");
    DEGEN_ASSERT(St.shape == (std::vector<int64_t>{sh.n_v, sh.d_k, sh.d_v}), "gdn state ", shape_str(St.shape));
    if (s == 0) sdt = St.dtype;
    DEGEN_ASSERT(St.dtype == sdt, "gdn: states of one call in one dtype (", dtype_name(sdt), " and ",
                 dtype_name(St.dtype), ")");
    seqs.push_back(cuda::GdnSeq{spans[s].row0, spans[s].rows, St.raw()});
    for (int64_t c0 = 0; c0 < spans[s].rows; c0 += cuda::kGdnChunk)
      chunks.push_back(cuda::GdnChunk{spans[s].row0 + c0, std::min<int64_t>(cuda::kGdnChunk, spans[s].rows - c0)});
  }
  Tensor o = device_tensor({N, sh.n_v, sh.d_v}, q.dtype, "gdn o");
  if (seqs.empty() || chunks.empty()) return o;
  cuda::GdnIo io;
  io.q = q.raw();
  io.k = k.raw();
  io.v = v.raw();
  io.beta = beta.raw();
  io.g = g.data<float>();
  io.o = o.raw();
  io.act = q.dtype;
  const Tensor seq_table = upload(words(seqs), DType::i64, "gdn sequences");
  const auto* seq_ptr = static_cast<const cuda::GdnSeq*>(seq_table.raw());
  if (algo == GdnAlgo::recurrent) {
    cuda::gdn_recurrent_cuda(io, sh, seq_ptr, static_cast<int>(seqs.size()), sdt, context()->stream());
    return o;
  }
  const Tensor chunk_table = upload(words(chunks), DType::i64, "gdn chunks");
  if (algo == GdnAlgo::fla && q.dtype == DType::bf16) {  // fp32 activations: R is the identity, as chunked
    const int nc = static_cast<int>(chunks.size());
    const int64_t bytes = static_cast<int64_t>(cuda::gdn_fla_scratch_bytes(N, nc, sh));
    Tensor scratch = device_tensor({(bytes + 3) / 4}, DType::f32, "gdn fla scratch");
    cuda::gdn_fla_cuda(io, sh, seq_ptr, static_cast<int>(seqs.size()),
                       static_cast<const cuda::GdnChunk*>(chunk_table.raw()), nc, sdt, scratch.raw(), N,
                       context()->props().sharedMemPerBlockOptin, context()->stream());
    return o;
  }
  const int64_t scratch_floats = static_cast<int64_t>(cuda::gdn_chunked_scratch_bytes(N, sh) / sizeof(float));
  Tensor scratch = device_tensor({scratch_floats}, DType::f32, "gdn chunked scratch");
  cuda::gdn_chunked_cuda(io, sh, seq_ptr, static_cast<int>(seqs.size()),
                         static_cast<const cuda::GdnChunk*>(chunk_table.raw()), static_cast<int>(chunks.size()), sdt,
                         scratch.raw(), N, context()->stream());
  return o;
}

}  // namespace degen
