// Launchers of the attention kernels (kernels/attention_naive.cu, attention_flash.cu,
// attention_splitkv.cu, attention_grouped.cu): causal GQA softmax attention of bf16 queries over each sequence's KV cache
// (spec model.md §4.4 step 6), mirroring src/cpu/attention.cpp. Device pointers, caller's stream.
// The cache append itself is a dtype cast (layout.h convert_cuda) done by the host code.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "util/dtype.h"

namespace degen::cuda {

// One sequence of the batch as the kernels see it.
struct AttnSeq {
  const void* k = nullptr;  // cache [capacity, n_kv, D] of kv_dtype
  const void* v = nullptr;
  int64_t row0 = 0;         // first query row in the batch
  int64_t pos0 = 0;         // absolute position of that row: row row0 + t attends keys [0, pos0 + t]
};

struct AttnArgs {
  const void* q = nullptr;           // [N, n_q, D] of act_dtype
  void* out = nullptr;               // [N, n_q * D] of act_dtype
  const AttnSeq* seqs = nullptr;     // device [S]
  const int32_t* rows = nullptr;     // device [M]: the batch rows this launch computes
  const int32_t* row_seq = nullptr;  // device [M]: their sequence index into seqs
  int64_t M = 0;                     // rows in this launch
  int n_q = 0, n_kv = 0, D = 0;
  float scale = 0;                   // D^-1/2
  DType act_dtype = DType::bf16;     // bf16 (the GPU path) or f32 (precision=ref)
  DType kv_dtype = DType::bf16;      // bf16, f8_e4m3 or f32
  int64_t max_ctx = 0;               // the longest context of these rows (scratch sizing)
};

constexpr int kAttnMaxHeadDim = 512;  // every kernel keeps a query row and its output in registers/shared
constexpr int kFlashTile = 64;        // keys per tile (src/cpu/attention.cpp kFlashTile)
constexpr int kSplits = 4;            // split-KV parts of a decode row (src/cpu/attention.cpp kSplits)

// flash on tensor cores (kernels/attention_flash.cu): a block computes up to `rows` (64, 32 or 16:
// 4, 2 or 1 warps) consecutive query rows of one sequence for one query head; the tiles come from a
// device table.
constexpr int kFlashTcMaxRows = 64;
struct AttnTile {
  int32_t seq = 0;   // index into AttnArgs::seqs
  int32_t t0 = 0;    // first row, relative to the sequence's first batch row
  int32_t rows = 0;  // 1 .. the launch's rows per block
};
// The rows per block of the tensor-core kernel for these dtypes and head_dim on a device whose
// blocks may use `max_smem` bytes of shared memory (cudaDeviceProp::sharedMemPerBlockOptin): the
// most of 64, 32, 16 whose Q, K, V tiles and fp32 output fit (64 at head_dim 256 on Hopper's 227 KiB,
// 16 on Ampere's 99 KiB), at most `cap` (0: no cap); 0 where the kernel does not apply. It needs
// bf16 activations, a bf16 or fp8 cache (fp8 widens to bf16 exactly) and D a multiple of 16.
int attention_flash_tc_rows(DType act, DType kv, int D, size_t max_smem, int cap = 0);
size_t attention_flash_tc_smem(int D, int rows);  // its dynamic shared memory in bytes

// Stores the new K and V rows in the caches: batch row i of k and v (bf16 [N, row_elems] of act_dtype) goes to
// row dst_row[i] of sequence row_seq[i]'s cache (seqs[].k / .v, converted to kv_dtype as
// convert_cuda does). The destinations come from device tables, so a replayed graph step writes
// where this step's positions say (kernels/kv_append.cu).
void kv_append_cuda(const void* k, const void* v, DType act_dtype, const AttnSeq* seqs, const int32_t* row_seq,
                    const int64_t* dst_row, int64_t N, int64_t row_elems, DType kv_dtype, cudaStream_t stream);

// naive: scores materialised in the activation dtype into `scratch` ([M * n_q, max_ctx] of
// act_dtype), fp32 softmax, probabilities materialised in the activation dtype, P·V in fp32.
void attention_naive_cuda(const AttnArgs& a, void* scratch, cudaStream_t stream);
// flash: tiles of kFlashTile keys, running max/sum in fp32, probabilities rounded to bf16 for P·V
// (under every precision: part of the algorithm, as on the CPU).
void attention_flash_cuda(const AttnArgs& a, cudaStream_t stream);
// The same algorithm on tensor cores (FlashAttention-2's structure) for the rows of `tiles` (device
// [n_tiles]; a.rows / a.row_seq / a.M are not read): S = Q K^T and O += P V as bf16 products with
// fp32 accumulation in 16x16x16 warp tiles, the online softmax over the same kFlashTile-key tiles as
// flash, so that it equals attention_flash_cuda up to fp32 summation order. Needs
// rows = attention_flash_tc_rows(...) > 0, every tile at most `rows` rows.
void attention_flash_tc_cuda(const AttnArgs& a, const AttnTile* tiles, int64_t n_tiles, int rows, cudaStream_t stream);
// splitkv: each row's keys in min(kSplits, ctx) parts, each reduced as flash to a partial output
// and log-sum-exp (fp32 scratch: part [M * n_q, kSplits, D], lse [M * n_q, kSplits]), then merged.
void attention_splitkv_cuda(const AttnArgs& a, float* part, float* lse, cudaStream_t stream);
// grouped (src/util/attn_grouped.h): one block per (row, KV head, up to kGroupedHeads query heads,
// part of grouped_chunk(ctx, ..., sms) keys), fp32 probabilities in P·V; rows of several parts go
// through fp32 scratch (part [M * n_q, max_parts, D], lse [M * n_q, max_parts]), merged by the last
// of the row's blocks to finish, counted in `tickets` (attention_grouped_tickets(a) counters, zero
// before the launch and left zero after it; unused when max_parts == 1). One launch.
// max_parts >= grouped_max_parts(max_ctx, ...); a.D % 8 == 0.
int64_t attention_grouped_tickets(const AttnArgs& a);
void attention_grouped_cuda(const AttnArgs& a, int sms, int64_t max_parts, float* part, float* lse, unsigned* tickets,
                            cudaStream_t stream);

}  // namespace degen::cuda
