#pragma once
// lynx::warp_row: one router row in a warp's registers, the unit every warp-level function
// works on (as vLLM's and TensorRT-LLM's routing kernels hold a token row per warp).
//
// Lane j holds experts j, j + 32, ..., MaxN/32 of them (a striped arrangement: each load
// instruction of the warp reads 32 consecutive logits). Each is kept as a packed key: the
// order-preserving bits of its sanitized fp32 logit (SPEC §5: NaN = -inf, +inf = FLT_MAX) above
// 0xFFFF - id, so that one 64-bit max picks the larger logit and, on ties, the lower id. Experts
// at or past N get key 0, below every real key. MaxN is a compile-time bound; the real N may
// be anything up to it.

#include <cuda_runtime.h>

#include <cstdint>

#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"

namespace lynx {

template <int MaxN>
struct warp_row {
  static_assert(MaxN % 32 == 0 && MaxN <= max_experts, "MaxN: a multiple of 32, at most lynx::max_experts");
  static constexpr int per_lane = MaxN / 32;

  std::uint64_t key[per_lane];  ///< expert lane + 32 i's key, 0 past N or for a row that does not vote
  float max;                    ///< the row's max logit in every lane; -inf: the row does not vote

  /// Warp-collective: loads row[0, n) (float, __half or __nv_bfloat16), or nothing if !valid
  /// (a padding row). A row without a finite logit does not vote either.
  template <class T>
  __device__ __forceinline__ void load(const T* row, int n, bool valid) {
    const int lane = detail::lane_id();
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) {
      const int e = lane + 32 * i;
      key[i] = 0;
      if (valid && e < n) {
        const float x = detail::load_logit(row, e);
        key[i] = detail::logit_key(x, e);
        m = x > m ? x : m;
      }
    }
    max = detail::warp_max(m);
    if (max == -INFINITY)  // no finite logit: no keys, so no selection picks from this row
#pragma unroll
      for (int i = 0; i < per_lane; ++i) key[i] = 0;
  }

  __device__ __forceinline__ bool votes() const { return max != -INFINITY; }

  /// Expert of slot i in this lane.
  __device__ __forceinline__ static int expert(int i) { return detail::lane_id() + 32 * i; }
};

/// The sanitized logit a packed key holds (logit keys, and the logit part of z keys).
__device__ __forceinline__ float key_logit(std::uint64_t key) {
  return detail::unordered_float(static_cast<std::uint32_t>(key >> 16));
}

/// The expert id a packed key holds.
__device__ __forceinline__ int key_expert(std::uint64_t key) { return detail::key_expert(key); }

}  // namespace lynx
