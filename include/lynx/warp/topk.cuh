#pragma once
// lynx::warp_topk: the k largest of a warp's packed keys, k rounds of a 64-bit warp max (as
// TensorRT-LLM's reduceTopK). Keys are unique, so the result does not depend on the order in
// which lanes hold them: it is exactly the host path's selection.
//
// The result is spread across lanes: lane r < k holds the r-th largest key (descending), other
// lanes 0. So no lane keeps an array of k keys, and nothing is indexed by the round: registers
// hold all the state. The rounds stay a loop: unrolled K times they were a third of the fused
// kernel's code, which a cold instruction cache pays for (bench/README, "Code size").

#include <cstdint>

#include "../detail/device/warp_ops.cuh"

namespace lynx {

/// Warp-collective. keys: this lane's keys (0 = none); k <= K. Returns this lane's slot of the
/// top-k (0 past k, or when fewer than k nonzero keys exist). StopEarly: the rounds end when no
/// key is left (for sparse keys; a dense row pays a compare a round for nothing).
template <int K, bool StopEarly = false, int PerLane>
__device__ __forceinline__ std::uint64_t warp_topk(const std::uint64_t (&keys)[PerLane], int k) {
  const int lane = detail::lane_id();
  std::uint64_t work[PerLane];
#pragma unroll
  for (int i = 0; i < PerLane; ++i) work[i] = keys[i];
  std::uint64_t mine = 0;
#pragma unroll 1
  for (int r = 0; r < K; ++r) {
    if (r >= k) break;
    std::uint64_t local = 0;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) local = work[i] > local ? work[i] : local;
    const std::uint64_t winner = detail::warp_max_key(local);
    if (StopEarly && winner == 0) break;  // uniform: the remaining slots stay 0
    if (lane == r) mine = winner;
#pragma unroll
    for (int i = 0; i < PerLane; ++i) work[i] = work[i] == winner ? 0 : work[i];
  }
  return mine;
}

/// Slot r of a lane-spread top-k, in every lane (a shuffle).
__device__ __forceinline__ std::uint64_t topk_slot(std::uint64_t mine, int r) {
  return __shfl_sync(detail::full_mask, mine, r);
}

}  // namespace lynx
