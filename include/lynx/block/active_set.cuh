#pragma once
// lynx::block_active_set: the batch-wide sets of SPEC §3.3, as bit sets in shared memory: the
// active set K (what the batch loads), the experts of the plain top-k, those the final choices
// touch, and the rows' top-1 anchors. Bits are set with atomicOr, so the result does not depend
// on the order in which warps add their rows. lynx::block_decide makes the never-worse decision
// (step 5) and picks the ids of the rows that do not vote (SPEC §5), from sets anywhere.

#include <cstdint>

#include "../detail/config.hpp"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"

namespace lynx {

/// The flags of one set, in 32-bit words.
template <int MaxN>
struct expert_bits {
  std::uint32_t word[MaxN / 32];
};

/// SPEC §3.3 step 5 and §5, block-wide: whether the batch falls back to plain top-k (its final
/// choices touch more experts than plain top-k), and the k ids of a non-voting row: the k
/// lowest of the set the batch loads, then the lowest others. The sets have at most 32 words
/// (lynx::max_experts), so the first warp decides alone, a word per lane: counts by popcount,
/// the pad ids by a prefix sum of them.
template <int BlockThreads>
class block_decide {
 public:
  struct TempStorage {
    int pad[max_top_k];
    int fallback;
  };

  /// Block-collective; plain and final_set are bit sets of n experts (shared or global memory).
  /// pads: whether any row takes the pad ids (warp 0's value counts); without, pad_ids() is
  /// left unwritten and their prefix sums are skipped. Synchronizes before it returns.
  __device__ __forceinline__ block_decide(TempStorage& temp, const std::uint32_t* plain,
                                          const std::uint32_t* final_set, int n, int k, bool pads = true)
      : temp_(temp) {
    static_assert(max_experts <= 32 * 32, "a word per lane");
    if (threadIdx.x < 32) {
      const int lane = static_cast<int>(threadIdx.x), words = (n + 31) / 32;
      const std::uint32_t valid = lane < words ? (lane == words - 1 && n % 32 ? (1u << (n % 32)) - 1u : ~0u) : 0u;
      const std::uint32_t pw = lane < words ? plain[lane] & valid : 0u, fw = lane < words ? final_set[lane] & valid : 0u;
      const bool fallback = detail::warp_sum(__popc(fw)) > detail::warp_sum(__popc(pw));
      if (__any_sync(detail::full_mask, pads)) {
        const std::uint32_t loaded = fallback ? pw : fw, others = ~loaded & valid;
        // Exclusive prefix sums over lanes (words in id order) of the loaded and other counts.
        int before_loaded = __popc(loaded), before_others = __popc(others);
        for (int o = 1; o < 32; o <<= 1) {
          const int a = __shfl_up_sync(detail::full_mask, before_loaded, o), b = __shfl_up_sync(detail::full_mask, before_others, o);
          if (lane >= o) before_loaded += a, before_others += b;
        }
        const int total_loaded = __shfl_sync(detail::full_mask, before_loaded, 31);
        before_loaded -= __popc(loaded);
        before_others -= __popc(others);
        int at = before_loaded;  // the loaded ids first, then the others after all loaded ones
        for (std::uint32_t w = loaded; w && at < k; w &= w - 1) temp_.pad[at++] = 32 * lane + __ffs(w) - 1;
        at = total_loaded + before_others;
        for (std::uint32_t w = others; w && at < k; w &= w - 1) temp_.pad[at++] = 32 * lane + __ffs(w) - 1;
      }
      if (lane == 0) temp_.fallback = fallback;
    }
    __syncthreads();
  }

  __device__ __forceinline__ bool fallback() const { return temp_.fallback != 0; }
  __device__ __forceinline__ const int* pad_ids() const { return temp_.pad; }

 private:
  TempStorage& temp_;
};

template <int MaxN, int BlockThreads>
class block_active_set {
 public:
  struct TempStorage {
    expert_bits<MaxN> active, plain, final_set, anchors;
    typename block_decide<BlockThreads>::TempStorage decide;
  };

  __device__ __forceinline__ explicit block_active_set(TempStorage& temp) : temp_(temp) {}

  /// Block-collective: empties every set. Synchronize before using them.
  __device__ __forceinline__ void init() {
    for (int i = threadIdx.x; i < MaxN / 32; i += BlockThreads)
      temp_.active.word[i] = temp_.plain.word[i] = temp_.final_set.word[i] = temp_.anchors.word[i] = 0;
  }

  __device__ __forceinline__ std::uint32_t* active() { return temp_.active.word; }
  __device__ __forceinline__ std::uint32_t* plain() { return temp_.plain.word; }
  __device__ __forceinline__ std::uint32_t* final_set() { return temp_.final_set.word; }
  __device__ __forceinline__ std::uint32_t* anchors() { return temp_.anchors.word; }

  /// Block-collective: K gets every anchor (the top-1 anchor of the lynx and piggyback policies).
  __device__ __forceinline__ void merge_anchors() {
    for (int i = threadIdx.x; i < MaxN / 32; i += BlockThreads) temp_.active.word[i] |= temp_.anchors.word[i];
  }

  /// Block-collective: the never-worse decision over these sets (block_decide; pads as there).
  __device__ __forceinline__ block_decide<BlockThreads> decide(int n, int k, bool pads = true) {
    return block_decide<BlockThreads>(temp_.decide, temp_.plain.word, temp_.final_set.word, n, k, pads);
  }

 private:
  TempStorage& temp_;
};

/// Warp-collective: sets the experts of a lane-spread top-k (lane r < k holds slot r) in a bit
/// set (shared or global memory).
__device__ __forceinline__ void mark_topk(std::uint32_t* set, std::uint64_t mine, int k) {
  if (detail::lane_id() < k && mine) detail::set_bit(set, detail::key_expert(mine));
}

}  // namespace lynx
