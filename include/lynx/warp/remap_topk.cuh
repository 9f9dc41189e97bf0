#pragma once
// lynx::remap_topk's per-row steps on the warp's row (SPEC §3.3 steps 1, 3 and 4; SPEC §4's
// weights): the row's top-k by z, its top-k inside the active set K, its original top-k mass,
// and the weights and ids it writes. Top-k results are lane-spread (warp/topk.cuh): lane r < k
// holds slot r. The math is row_math.hpp's, in the host path's order, so ids and weights are
// bitwise the host path's.

#include <cstdint>
#include <type_traits>

#include "../block/active_set.cuh"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "row.cuh"
#include "topk.cuh"

namespace lynx {

/// SPEC §3.3 step 1: the row's top-k by z = (own bin q, batch rank, logit, lower id). rank:
/// block_score_experts' ranks (shared or global memory).
template <int K, int MaxN, class Rank>
__device__ __forceinline__ std::uint64_t warp_z_topk(const warp_row<MaxN>& row, const std::int8_t (&q)[MaxN / 32],
                                                     const Rank* rank, int k) {
  std::uint64_t z[MaxN / 32];
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i)
    z[i] = row.key[i] ? (detail::z_key_high(q[i], rank[warp_row<MaxN>::expert(i)]) | row.key[i]) : 0;
  return warp_topk<K>(z, k);
}

/// Order codes of the experts' batch histograms (block_score_experts::order_codes): what
/// warp_z_topk_set needs of the batch, instead of the ranks (which it also takes).
struct order_codes {
  const std::uint32_t* code;
};

namespace detail {
template <class Rank>
__device__ __forceinline__ std::uint32_t order_code(const Rank* rank, int e) {
  static_assert(std::is_signed_v<Rank>, "ranks are signed integers; pass order codes as lynx::order_codes");
  return order_code_of_rank(static_cast<int>(rank[e]));
}
__device__ __forceinline__ std::uint32_t order_code(order_codes codes, int e) { return codes.code[e]; }
}  // namespace detail

/// The same set as warp_z_topk, in another order, for bins that are warp_affinity_bin's of this
/// row (alpha, depth): bins are monotone in the logit, so every expert in a bin above the bin q*
/// of the plain k-th key is in the plain top-k (a prefix of it), and the other slots go to bin
/// q*'s best by (histogram, logit, lower id). So only those slots take rounds of the warp max,
/// on set keys (detail::bin_z_key). order: the batch's order codes (order_codes), or its ranks
/// (block_score_experts::ranks, a Rank pointer). plain: the row's lane-spread plain top-k; the
/// result is lane-spread too: that prefix of the plain top-k, then bin q*'s picks.
template <int K, int MaxN, class Order>
__device__ __forceinline__ std::uint64_t warp_z_topk_set(const warp_row<MaxN>& row, const std::int8_t (&q)[MaxN / 32],
                                                         Order order, std::uint64_t plain, int k, float alpha,
                                                         int depth) {
  const int lane = detail::lane_id();
  const int qp = lane < k ? detail::affinity_bin_of(key_logit(plain), row.max, alpha, depth) : 0;
  const int star = __shfl_sync(detail::full_mask, qp, k - 1);
  const int above = __popc(__ballot_sync(detail::full_mask, lane < k && qp > star));
  std::uint64_t mine = lane < above ? plain : 0;
  if (above == k) return mine;
  std::uint64_t in_star[MaxN / 32];
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i)
    in_star[i] = row.key[i] && q[i] == star
                     ? detail::bin_z_key(detail::order_code(order, warp_row<MaxN>::expert(i)), row.key[i])
                     : 0;
  const std::uint64_t picked = warp_topk<K>(in_star, k - above);  // lanes 0 .. k - above - 1
  const std::uint64_t shifted = __shfl_sync(detail::full_mask, picked, (lane - above) & 31);
  if (lane >= above && lane < k) mine = shifted ? detail::logit_key_of(shifted) : 0;
  return mine;
}

