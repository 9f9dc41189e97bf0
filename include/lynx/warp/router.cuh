#pragma once
// A model_router's view of one row in a warp (docs/ROUTERS.md says what it computes;
// host::detail::router_choice_row and router_route_body are the host's, bitwise the same).
//
// The router's row is a warp_row of choice keys: logit_key(c[e], e), with c the choice score
// (sigmoid + bias, or the logit), on the row's kept groups, and key 0 outside them (so no
// selection picks them) and past N. Its `max` is the first choice's score. Every warp-level
// function that takes a warp_row takes it: warp_topk gives the model's choice P, warp_topk_in
// the final top-k inside K, warp_z_topk(_set) the lynx policy's z top-k. Group scores are
// warp-wide top-2 merges (an xor butterfly, so every lane ends with the group's score), the
// kept groups top_groups rounds of a warp max over a key per group (lane g holds group g).
// Weights stay on the unbiased logits: warp_by_logit re-keys chosen experts by their logits.

#include <cstdint>

#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "remap_topk.cuh"
#include "row.cuh"
#include "topk.cuh"

namespace lynx {

/// Warp-collective, for a voting row (n <= MaxN experts): the kept groups of its choice keys
/// (all set, unmasked), a bit per group; every bit without grouping.
template <int MaxN>
__device__ __forceinline__ std::uint32_t warp_router_groups(const std::uint64_t (&choice)[MaxN / 32], int n,
                                                            const model_router& r) {
  if (!r.grouped()) return ~0u;
  const int lane = detail::lane_id(), size = n / r.num_groups;
  std::uint64_t group_key = 0;  // lane g: group g's key
  for (int g = 0; g < r.num_groups; ++g) {
    float a1 = -INFINITY, a2 = -INFINITY;
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i)
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
  std::uint32_t kept = 0;
  for (int j = 0; j < r.top_groups; ++j) {
    const std::uint64_t best = detail::warp_max_key(group_key);
    kept |= 1u << detail::key_expert(best);
    if (group_key == best) group_key = 0;
  }
  return kept;
}

/// Expert e's choice key from its logit key (0 stays 0).
__device__ __forceinline__ std::uint64_t choice_key(std::uint64_t logit_key, const model_router& r, int e) {
  return logit_key ? detail::logit_key(detail::choice_score(key_logit(logit_key), r.bias, e), e) : 0;
}

/// Warp-collective: `choice` = the router's row of `row` on the given kept groups (choice.max
/// is left -inf: warp_router_plain sets it).
template <int MaxN>
__device__ __forceinline__ void warp_choice_keys(const warp_row<MaxN>& row, int n, const model_router& r,
                                                 std::uint32_t groups, warp_row<MaxN>& choice) {
  const int size = n / r.num_groups;
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    choice.key[i] = e < n && (groups >> (e / size) & 1u) ? choice_key(row.key[i], r, e) : 0;
  }
  choice.max = -INFINITY;
}

/// Warp-collective, for a voting row: `choice` = its router's row; returns its kept groups.
template <int MaxN>
__device__ __forceinline__ std::uint32_t warp_router_choice(const warp_row<MaxN>& row, int n, const model_router& r,
                                                            warp_row<MaxN>& choice) {
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) choice.key[i] = choice_key(row.key[i], r, warp_row<MaxN>::expert(i));
  choice.max = -INFINITY;
  const std::uint32_t groups = warp_router_groups<MaxN>(choice.key, n, r);
  if (r.grouped()) {
    const int size = n / r.num_groups;
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) {
      const int e = warp_row<MaxN>::expert(i);
      if (e >= n || !(groups >> (e / size) & 1u)) choice.key[i] = 0;
    }
  }
  return groups;
}

/// Warp-collective: the model's choice P, the top-k of the router's row (lane-spread choice
/// keys, in choice order: lane 0 holds the first choice), and sets choice.max to its score.
template <int K, int MaxN>
__device__ __forceinline__ std::uint64_t warp_router_plain(warp_row<MaxN>& choice, int k) {
  const std::uint64_t plain = warp_topk<K>(choice.key, k);
  choice.max = key_logit(topk_slot(plain, 0));
  return plain;
}

/// Warp-collective: the experts of a lane-spread top-k (any keys of row's experts) re-keyed by
/// their logits, in logit order (lane-spread): what the weights (warp_row_mass, warp_emit) take.
template <int K, int MaxN>
__device__ __forceinline__ std::uint64_t warp_by_logit(const warp_row<MaxN>& row, std::uint64_t chosen, int k) {
  const int lane = detail::lane_id();
  const int id = lane < k && chosen ? detail::key_expert(chosen) : -1;
  unsigned mine = 0;  // bit i: this lane's expert lane + 32 i is chosen
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const int e = __shfl_sync(detail::full_mask, id, r);
    if (r < k && e >= 0 && (e & 31) == lane) mine |= 1u << (e >> 5);
  }
  std::uint64_t keys[MaxN / 32];
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) keys[i] = mine >> i & 1u ? row.key[i] : 0;
  return warp_topk<K>(keys, k);
}

/// The lynx policy's bins of a router's row (warp_router_plain done): q = the bin of c against
/// the first choice; an expert outside the kept groups counts as -inf (the deepest bin), as
/// affinity_bin_of(-inf, ...) gives; lynx::no_vote past N.
template <int MaxN>
__device__ __forceinline__ void warp_router_bins(const warp_row<MaxN>& choice, int n, float alpha, int depth,
                                                 std::int8_t (&q)[MaxN / 32]) {
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const float c = choice.key[i] ? key_logit(choice.key[i]) : -INFINITY;
    q[i] = warp_row<MaxN>::expert(i) < n ? static_cast<std::int8_t>(detail::affinity_bin_of(c, choice.max, alpha, depth))
                                         : no_vote;
  }
}

/// Warp-collective: a voting row's final top-k (choice keys, lane-spread) given K (bit set
/// `active`) and its choice P (`plain`): a pinned row keeps P; with the group limit kept, the
/// top-k of (in K, c) over its kept groups (warp_topk_in on the router's row); relaxed, over
/// its kept groups and every expert of K (row: the logits, for the choice scores outside).
template <int K, int MaxN>
__device__ __forceinline__ std::uint64_t warp_router_topk_in(const warp_row<MaxN>& row, const warp_row<MaxN>& choice,
                                                             const model_router& r, const std::uint32_t* active,
                                                             std::uint64_t plain, int k, bool pinned) {
  if (pinned) return plain;
  if (!r.relaxed_groups) return warp_topk_in<K>(choice, active, plain, k);
  std::uint64_t keys[MaxN / 32];
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    const bool in = row.key[i] && detail::test_bit(active, e);  // then its key is nonzero
    const std::uint64_t key = choice.key[i] ? choice.key[i] : (in ? choice_key(row.key[i], r, e) : 0);
    keys[i] = key | detail::active_bit(in);
  }
  return warp_topk<K>(keys, k) & ~detail::active_bit(true);
}

/// Warp-collective, for a voting row with n <= MaxN experts and k <= K: the model's choice as
/// topk_route writes it: lane-spread logit keys of the chosen experts, in logit order.
template <int K, int MaxN>
__device__ __forceinline__ std::uint64_t warp_router_topk(const warp_row<MaxN>& row, int n, int k,
                                                          const model_router& r) {
  warp_row<MaxN> choice;
  warp_router_choice(row, n, r, choice);
  return warp_by_logit<K>(row, warp_topk<K>(choice.key, k), k);
}

}  // namespace lynx
