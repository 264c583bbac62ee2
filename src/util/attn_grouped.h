// attn=grouped (DESIGN.md §5): FlashInfer-style decode attention. How a decode row's keys are cut
// into parts, shared by the CPU twin (src/cpu/attention.cpp) and the kernel
// (kernels/attention_grouped.cu), so both split a row the same way when given the same SM count.
//
// One GPU block serves one KV head of one decode row and up to kGroupedHeads of the query heads that
// read it (the whole group for every shipped layout), so each key and value row is read once per
// block, not once per query head. The row's keys are cut into parts of grouped_chunk() keys, each
// reduced by one block to a partial output and its log-sum-exp, merged as attn=splitkv merges them.
// The chunk is chosen, as FlashInfer's decode planner chooses its KV chunk, so that one row's blocks
// fill about two waves of the device's SMs, with at least kGroupedMinChunk keys per part; it
// depends on the row's own context and the head layout only, never on the rest of the batch, so a
// row's result does not depend on what it is batched with.
// note: the split therefore depends on the device's SM count, as FlashInfer's does: the CPU twin
// uses kGroupedNominalSms (H100 / H200 SXM); on another device the parts differ, which moves the
// result by fp32 rounding only (well inside the bf16 tolerance of the op test).
#pragma once
#include <cstdint>

#ifndef DEGEN_HD
#ifdef __CUDACC__
#define DEGEN_HD __host__ __device__
#else
#define DEGEN_HD
#endif
#endif

namespace degen {

constexpr int kGroupedTile = 32;          // keys per tile: one warp lane per key in the softmax step
constexpr int kGroupedHeads = 8;          // query heads one block serves at most (a larger group: more blocks)
constexpr int64_t kGroupedMinChunk = 256; // keys per part at least (shorter parts cost more merge than they gain)
constexpr int kGroupedNominalSms = 132;   // H100 / H200 SXM (NVIDIA H100 / H200 datasheets): the CPU twin's device

// Blocks one decode row needs per part: one per KV head and chunk of kGroupedHeads query heads.
DEGEN_HD inline int64_t grouped_blocks_per_row(int64_t n_q, int64_t n_kv) {
  const int64_t group = n_q / n_kv;
  return n_kv * ((group + kGroupedHeads - 1) / kGroupedHeads);
}

// The parts one row's blocks want: about two waves of the SMs, at least 1.
DEGEN_HD inline int64_t grouped_parts_wanted(int64_t blocks_per_row, int sms) {
  const int64_t p = 2 * int64_t(sms) / (blocks_per_row > 0 ? blocks_per_row : 1);
  return p > 1 ? p : 1;
}

// Keys per part of a row with `ctx` keys: ctx / parts_wanted rounded up to whole tiles, at least
// kGroupedMinChunk. The row has ceil(ctx / chunk) parts.
DEGEN_HD inline int64_t grouped_chunk(int64_t ctx, int64_t blocks_per_row, int sms) {
  const int64_t want = grouped_parts_wanted(blocks_per_row, sms);
  int64_t len = (ctx + want - 1) / want;
  len = (len + kGroupedTile - 1) / kGroupedTile * kGroupedTile;
  return len > kGroupedMinChunk ? len : kGroupedMinChunk;
}

DEGEN_HD inline int64_t grouped_parts(int64_t ctx, int64_t blocks_per_row, int sms) {
  const int64_t len = grouped_chunk(ctx, blocks_per_row, sms);
  return ctx > 0 ? (ctx + len - 1) / len : 1;
}

// An upper bound of grouped_parts over every ctx <= max_ctx (the launch's grid and scratch):
// a part holds at least ctx / parts_wanted and at least kGroupedMinChunk keys.
DEGEN_HD inline int64_t grouped_max_parts(int64_t max_ctx, int64_t blocks_per_row, int sms) {
  const int64_t want = grouped_parts_wanted(blocks_per_row, sms);
  const int64_t by_len = (max_ctx + kGroupedMinChunk - 1) / kGroupedMinChunk;
  const int64_t p = want < by_len ? want : by_len;
  return p > 1 ? p : 1;
}

}  // namespace degen