/// SPEC §3.3 step 3: the row's top-k by logit inside K (bit set `active`), filled from outside
/// only when K has fewer than k experts (the keys in that order: members, then the rest).
/// plain: the row's lane-spread plain top-k. Its members of K are K's best and keep their
/// order, so only the missing slots take rounds of the warp max (none when the plain top-k lies
/// inside K). MembersOnly: slots past K's members stay 0, and the rounds end when no member
/// is left (for a small K, as the budget's K0: at one row, whose K0 leads its plain top-k,
/// none).
template <int K, bool MembersOnly = false, int MaxN>
__device__ __forceinline__ std::uint64_t warp_topk_in(const warp_row<MaxN>& row, const std::uint32_t* active,
                                                      std::uint64_t plain, int k) {
  const int lane = detail::lane_id();
  const bool member = lane < k && plain && detail::test_bit(active, detail::key_expert(plain));
  const unsigned in_k = __ballot_sync(detail::full_mask, member);
  const int kept = __popc(in_k);
  if (kept == k) return plain;  // the plain top-k lies inside K
  // Slot s < kept: the s-th member of the plain top-k (they lead the keys inside K). Members
  // that form a prefix of it (K holds the row's best experts, as K0 does) are in place already.
  std::uint64_t mine = member ? plain : 0;
  if (in_k & (in_k + 1u)) {  // uniform: members with gaps move up
    mine = 0;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const std::uint64_t v = __shfl_sync(detail::full_mask, plain, r);
      if (r < k && ((in_k >> r) & 1u) && lane == __popc(in_k & ((1u << r) - 1u))) mine = v;
    }
  }
  // The rest by (member, key): every key but those members (the plain top-k is the keys at or
  // above its k-th), so members below the plain k-th come first, then the best non-members.
  const std::uint64_t kth = __shfl_sync(detail::full_mask, plain, k - 1);
  std::uint64_t rest[MaxN / 32];
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const std::uint64_t key = row.key[i];
    const bool in = detail::test_bit(active, warp_row<MaxN>::expert(i));
    const bool candidate = MembersOnly ? in && key < kth : !(in && key >= kth);
    rest[i] = key != 0 && candidate ? (key | detail::active_bit(in)) : 0;
  }
  if constexpr (MembersOnly) {  // no member below the plain k-th: no round of the warp max
    bool any = false;
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) any |= rest[i] != 0;
    if (!__any_sync(detail::full_mask, any)) return mine;
  }
  const std::uint64_t more = warp_topk<K, MembersOnly>(rest, k - kept);  // lanes 0 .. k - kept - 1
  const std::uint64_t shifted = __shfl_sync(detail::full_mask, more, (lane - kept) & 31);
  if (lane >= kept && lane < k) mine = shifted & ~detail::active_bit(true);
  return mine;
}

/// The row's original top-k mass that "no renormalize" keeps (SPEC §3.3 step 4): softmax, the
/// sum of its top-k probabilities (over the canonical butterfly total); sigmoid, of its top-k
/// sigmoids (in detail::topk_mass's tiny form where all their logits lie below -80). 1 with
/// renormalize (unused then). The same value in every lane, bitwise detail::topk_mass's.
template <int K, int MaxN>
__device__ __forceinline__ float warp_row_mass(const warp_row<MaxN>& row, std::uint64_t plain, int k, scoring s,
                                               bool renormalize) {
  if (renormalize) return 1.0f;
  float total = 0.0f;
  if (s == scoring::softmax) {
    float part = 0.0f;  // this lane's experts in order: row_exp_sum's lane sum
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i)
      if (row.key[i]) part += detail::exp_f32(key_logit(row.key[i]) - row.max);
    total = detail::warp_butterfly_sum(part);
  }
  const float l = plain ? key_logit(plain) : 0.0f;
  // detail::tiny_mass_logit: a sigmoid mass whose every logit is below -80 is kept scaled
  const bool tiny = s == scoring::sigmoid &&
                    __all_sync(detail::full_mask, detail::lane_id() >= k || l < detail::tiny_mass_logit);
  const float term = s == scoring::sigmoid ? detail::sigmoid_mass_term(l, tiny) : detail::exp_f32(l - row.max);
  float top = 0.0f;
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const float v = __shfl_sync(detail::full_mask, term, r);
    if (r < k) top += v;
  }
  return s == scoring::sigmoid ? (tiny ? -top : top) : top / total;
}

