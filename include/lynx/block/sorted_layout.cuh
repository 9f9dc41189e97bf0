#pragma once
// lynx::block_sorted_layout: the expert-sorted layout of a routed batch (sorted_layout.hpp),
// block-collective, for the ids a block has just written (the end of lynx::route's fused kernel,
// topk_route's last block) or any ids. Deterministic without sorting: the per-expert counts are
// integer atomics, the offsets a cub::WarpScan in each warp that holds experts plus the warps'
// totals, and a slot's rank inside its expert is a popcount over bit masks of the slots before
// it, built a pass of up to BlockThreads slots at a time (one slot a thread; the first pass's
// masks with the counts, three barriers for each further pass).

#include <cub/warp/warp_scan.cuh>

#include <cstdint>

#include "../detail/config.hpp"
#include "../sorted_layout.hpp"

namespace lynx {
namespace detail {

/// The offsets scan's per-expert term for the slots and the compact index in one 64-bit sum:
/// "has a slot" above bit 53 (at most max_experts of them), the slots below (fewer than 2^31).
inline constexpr int active_shift = 53;
__device__ __forceinline__ std::uint64_t slots_term(int count) {
  return (static_cast<std::uint64_t>(count > 0) << active_shift) | static_cast<std::uint64_t>(count);
}
__device__ __forceinline__ int term_slots(std::uint64_t v) {
  return static_cast<int>(v & ((std::uint64_t{1} << active_shift) - 1));
}
__device__ __forceinline__ int term_active(std::uint64_t v) { return static_cast<int>(v >> active_shift); }

/// An id written by another block of the same grid (after its fence): read past L1.
template <class IdT>
__device__ __forceinline__ IdT load_id_cg(const IdT* p) {
  if constexpr (sizeof(IdT) == 8)
    return static_cast<IdT>(__ldcg(reinterpret_cast<const long long*>(p)));
  else
    return static_cast<IdT>(__ldcg(reinterpret_cast<const int*>(p)));
}

}  // namespace detail

/// MaxN bounds n; BlockThreads is the block's size (a multiple of 32). MaskBytes bounds the
/// shared memory of the rank masks: a pass covers 32 * min(BlockThreads / 32, MaskBytes / (4 MaxN))
/// slots (512 at MaxN 128 with 8 KiB, 128 at MaxN 512).
template <int MaxN, int BlockThreads, int MaskBytes = 8192>
class block_sorted_layout {
  static_assert(BlockThreads % 32 == 0, "whole warps");
  static constexpr int items = (MaxN + BlockThreads - 1) / BlockThreads;  // experts a thread scans
  static constexpr int mask_chunks = MaskBytes / (4 * MaxN);
  static constexpr int chunks =
      mask_chunks < 1 ? 1 : (mask_chunks > BlockThreads / 32 ? BlockThreads / 32 : mask_chunks);
  // The offsets scan runs on the warps that hold experts (thread j: experts j * items, ...):
  // cub::WarpScan in each, then the warps' totals. A cub::BlockScan of the whole block would
  // add up to 32 warps' totals in every thread, which spills at 1024 threads (64 registers).
  static constexpr int scan_warps = (MaxN + 32 * items - 1) / (32 * items);
  using warp_scan64_t = cub::WarpScan<std::uint64_t>;
  using warp_scan32_t = cub::WarpScan<int>;

 public:
  /// Slots a pass places (at most one a thread).
  static constexpr int pass_slots = 32 * chunks;

  struct TempStorage {
    typename warp_scan64_t::TempStorage scan64[scan_warps];
    typename warp_scan32_t::TempStorage scan32[scan_warps];
    std::uint64_t warp_slots[scan_warps];  // each scanning warp's sum of slots_term
    int warp_blocks[scan_warps];           // and of blocks
    int placed[MaxN];  // per local expert: its slots (counting), then those placed in earlier passes
    int start[MaxN];   // the expert's first position, compact and padded
    int padded_start[MaxN];
    std::uint32_t mask[chunks][MaxN];  // this pass: bit i of chunk c = slot base + 32 c + i is the expert's
  };

