#pragma once
// The expert-sorted layout of a routed batch: what a grouped GEMM needs after routing, written
// by the routing launch itself (lynx::route, lynx::topk_route) or from any ids
// (lynx::sorted_layout, lynx::host::sorted_layout). Plain C++: the types, the buffer sizes and
// the per-slot rule that the host path and the kernels share.
//
// A slot is s = t * k + j (row t's j-th id, the flat index into ids). A slot takes part when
// its id e lies in [0, N) and, with an expert map, map[e] lies in [0, N) too; its local expert
// is map[e] (or e). Rows that do not vote (SPEC §5) take part with their weight-0 pad ids,
// unless route_params::pad_with_sentinel gave them the sentinel, which lies outside [0, N).
// Slots are ordered by local expert, then by s (stable: ascending token inside an expert).

#include <cstdint>

#include "detail/config.hpp"

namespace lynx {

/// Where the layout goes (device memory for the launchers, host memory for lynx::host). Every
/// pointer is optional: null means that array is not written. int32 throughout, as vLLM's.
struct sorted_layout_ref {
  /// Optional [N]: global expert id -> local id of this rank, or -1 (expert parallelism).
  /// Slots whose expert maps outside [0, N) are left out of everything below.
  const std::int32_t* expert_map = nullptr;

  // The compact layout (|K| = the local experts with at least one slot).
  std::int32_t* num_active = nullptr;      ///< [1]: |K|
  std::int32_t* active_experts = nullptr;  ///< [N]: ascending local ids; -1 from |K| on
  std::int32_t* expert_counts = nullptr;   ///< [N]: slots of active_experts[i]; 0 from |K| on
  std::int32_t* expert_offsets = nullptr;  ///< [N + 1]: exclusive offsets; the slot total from |K| on
  std::int32_t* slot_position = nullptr;   ///< [rows * k]: slot -> position in sorted order, or -1
  std::int32_t* position_slot = nullptr;   ///< [rows * k]: position -> slot; -1 past the total

  // vLLM's moe_align_block_size output (block_size > 0), sizes from vllm_sorted_capacity.
  int block_size = 0;            ///< BLOCK_SIZE_M of the grouped GEMM
  bool pad_sorted_ids = false;   ///< vLLM's pad_sorted_ids (capacity rounded up to block_size)
  std::int32_t* sorted_token_ids = nullptr;        ///< [capacity]: slots, each run padded with rows * k
  std::int32_t* expert_ids = nullptr;              ///< [capacity / block_size]: local expert, -1 unused
  std::int32_t* num_tokens_post_padded = nullptr;  ///< [1]: the padded total

  /// Whether any array is asked for (a launcher with an empty ref writes no layout).
  LYNX_HD bool wanted() const {
    return num_active || active_experts || expert_counts || expert_offsets || slot_position || position_slot ||
           sorted_token_ids || expert_ids || num_tokens_post_padded;
  }
  LYNX_HD bool wants_vllm() const { return sorted_token_ids || expert_ids || num_tokens_post_padded; }
};

/// vLLM's sorted_token_ids length for `slots` = rows * k ids over `num_experts` (global) experts:
/// slots + N * (block_size - 1), rounded up to block_size with pad_sorted_ids, and at most
/// slots * block_size when slots < N (vLLM's moe_align_block_size.py).
LYNX_HD std::int64_t vllm_sorted_capacity(std::int64_t slots, int num_experts, int block_size,
                                          bool pad_sorted_ids = false) {
  std::int64_t cap = slots + static_cast<std::int64_t>(num_experts) * (block_size - 1);
  if (pad_sorted_ids) cap = (cap + block_size - 1) / block_size * block_size;
  if (slots < num_experts && slots * block_size < cap) cap = slots * block_size;
  return cap;
}

/// vLLM's expert_ids length: one entry per block of the capacity.
LYNX_HD std::int64_t vllm_block_capacity(std::int64_t slots, int num_experts, int block_size,
                                         bool pad_sorted_ids = false) {
  return (vllm_sorted_capacity(slots, num_experts, block_size, pad_sorted_ids) + block_size - 1) / block_size;
}

/// Whether a layout can be written for rows * k slots over n experts: at most max_num_rows
/// rows, a block size >= 1 where the vLLM arrays are asked for, and every size within int32
/// with room to spare (the layout's loops step a block's threads past their end in int).
LYNX_HD bool layout_fits(const sorted_layout_ref& layout, std::int64_t rows, int k, int n) {
  constexpr std::int64_t most = INT32_MAX - (1 << 16);
  const std::int64_t slots = rows * k;
  if (rows > max_num_rows || slots > most) return false;
  if (!layout.wants_vllm()) return true;
  return layout.block_size >= 1 && layout.block_size <= (1 << 20) &&
         vllm_sorted_capacity(slots, n, layout.block_size, layout.pad_sorted_ids) <= most;
}

namespace detail {

/// A slot's local expert, or -1 when it takes no part (the rule above), for an id of any type.
template <class IdT>
LYNX_HD int layout_expert(IdT id, int n, const std::int32_t* map) {
  if (id < 0 || id >= n) return -1;
  const int e = map ? map[static_cast<int>(id)] : static_cast<int>(id);
  return e >= 0 && e < n ? e : -1;
}

/// An expert's run of `count` slots padded to the block size (0 without the vLLM arrays).
LYNX_HD int padded_run(int count, int block_size) {
  return block_size > 0 ? (count + block_size - 1) / block_size * block_size : 0;
}

}  // namespace detail
}  // namespace lynx