/// SPEC §3.3 step 4 and its output order: writes the row's k ids (IdT) and fp32 weights, by
/// descending weight, then ascending id, from its chosen keys (lane-spread, in key order).
/// The same operations as detail::emit_row on the host: ratios to the largest chosen logit,
/// the compensated sum in key order, then each slot's place in the order.
template <int K, class IdT>
__device__ __forceinline__ void warp_emit(std::uint64_t chosen, int k, scoring s, bool renormalize, float mass,
                                          IdT* ids, float* weights) {
  const int lane = detail::lane_id();
  const bool slot = lane < k;
  const float l = slot ? key_logit(chosen) : -INFINITY;
  float top = __shfl_sync(detail::full_mask, l, 0);  // chosen keys are mostly in logit order
  if (__any_sync(detail::full_mask, l > top)) top = detail::warp_max(l);
  float w = detail::chosen_ratio(l, top, s);
  float denom = 0.0f, lost = 0.0f;  // chosen_weights' Neumaier sum, slot by slot
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const float v = __shfl_sync(detail::full_mask, w, r);
    if (r < k) {
      const float t = denom + v;
      lost += denom >= v ? (denom - t) + v : (v - t) + denom;
      denom = t;
    }
  }
  denom += lost;
  const float scale = renormalize ? 1.0f : mass;
  w = detail::times_mass(w / denom, scale);
  // detail::tiny_ratio_arg: a ratio below e^-80 is taken again, times 2^124 (a uniform branch)
  const bool tiny = slot && detail::chosen_ratio_arg(l, top, s) < detail::tiny_ratio_arg;
  if (__any_sync(detail::full_mask, tiny) && tiny) w = detail::tiny_ratio_weight(l, top, s, denom, scale);
  const int id = slot ? detail::key_expert(chosen) : 0x7FFFFFFF;
  // Each slot's place: how many slots come before it (a larger weight, or an equal one and a
  // lower id). Slots usually are in that order already (one check against the next slot);
  // two logits rounding to one weight, or keys from outside K, may break it.
  const float w_next = __shfl_down_sync(detail::full_mask, w, 1);
  const int id_next = __shfl_down_sync(detail::full_mask, id, 1);
  const bool ordered = lane + 1 >= k || w > w_next || (w == w_next && id < id_next);
  int pos = lane;
  if (!__all_sync(detail::full_mask, ordered)) {
    pos = 0;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const float wr = __shfl_sync(detail::full_mask, w, r);
      const int ir = __shfl_sync(detail::full_mask, id, r);
      if (r < k) pos += (wr > w || (wr == w && ir < id)) ? 1 : 0;
    }
  }
  if (slot) {
    ids[pos] = static_cast<IdT>(id);
    weights[pos] = w;
  }
}

/// SPEC §5: a row that does not vote gets the pad ids (block_decide::pad_ids) or the
/// sentinel, with weight 0. Warp-collective.
template <class IdT>
__device__ __forceinline__ void warp_emit_pad(const int* pad, int k, bool use_sentinel, int sentinel, IdT* ids,
                                              float* weights) {
  for (int r = detail::lane_id(); r < k; r += 32) {
    ids[r] = static_cast<IdT>(use_sentinel ? sentinel : pad[r]);
    weights[r] = 0.0f;
  }
}

}  // namespace lynx