  __device__ __forceinline__ explicit block_sorted_layout(TempStorage& temp) : temp_(temp) {}

  /// Block-collective: writes every requested array of `out` for ids [num_rows x k] over n <=
  /// MaxN experts (ids == null: no slot takes part). The ids must be visible to the block (a
  /// __syncthreads after this block wrote them; a fence and a grid-wide count for another
  /// block's), and out.block_size >= 1 where vLLM's arrays are asked for (layout_fits).
  /// TempStorage may be reused after a __syncthreads.
  template <class IdT>
  __device__ __forceinline__ void run(const IdT* ids, int num_rows, int k, int n, const sorted_layout_ref& out) {
    const int tid = static_cast<int>(threadIdx.x), slots = num_rows * k, bs = out.block_size;
    for (int e = tid; e < MaxN; e += BlockThreads) {
      temp_.placed[e] = 0;
#pragma unroll
      for (int c = 0; c < chunks; ++c) temp_.mask[c][e] = 0;
    }
    __syncthreads();
    // Counts; a thread's first slot (s = tid) is also its slot in the first pass, so that pass's
    // masks are built here too. (Its expert is loaded again there rather than kept: registers
    // are what the 1024-thread fused kernel has least of.)
    const int chunk = tid / 32;
    const std::uint32_t bit = 1u << (tid % 32);
    if (const int e = tid < slots ? local_expert(ids, tid, n, out.expert_map) : -1; e >= 0) {
      atomicAdd(&temp_.placed[e], 1);
      if (tid < pass_slots) atomicOr(&temp_.mask[chunk][e], bit);
    }
    for (int s = tid + BlockThreads; s < slots && ids; s += BlockThreads)
      if (const int e = local_expert(ids, s, n, out.expert_map); e >= 0) atomicAdd(&temp_.placed[e], 1);
    __syncthreads();
    // Offsets: exclusive scans over experts (blocked by thread) of the slots with the compact
    // index, and of the blocks of block_size (vLLM's padded runs; one division an expert).
    int count[items], blocks[items];
    std::uint64_t at[items];
#pragma unroll
    for (int i = 0; i < items; ++i) {
      const int e = tid * items + i;
      count[i] = e < n ? temp_.placed[e] : 0;
      at[i] = detail::slots_term(count[i]);
      blocks[i] = bs > 0 ? (count[i] + bs - 1) / bs : 0;
    }
    std::uint64_t total;
    int total_blocks;
    scan(at, blocks, total, total_blocks);
    const int total_slots = detail::term_slots(total), total_active = detail::term_active(total);
#pragma unroll
    for (int i = 0; i < items; ++i) {
      const int e = tid * items + i;
      if (e >= n) continue;
      const int start = detail::term_slots(at[i]), index = detail::term_active(at[i]);
      temp_.start[e] = start, temp_.padded_start[e] = blocks[i] * bs, temp_.placed[e] = 0;
      if (count[i] == 0) continue;
      if (out.active_experts) out.active_experts[index] = e;
      if (out.expert_counts) out.expert_counts[index] = count[i];
      if (out.expert_offsets) out.expert_offsets[index] = start;
      if (out.expert_ids)
        for (int b = blocks[i], end = blocks[i] + (count[i] + bs - 1) / bs; b < end; ++b) out.expert_ids[b] = e;
    }
    if (tid == 0) {
      if (out.num_active) *out.num_active = total_active;
      if (out.num_tokens_post_padded) *out.num_tokens_post_padded = total_blocks * bs;
    }
    // Past the used part of every array (every thread has the scans' aggregates).
    for (int i = total_active + tid; i < n; i += BlockThreads) {
      if (out.active_experts) out.active_experts[i] = -1;
      if (out.expert_counts) out.expert_counts[i] = 0;
    }
    if (out.expert_offsets)
      for (int i = total_active + tid; i <= n; i += BlockThreads) out.expert_offsets[i] = total_slots;
    if (out.position_slot)
      for (int i = total_slots + tid; i < slots; i += BlockThreads) out.position_slot[i] = -1;
    if (out.wants_vllm()) {
      const int cap = static_cast<int>(vllm_sorted_capacity(slots, n, bs > 0 ? bs : 1, out.pad_sorted_ids));
      if (out.sorted_token_ids)  // every entry the sentinel; the slots overwrite theirs after the barrier
        for (int i = tid; i < cap; i += BlockThreads) out.sorted_token_ids[i] = slots;
      if (out.expert_ids)
        for (int b = total_blocks + tid, end = (cap + bs - 1) / bs; b < end; b += BlockThreads) out.expert_ids[b] = -1;
    }
    __syncthreads();
    // Every slot at its expert's start plus the slots before it (earlier passes, earlier chunks,
    // lower lanes of its own chunk).
#pragma unroll 1
    for (int base = 0; base < slots; base += pass_slots) {
      const int s = base + tid;
      const bool mine = tid < pass_slots && s < slots;
      const int e = mine ? local_expert(ids, s, n, out.expert_map) : -1;
      if (base > 0) {
        if (e >= 0) atomicOr(&temp_.mask[chunk][e], bit);
        __syncthreads();
      }
      if (mine && e < 0 && out.slot_position) out.slot_position[s] = -1;
      if (e >= 0) {
        int r = temp_.placed[e] + __popc(temp_.mask[chunk][e] & (bit - 1));
        for (int c = 0; c < chunk; ++c) r += __popc(temp_.mask[c][e]);
        if (out.slot_position) out.slot_position[s] = temp_.start[e] + r;
        if (out.position_slot) out.position_slot[temp_.start[e] + r] = s;
        if (out.sorted_token_ids) out.sorted_token_ids[temp_.padded_start[e] + r] = s;
      }
      if (base + pass_slots >= slots) break;
      __syncthreads();
      for (int x = tid; x < n; x += BlockThreads) {
        int add = 0;
#pragma unroll
        for (int c = 0; c < chunks; ++c) add += __popc(temp_.mask[c][x]), temp_.mask[c][x] = 0;
        temp_.placed[x] += add;
      }
      __syncthreads();
    }
  }

