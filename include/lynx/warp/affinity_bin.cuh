#pragma once
// lynx::warp_affinity_bin: SPEC §3.1 for the warp's row, in registers.

#include <cstdint>

#include "../detail/row_math.hpp"
#include "row.cuh"

namespace lynx {

/// q[i] = the bin of expert lane + 32 i: ceil(fp32(alpha * fp32(l - max))), at least -depth
/// (detail::bin_depth(beta)). lynx::no_vote past N and for a row that does not vote.
template <int MaxN>
__device__ __forceinline__ void warp_affinity_bin(const warp_row<MaxN>& row, float alpha, int depth,
                                                  std::int8_t (&q)[MaxN / 32]) {
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i)
    q[i] = row.key[i] ? static_cast<std::int8_t>(detail::affinity_bin_of(key_logit(row.key[i]), row.max, alpha, depth))
                      : no_vote;
}

}  // namespace lynx
