// CudaBackend gated-attention core (spec §4.4 steps 5-6; src/cpu/attention.cpp is the reference):
// append post-RoPE K and V to each sequence's cache in numerics().kv_dtype (bf16, or fp8 e4m3 with
// scale 1 and saturation), then causal GQA attention with numerics().attn:
//   naive   -> kernels/attention_naive.cu   (every row)
//   flash   -> kernels/attention_flash.cu   (multi-row sequences on tensor cores where the dtypes,
//              head_dim and shared memory allow: attention_flash_tc_rows; the other rows one block
//              per row and head)
//   splitkv -> kernels/attention_splitkv.cu for one-row sequences (decode), flash for the others
//              (on tensor cores, as flash's).
//   grouped -> kernels/attention_grouped.cu for one-row sequences (decode), flash for the others;
//              its parts from the device's SM count (src/util/attn_grouped.h).
// Fault kv-off-by-one (numerics()): a one-row call writes its K/V row at pos + 1 and still attends
// rows 0..pos, so it reads the previous step's row (or zeros) at pos.
// The K/V store and the attention kernels read positions and cache pointers from device tables
// uploaded with each call, so a CUDA graph replaying a decode step (graphs=on) stays correct.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "kernels/layout.h"
#include "kernels/rope.h"
#include "util/attn_grouped.h"