 private:
  /// Exclusive sums over the experts (blocked by thread) of at and blocks, in place, and their
  /// totals in every thread. Ends with a barrier (the totals were read from shared memory).
  __device__ __forceinline__ void scan(std::uint64_t (&at)[items], int (&blocks)[items], std::uint64_t& total,
                                       int& total_blocks) {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    if (warp < scan_warps) {  // whole warps: the thread's own sums, scanned across the warp
      std::uint64_t mine = 0;
      int mine_blocks = 0;
#pragma unroll
      for (int i = 0; i < items; ++i) mine += at[i], mine_blocks += blocks[i];
      std::uint64_t before, warp_total;
      int before_blocks, warp_total_blocks;
      warp_scan64_t(temp_.scan64[warp]).ExclusiveSum(mine, before, warp_total);
      warp_scan32_t(temp_.scan32[warp]).ExclusiveSum(mine_blocks, before_blocks, warp_total_blocks);
      if (lane == 0) temp_.warp_slots[warp] = warp_total, temp_.warp_blocks[warp] = warp_total_blocks;
#pragma unroll
      for (int i = 0; i < items; ++i) {
        const std::uint64_t a = at[i];
        const int b = blocks[i];
        at[i] = before, blocks[i] = before_blocks;
        before += a, before_blocks += b;
      }
    }
    __syncthreads();
    total = 0, total_blocks = 0;
#pragma unroll
    for (int w = 0; w < scan_warps; ++w) {  // the warps before this one, then the rest
      const std::uint64_t a = temp_.warp_slots[w];
      const int b = temp_.warp_blocks[w];
      if (w < warp) {
#pragma unroll
        for (int i = 0; i < items; ++i) at[i] += a, blocks[i] += b;
      }
      total += a, total_blocks += b;
    }
  }

  /// Slot s's local expert, or -1 (no ids: no slot takes part).
  template <class IdT>
  __device__ __forceinline__ static int local_expert(const IdT* ids, int s, int n, const std::int32_t* map) {
    return ids ? detail::layout_expert(detail::load_id_cg(ids + s), n, map) : -1;
  }

  TempStorage& temp_;
};

}  // namespace lynx
