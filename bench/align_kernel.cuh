#pragma once
// The comparison point of the sorted-layout benchmarks: a separate alignment kernel that writes
// the same arrays as lynx's sorted layout (every slot taking part: routed ids), written the
// straightforward way, as engines' moe_align_block_size kernels are: one block, a thread per
// expert scans every slot (twice), one thread scans the offsets. Stable, so its output equals
// the library's; the benchmarks check that before timing.

#include <cuda_runtime.h>

#include <lynx/sorted_layout.hpp>

namespace lynx_bench {

inline constexpr int align_threads = 1024;

/// The straightforward alignment kernel (one block of Threads): stable, the same arrays as
/// the library's. (A template, so that more than one unit may include it.)
template <int Threads = align_threads>
__global__ void __launch_bounds__(Threads)
    align_kernel(const int* ids, int slots, int n, int cap, int max_blocks, lynx::sorted_layout_ref out) {
  __shared__ int count[lynx::max_experts], start[lynx::max_experts], padded[lynx::max_experts], active_at[lynx::max_experts];
  __shared__ int totals[3];
  const int tid = static_cast<int>(threadIdx.x), bs = out.block_size;
  for (int e = tid; e < n; e += Threads) {
    int c = 0;
    for (int s = 0; s < slots; ++s) c += ids[s] == e;
    count[e] = c;
  }
  __syncthreads();
  if (tid == 0) {
    int total = 0, pad = 0, active = 0;
    for (int e = 0; e < n; ++e) {
      start[e] = total, padded[e] = pad, active_at[e] = active;
      total += count[e], pad += (count[e] + bs - 1) / bs * bs, active += count[e] > 0;
    }
    totals[0] = total, totals[1] = pad, totals[2] = active;
    *out.num_active = active, *out.num_tokens_post_padded = pad;
  }
  __syncthreads();
  for (int e = tid; e < n; e += Threads) {
    const int c = count[e], p = padded[e], run = (c + bs - 1) / bs * bs;
    if (c > 0) {
      out.active_experts[active_at[e]] = e, out.expert_counts[active_at[e]] = c, out.expert_offsets[active_at[e]] = start[e];
      for (int b = p / bs; b < (p + run) / bs; ++b) out.expert_ids[b] = e;
    }
    int j = 0;
    for (int s = 0; s < slots; ++s)
      if (ids[s] == e) {
        out.slot_position[s] = start[e] + j, out.position_slot[start[e] + j] = s, out.sorted_token_ids[p + j] = s;
        ++j;
      }
    for (; j < run; ++j) out.sorted_token_ids[p + j] = slots;
  }
  for (int i = totals[2] + tid; i < n; i += Threads) out.active_experts[i] = -1, out.expert_counts[i] = 0;
  for (int i = totals[2] + tid; i <= n; i += Threads) out.expert_offsets[i] = totals[0];
  for (int i = totals[1] + tid; i < cap; i += Threads) out.sorted_token_ids[i] = slots;
  for (int b = totals[1] / bs + tid; b < max_blocks; b += Threads) out.expert_ids[b] = -1;
  // Routed ids are in [0, n): every slot takes part, so slot_position and position_slot are full.
}

}  // namespace lynx_bench
