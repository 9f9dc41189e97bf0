#pragma once
// lynx::warp_router_topk: a model_router's choice for one row in a warp (params.hpp says what it
// computes; host::detail::router_choice_row is the host's, bitwise the same). Group scores are warp-wide
// top-2 merges (an xor butterfly, so every lane ends with the group's score), the kept groups
// top_groups rounds of a warp max over a key per group (lane g holds group g), the choice k
// rounds of a warp max over the choice keys of the kept groups. The result is lane-spread as
// warp_topk's, and holds the chosen experts' logit keys in logit order, which is what the
// weights (warp_row_mass, warp_emit) take.

#include <cstdint>

#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "row.cuh"
#include "topk.cuh"

namespace lynx {

/// Warp-collective, for a voting row with n <= MaxN experts and k <= K.
template <int K, int MaxN>
__device__ __forceinline__ std::uint64_t warp_router_topk(const warp_row<MaxN>& row, int n, int k,
                                                          const model_router& r) {
  constexpr int per_lane = MaxN / 32;
  const int lane = detail::lane_id(), size = n / r.num_groups;
  // One array beside the row's keys (registers): the choice keys, whose high bits give back
  // the choice score itself (key_logit), then the marks of the chosen, then their logit keys.
  std::uint64_t choice[per_lane];
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    choice[i] = row.key[i] ? detail::logit_key(detail::choice_score(key_logit(row.key[i]), r.bias, e), e) : 0;
  }
  if (r.grouped()) {
    std::uint64_t group_key = 0;  // lane g: group g's key
    for (int g = 0; g < r.num_groups; ++g) {
      float a1 = -INFINITY, a2 = -INFINITY;
#pragma unroll
      for (int i = 0; i < per_lane; ++i)
        if (choice[i] && warp_row<MaxN>::expert(i) / size == g) detail::top2_push(a1, a2, key_logit(choice[i]));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {  // the top two of both lanes' top two
        const float b1 = __shfl_xor_sync(detail::full_mask, a1, o), b2 = __shfl_xor_sync(detail::full_mask, a2, o);
        const float lo = a1 < b1 ? a1 : b1, rest = a2 > b2 ? a2 : b2;
        a1 = a1 > b1 ? a1 : b1;
        a2 = lo > rest ? lo : rest;
      }
      if (lane == g) group_key = detail::logit_key(detail::group_score(a1, a2, r.bias != nullptr), g);
    }
    std::uint32_t allowed = 0;
    for (int j = 0; j < r.top_groups; ++j) {
      const std::uint64_t best = detail::warp_max_key(group_key);
      allowed |= 1u << detail::key_expert(best);
      if (group_key == best) group_key = 0;
    }
#pragma unroll
    for (int i = 0; i < per_lane; ++i)
      if (!(allowed >> (warp_row<MaxN>::expert(i) / size) & 1u)) choice[i] = 0;
  }
  // The top-k by choice key, each winner marked 1 (below every real key, above none); then the
  // logit keys of exactly those experts, in logit order.
  constexpr std::uint64_t chosen_mark = 1;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if (j >= k) break;
    std::uint64_t local = 0;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) local = choice[i] > local ? choice[i] : local;
    const std::uint64_t winner = detail::warp_max_key(local);
#pragma unroll
    for (int i = 0; i < per_lane; ++i)
      if (choice[i] == winner) choice[i] = chosen_mark;
  }
#pragma unroll
  for (int i = 0; i < per_lane; ++i) choice[i] = choice[i] == chosen_mark ? row.key[i] : 0;
  return warp_topk<K>(choice, k);
}

}  // namespace lynx
