#pragma once
// lynx::block_sorted_layout: the expert-sorted layout of a routed batch (sorted_layout.hpp),
// block-collective, for the ids a block has just written (the end of lynx::route's fused kernel,
// topk_route's last block) or any ids. Deterministic without sorting: the per-expert counts are
// integer atomics, the offsets one cub::BlockScan, and a slot's rank inside its expert is a
// popcount over bit masks of the slots before it, built a pass of up to BlockThreads slots at a
// time (one slot a thread; the first pass's masks with the counts, three barriers for each
// further pass).

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "../detail/config.hpp"
#include "../sorted_layout.hpp"

namespace lynx {
namespace detail {

/// What the offsets scan sums per expert: slots, "has a slot" (the compact index), padded slots.
struct layout_sums {
  int slots, active, padded;
};
struct layout_sums_add {
  __device__ __forceinline__ layout_sums operator()(const layout_sums& a, const layout_sums& b) const {
    return {a.slots + b.slots, a.active + b.active, a.padded + b.padded};
  }
};

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
  using scan_t = cub::BlockScan<detail::layout_sums, BlockThreads>;

 public:
  /// Slots a pass places (at most one a thread).
  static constexpr int pass_slots = 32 * chunks;

  struct TempStorage {
    typename scan_t::TempStorage scan;
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
  __device__ void run(const IdT* ids, int num_rows, int k, int n, const sorted_layout_ref& out) {
    const int tid = static_cast<int>(threadIdx.x), slots = num_rows * k, bs = out.block_size;
    const auto local = [&](int s) { return ids ? detail::layout_expert(detail::load_id_cg(ids + s), n, out.expert_map) : -1; };
    for (int e = tid; e < MaxN; e += BlockThreads) {
      temp_.placed[e] = 0;
#pragma unroll
      for (int c = 0; c < chunks; ++c) temp_.mask[c][e] = 0;
    }
    __syncthreads();
    // Counts; a thread's first slot (s = tid) is also its slot in the first pass, so that pass's
    // masks are built here too.
    const int chunk = tid / 32;
    const std::uint32_t bit = 1u << (tid % 32);
    const int first = tid < slots ? local(tid) : -1;
    if (first >= 0) {
      atomicAdd(&temp_.placed[first], 1);
      if (tid < pass_slots) atomicOr(&temp_.mask[chunk][first], bit);
    }
    for (int s = tid + BlockThreads; s < slots && ids; s += BlockThreads)
      if (const int e = local(s); e >= 0) atomicAdd(&temp_.placed[e], 1);
    __syncthreads();
    // Offsets: one scan of (slots, has slots, padded slots) over experts, blocked by thread.
    int count[items];
    detail::layout_sums at[items];
#pragma unroll
    for (int i = 0; i < items; ++i) {
      const int e = tid * items + i;
      count[i] = e < n ? temp_.placed[e] : 0;
      at[i] = {count[i], count[i] > 0, detail::padded_run(count[i], bs)};
    }
    detail::layout_sums total;
    scan_t(temp_.scan).ExclusiveScan(at, at, detail::layout_sums{0, 0, 0}, detail::layout_sums_add{}, total);
#pragma unroll
    for (int i = 0; i < items; ++i) {
      const int e = tid * items + i;
      if (e >= n) continue;
      temp_.start[e] = at[i].slots, temp_.padded_start[e] = at[i].padded, temp_.placed[e] = 0;
      if (count[i] == 0) continue;
      if (out.active_experts) out.active_experts[at[i].active] = e;
      if (out.expert_counts) out.expert_counts[at[i].active] = count[i];
      if (out.expert_offsets) out.expert_offsets[at[i].active] = at[i].slots;
      if (out.expert_ids)
        for (int b = at[i].padded / bs; b < (at[i].padded + detail::padded_run(count[i], bs)) / bs; ++b)
          out.expert_ids[b] = e;
    }
    if (tid == 0) {
      if (out.num_active) *out.num_active = total.active;
      if (out.num_tokens_post_padded) *out.num_tokens_post_padded = total.padded;
    }
    // Past the used part of every array (every thread has the scan's aggregate).
    for (int i = total.active + tid; i < n; i += BlockThreads) {
      if (out.active_experts) out.active_experts[i] = -1;
      if (out.expert_counts) out.expert_counts[i] = 0;
    }
    if (out.expert_offsets)
      for (int i = total.active + tid; i <= n; i += BlockThreads) out.expert_offsets[i] = total.slots;
    if (out.position_slot)
      for (int i = total.slots + tid; i < slots; i += BlockThreads) out.position_slot[i] = -1;
    if (out.wants_vllm()) {
      const int cap = static_cast<int>(vllm_sorted_capacity(slots, n, bs, out.pad_sorted_ids));
      if (out.sorted_token_ids)  // every entry the sentinel; the slots overwrite theirs after the barrier
        for (int i = tid; i < cap; i += BlockThreads) out.sorted_token_ids[i] = slots;
      if (out.expert_ids)
        for (int b = total.padded / bs + tid; b < (cap + bs - 1) / bs; b += BlockThreads) out.expert_ids[b] = -1;
    }
    __syncthreads();
    // Every slot at its expert's start plus the slots before it (earlier passes, earlier chunks,
    // lower lanes of its own chunk).
    for (int base = 0; base < slots; base += pass_slots) {
      const int s = base + tid;
      const bool mine = tid < pass_slots && s < slots;
      const int e = base == 0 ? (mine ? first : -1) : (mine ? local(s) : -1);
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
  TempStorage& temp_;
};

}  // namespace lynx