namespace degen {

namespace {

// Makes room for rows [0, need), growing geometrically; keeps every row it had (also a row written
// past len by the kv-off-by-one fault); new rows are zero.
void kv_reserve(CudaBackend& be, KvCache& c, int64_t need, int64_t n_kv, int64_t D, DType dtype) {
  check_kv_dtype(c, dtype);
  if (!c.k.empty() && c.k.device != Device::cuda)
    throw std::logic_error("cuda backend: attention was given a KV cache made by another backend");
  if (need <= c.capacity()) return;
  const int64_t cap = std::max<int64_t>({need, 2 * c.capacity(), 16});
  Tensor k = be.zeros({cap, n_kv, D}, dtype), v = be.zeros({cap, n_kv, D}, dtype);
  cudaStream_t st = be.context()->stream();
  if (c.capacity()) {
    CUDA_CHECK(cudaMemcpyAsync(k.raw(), c.k.raw(), c.k.nbytes(), cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaMemcpyAsync(v.raw(), c.v.raw(), c.v.nbytes(), cudaMemcpyDeviceToDevice, st));
  }
  c.k = std::move(k);
  c.v = std::move(v);
}

}  // namespace

// Step 1 and 2 of a call: room in each cache for its new rows, the device tables of the K/V store
// and of the attention launches, the rows of each algorithm; the caches' lengths advanced.
CudaBackend::AttnPlan CudaBackend::attention_plan(int64_t N, int64_t n_q, int64_t n_kv, int64_t D,
                                                  const std::vector<SeqSpan>& spans,
                                                  const std::vector<KvCache*>& caches) {
  if (D > cuda::kAttnMaxHeadDim)
    throw UntestableError(cat("attention: head_dim ", D, " exceeds the CUDA kernels' limit ", cuda::kAttnMaxHeadDim));
  const AttnAlgo algo = numerics_.attn;
  if (algo == AttnAlgo::grouped && D % 8 != 0)
    throw UntestableError(cat("attention: attn=grouped reads the cache in 8-element vectors; head_dim ", D,
                              " is not a multiple of 8 (use attn=flash or splitkv)"));
  const DType kv_dtype = numerics_.kv_dtype;
  AttnPlan p;
  p.N = N;
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.D = D;

  // 1. room for each sequence's new rows. A graph step (graphs=on) never grows a cache (the new
  // buffers would be baked into the graph): Engine::graph_key sends a step as a graph only when
  // each cache has two rows to spare (the step's and the one the kv-off-by-one fault writes
  // beyond it), and a plain step keeps two spare, growing geometrically, so that the next qualifies.
  std::vector<int64_t> dst_row;  // [N]: the cache row each batch row's K/V goes to
  std::vector<int32_t> all_seq;  // [N]: its sequence
  int64_t max_cap = 0;
  for (size_t s = 0; s < spans.size(); ++s) {
    const SeqSpan& sp = spans[s];
    KvCache& c = *caches[s];
    DEGEN_ASSERT(c.len == sp.pos0, "KV cache holds ", c.len, " rows but the sequence is at position ", sp.pos0);
    DEGEN_ASSERT(sp.row0 == static_cast<int64_t>(dst_row.size()), "attention: spans in batch order");
    const int64_t off = sp.rows == 1 && numerics_.has(Fault::kv_off_by_one) ? 1 : 0;  // fault: row at pos + 1
    if (graphs_segment()) {
      if (c.capacity() < c.len + sp.rows + off)
        throw std::logic_error("graphs=on: a KV cache would grow inside a graph step (Engine::graph_key checks the room)");
    } else if (c.capacity() < c.len + sp.rows + 2) {
      kv_reserve(*this, c, c.len + sp.rows + 2, n_kv, D, kv_dtype);
    }
    for (int64_t t = 0; t < sp.rows; ++t) {
      dst_row.push_back(c.len + t + off);
      all_seq.push_back(static_cast<int32_t>(s));
    }
    max_cap = std::max(max_cap, c.capacity());
  }
  DEGEN_ASSERT(static_cast<int64_t>(dst_row.size()) == N, "attention: spans cover ", dst_row.size(), " of ", N, " rows");

  // 2. the sequence table, the rows of each algorithm (splitkv, grouped: one-row sequences only; the
  // others run flash), and the K/V store's tables
  std::vector<cuda::AttnSeq> seqs(spans.size());
  p.tc_rows = cuda::attention_flash_tc_rows(act_dtype(), kv_dtype, static_cast<int>(D),
                                            context()->props().sharedMemPerBlockOptin, flash_tc_rows_cap_);
  for (size_t s = 0; s < spans.size(); ++s) {
    const SeqSpan& sp = spans[s];
    seqs[s] = cuda::AttnSeq{caches[s]->k.raw(), caches[s]->v.raw(), sp.row0, sp.pos0};
    AttnAlgo run = algo;
    if ((algo == AttnAlgo::splitkv || algo == AttnAlgo::grouped) && sp.rows != 1) run = AttnAlgo::flash;
    if (run == AttnAlgo::flash && sp.rows > 1 && p.tc_rows > 0) {  // tensor cores: tiles of tc_rows rows
      for (int64_t t0 = 0; t0 < sp.rows; t0 += p.tc_rows)
        p.tc_tiles.insert(p.tc_tiles.end(), {static_cast<int32_t>(s), static_cast<int32_t>(t0),
                                             static_cast<int32_t>(std::min<int64_t>(p.tc_rows, sp.rows - t0))});
      continue;
    }
    const int a = static_cast<int>(run);
    for (int64_t t = 0; t < sp.rows; ++t) {
      p.rows[a].push_back(static_cast<int32_t>(sp.row0 + t));
      p.row_seq[a].push_back(static_cast<int32_t>(s));
    }
    // note: in a graph step the naive scores' stride and grouped's parts bound come from the caches'
    // capacity, which the step's key fixes, not from the context, which grows every step.
    p.max_ctx[a] = std::max(p.max_ctx[a], graphs_segment() ? max_cap : sp.pos0 + sp.rows);
  }
  std::vector<uint8_t> seq_bytes(seqs.size() * sizeof(cuda::AttnSeq));
  if (!seqs.empty()) std::memcpy(seq_bytes.data(), seqs.data(), seq_bytes.size());
  p.dseqs = upload(seq_bytes, DType::u8, "attention sequences");
  p.store_seq = upload(all_seq, DType::i32, "kv store sequences");
  p.store_dst = upload(dst_row, DType::i64, "kv store rows");
  for (size_t s = 0; s < spans.size(); ++s) caches[s]->len += spans[s].rows;
  return p;
}

cuda::KvStore CudaBackend::kv_store(const AttnPlan& p, const Tensor& v) const {
  cuda::KvStore st;
  st.v = v.raw();
  st.seqs = reinterpret_cast<const cuda::AttnSeq*>(p.dseqs.raw());
  st.row_seq = p.store_seq.data<int32_t>();
  st.dst_row = p.store_dst.data<int64_t>();
  st.kv_dtype = numerics_.kv_dtype;
  return st;
}

// Step 3: one launch per algorithm, after the K/V rows were stored.
unsigned* CudaBackend::grouped_tickets(int64_t n) {
  if (grouped_tickets_.numel() < n) {
    if (grouped_tickets_.storage) retired_tickets_.push_back(grouped_tickets_);
    const int64_t size = std::max<int64_t>(n, 2 * grouped_tickets_.numel());
    grouped_tickets_ = device_tensor({size}, DType::i32, "attention grouped tickets", /*step_buffer=*/false);
    CUDA_CHECK(cudaMemsetAsync(grouped_tickets_.raw(), 0, grouped_tickets_.nbytes(), context()->stream()));
  }
  return static_cast<unsigned*>(grouped_tickets_.raw());
}

Tensor CudaBackend::attention_run(const AttnPlan& p, const Tensor& q) {
  cudaStream_t st = context()->stream();
  Tensor out = device_tensor({p.N, p.n_q * p.D}, q.dtype, "attention");
  auto base_args = [&] {
    cuda::AttnArgs args;
    args.q = q.raw();
    args.out = out.raw();
    args.act_dtype = q.dtype;
    args.seqs = reinterpret_cast<const cuda::AttnSeq*>(p.dseqs.raw());
    args.n_q = static_cast<int>(p.n_q);
    args.n_kv = static_cast<int>(p.n_kv);
    args.D = static_cast<int>(p.D);
    args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
    args.kv_dtype = numerics_.kv_dtype;
    return args;
  };
  if (!p.tc_tiles.empty()) {
    Tensor tiles = upload(p.tc_tiles, DType::i32, "attention tiles");
    static_assert(sizeof(cuda::AttnTile) == 3 * sizeof(int32_t), "AttnTile is three int32");
    cuda::attention_flash_tc_cuda(base_args(), reinterpret_cast<const cuda::AttnTile*>(tiles.raw()),
                                  static_cast<int64_t>(p.tc_tiles.size() / 3), p.tc_rows, st);
  }
  for (int a = 0; a < kAttnAlgoCount; ++a) {
    if (p.rows[a].empty()) continue;
    Tensor drows = upload(p.rows[a], DType::i32, "attention rows");
    Tensor dseq = upload(p.row_seq[a], DType::i32, "attention row sequences");
    cuda::AttnArgs args = base_args();
    args.rows = drows.data<int32_t>();
    args.row_seq = dseq.data<int32_t>();
    args.M = static_cast<int64_t>(p.rows[a].size());
    args.max_ctx = p.max_ctx[a];
    switch (static_cast<AttnAlgo>(a)) {
      case AttnAlgo::naive: {
        Tensor scratch = device_tensor({args.M * p.n_q, args.max_ctx}, q.dtype, "attention scores");
        cuda::attention_naive_cuda(args, scratch.raw(), st);
        break;
      }
      case AttnAlgo::flash: cuda::attention_flash_cuda(args, st); break;
      case AttnAlgo::splitkv: {
        Tensor part = device_tensor({args.M * p.n_q, cuda::kSplits, p.D}, DType::f32, "attention partials");
        Tensor lse = device_tensor({args.M * p.n_q, cuda::kSplits}, DType::f32, "attention lse");
        cuda::attention_splitkv_cuda(args, part.data<float>(), lse.data<float>(), st);
        break;
      }
      case AttnAlgo::grouped: {
        const int sms = context()->props().multiProcessorCount;
        const int64_t parts = grouped_max_parts(args.max_ctx, grouped_blocks_per_row(p.n_q, p.n_kv), sms);
        Tensor part = parts > 1 ? device_tensor({args.M * p.n_q, parts, p.D}, DType::f32, "attention partials") : Tensor();
        Tensor lse = parts > 1 ? device_tensor({args.M * p.n_q, parts}, DType::f32, "attention lse") : Tensor();
        cuda::attention_grouped_cuda(args, sms, parts, parts > 1 ? part.data<float>() : nullptr,
                                     parts > 1 ? lse.data<float>() : nullptr,
                                     parts > 1 ? grouped_tickets(cuda::attention_grouped_tickets(args)) : nullptr, st);
        break;
      }
    }
  }
  return out;
}

Tensor CudaBackend::do_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                                 const std::vector<KvCache*>& caches) {
  require_device(q, "attention");
  require_device(k, "attention");
  require_device(v, "attention");
  const int64_t N = q.shape[0], n_q = q.shape[1], D = q.shape[2], n_kv = k.shape[1];
  DEGEN_ASSERT(q.dtype == act_dtype() && k.dtype == q.dtype && v.dtype == q.dtype, "attention: q/k/v in ",
               dtype_name(act_dtype()), ", got ", dtype_name(q.dtype), "/", dtype_name(k.dtype), "/", dtype_name(v.dtype));
  const AttnPlan p = attention_plan(N, n_q, n_kv, D, spans, caches);
  const cuda::KvStore store = kv_store(p, v);
  cuda::kv_append_cuda(k.raw(), v.raw(), q.dtype, store.seqs, store.row_seq, store.dst_row, N, n_kv * D, store.kv_dtype,
                       context()->stream());
  return attention_run(p, q);
}

}  // namespace degen
