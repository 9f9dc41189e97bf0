#pragma once
// The budget policy's pieces on a warp (detail/budget.hpp): a row's shares, the counts that
// start the greedy (block_budget's too), and the whole greedy when the batch has a single
// voting row (warp_budget_row), and the test that lets a single row skip it
// (warp_budget_keeps_plain).
//
// With one token, an expert's gain is that token's term alone, share_gain(share, kth), so a
// step needs no sums over rows and no other warp: the warp keeps every expert's (gain, id) key
// in registers, computed from the row's shares and the token's k-th best share inside K (again
// only when that moves), takes the open experts' max, and inserts the chosen share. The order
// of the steps, their ties, the stopping rule and the fill are block_budget's, so K is the host
// path's bitwise: a gain that block_budget updates term by term (an exact integer sum) is this
// recomputed term.

#include <cstdint>

#include "../detail/budget.hpp"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "remap_topk.cuh"
#include "row.cuh"
#include "topk.cuh"

namespace lynx {

namespace detail {

/// A candidate (gain g < 2^47, id c; c < 0: none, key 0) as a 64-bit key whose max is the
/// greedy's choice: the larger gain, then the lower id.
__device__ __forceinline__ std::uint64_t gain_key(gain_t g, int c) {
  return c < 0 ? 0 : ((g + 1) << 16) | static_cast<std::uint64_t>(0xFFFF - c);
}
__device__ __forceinline__ gain_t key_gain(std::uint64_t key) { return (key >> 16) - 1; }

}  // namespace detail

/// A voting row's budget shares: a key's share_value (its logit, or -inf for key 0: outside a
/// router's kept groups) over the sum of those of the row's plain top-k, summed in plain key
/// order as on the host. The same in every lane.
struct row_shares {
  float max, sum;
  scoring score;
  bool biased;

  __device__ __forceinline__ float value(std::uint64_t key) const {
    return detail::share_value(key ? key_logit(key) : -INFINITY, max, score, biased);
  }
  /// The share of a key of the row (0 when the plain sum vanished).
  __device__ __forceinline__ float operator()(std::uint64_t key) const {
    return detail::select_f32(sum > 0.0f, value(key) / sum, 0.0f);
  }
};

/// Warp-collective: the shares of a row (row.max: its first logit or choice score) whose plain
/// top-k is the lane-spread `plain`.
template <int K>
__device__ __forceinline__ row_shares warp_row_shares(float row_max, std::uint64_t plain, int k, const route_params& p) {
  row_shares s{row_max, 0.0f, p.score, p.router.bias != nullptr};
  const float act = detail::lane_id() < k ? s.value(plain) : 0.0f;
  float sum = 0.0f;  // plain_activation_sum, in plain key order
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const float v = __shfl_sync(detail::full_mask, act, r);
    if (r < k) sum += v;
  }
  s.sum = sum;
  return s;
}

/// The budget's counts before its steps (block_budget's and warp_budget_row's): the voters, the
/// count limit, K0's size, and whether every anchor joined K0 at once (bulk: when K0 and all of
/// the anchors fit the limit).
struct budget_counts {
  int voters, limit, size;
  bool bulk;
};

/// Warp-collective: the counts, from `lane_voters` (this lane's voting rows) and the plain,
/// anchor and K0 bit sets in shared memory; with bulk, the anchors are merged into `active`.
/// The expert counts are at most N <= 1,024, so one sum carries two of them in 16 bits each;
/// the voters (any number of rows on the per-stage path) have a sum of their own.
__device__ __forceinline__ budget_counts warp_budget_counts(int lane_voters, const route_params& p,
                                                            const std::uint32_t* plain_set,
                                                            const std::uint32_t* anchors, std::uint32_t* active) {
  const int n = p.num_experts, words = (n + 31) / 32;
  int unique = 0, size = 0, with_anchors = 0;
  for (int w = detail::lane_id(); w < words; w += 32) {
    unique += __popc(plain_set[w]);
    size += __popc(active[w]);
    with_anchors += __popc(active[w] | anchors[w]);
  }
  const int plain_unique = detail::warp_sum(unique), sizes = detail::warp_sum(size | with_anchors << 16);
  budget_counts c;
  c.voters = detail::warp_sum(lane_voters);
  c.limit = detail::budget_limit(p.budget_experts, p.budget_fraction, plain_unique, n, p.top_k);
  c.bulk = (sizes >> 16) <= c.limit;
  c.size = c.bulk ? sizes >> 16 : sizes & 0xFFFF;
  if (c.bulk)  // each lane writes the words it read
    for (int w = detail::lane_id(); w < words; w += 32) active[w] |= anchors[w];
  __syncwarp();
  return c;
}

/// Warp-collective, for a batch whose only voting row is `row` as the policy sees it (a model
/// router's choice keys), with its lane-spread plain top-k (a router's choice P): true when the
/// budget's K surely holds that top-k (detail::one_row_keeps_plain), so that the row's top-k
/// inside K is its plain top-k and the greedy (warp_budget_row) need not run. The same in every
/// lane. Costs a round of the warp max (the row's (k + 1)-th key) and the shares' sum.
template <int K, int MaxN>
__device__ __forceinline__ bool warp_budget_keeps_plain(const warp_row<MaxN>& row, std::uint64_t plain, int k,
                                                        const route_params& p) {
  const std::uint64_t kth = __shfl_sync(detail::full_mask, plain, k - 1);
  std::uint64_t below = 0;  // this lane's best key below the plain k-th (keys are distinct)
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) below = row.key[i] < kth && row.key[i] > below ? row.key[i] : below;
  const std::uint64_t next = detail::warp_max_key(below);
  const row_shares share = warp_row_shares<K>(row.max, plain, k, p);
  return kth != 0 && detail::one_row_keeps_plain(share(kth), next ? share(next) : 0.0f);
}

/// Warp-collective: the budget greedy (block_budget's steps and stopping rule) for a batch whose
/// only voting row is `row` as the policy sees it (block_budget's rows: a model router's choice
/// keys on its kept groups, max = the first choice's score), with its lane-spread plain top-k
/// (a router's choice P). On entry `active` holds K0 (a pinned row's plain top-k, else nothing),
/// `anchors` the row's top-1 (none if pinned) and `plain_set` its plain experts, all in shared
/// memory; on return `active` is the budget's K (lane 0 sets the bits; the warp is synchronized).
template <int K, int MaxN>
__device__ __forceinline__ void warp_budget_row(const warp_row<MaxN>& row, std::uint64_t plain, const route_params& p,
                                                const std::uint32_t* plain_set, const std::uint32_t* anchors,
                                                std::uint32_t* active) {
  using detail::gain_t;
  constexpr int per_lane = MaxN / 32;
  const int n = p.num_experts, k = p.top_k, lane = detail::lane_id();
  __syncwarp();
  const budget_counts counts = warp_budget_counts(lane == 0, p, plain_set, anchors, active);
  const int limit = counts.limit;
  int size = counts.size;
  const gain_t target = detail::to_gain(p.budget_mass * static_cast<float>(counts.voters));
  // The shares, and K0's best k of them (its members inside the row; 0 where K0 has fewer).
  const row_shares share = warp_row_shares<K>(row.max, plain, k, p);
  float s[per_lane];
  std::uint32_t closed = 0, anchored = 0;  // bit i: expert lane + 32 i is in K or past N; an anchor
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    s[i] = e < n ? share(row.key[i]) : 0.0f;
    if (e >= n || detail::test_bit(active, e)) closed |= 1u << i;
    if (e < n && detail::test_bit(anchors, e)) anchored |= 1u << i;
  }
  // K0's best k: at one row K0 is a prefix of the plain top-k (nothing, the row's top-1 or,
  // pinned, all of it), so they are its members as they stand (warp_topk_in<K, true>'s result,
  // without its scan of the row for members below the plain k-th).
  const std::uint64_t best = lane < k && plain && detail::test_bit(active, key_expert(plain)) ? plain : 0;
  float top = 0.0f;  // lane j < k: the token's j-th best share inside K (share_insert_k's list)
  if (lane < k && best) {
    const float v = share(best);
    top = v > 0.0f ? v : 0.0f;
  }
  float kth = __shfl_sync(detail::full_mask, top, k - 1);
  gain_t total = lane < k ? detail::to_gain(top) : gain_t{0};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(detail::full_mask, total, o);
  // Every expert's (gain, id) key. Gains change only when the k-th does (the steps that fill the
  // token's list leave it at 0), so up to 256 experts they are kept and recomputed only then;
  // 16 keys a lane (512 experts) would spill at 512 threads, so those are recomputed each step.
  constexpr bool keep_keys = per_lane <= 8;
  std::uint64_t gk[keep_keys ? per_lane : 1];
  float keyed_kth = -1.0f;  // below every k-th: the first step computes them
  for (int phase = counts.bulk ? 1 : 0; phase < 2; ++phase) {
    while (!(size >= limit || (phase == 1 && size >= k && p.budget_mass > 0.0f && !(total < target)))) {
      if constexpr (keep_keys) {
        if (kth != keyed_kth) {  // uniform
#pragma unroll
          for (int i = 0; i < per_lane; ++i)
            gk[i] = detail::gain_key(detail::share_gain(s[i], kth), warp_row<MaxN>::expert(i));
          keyed_kth = kth;
        }
      }
      const std::uint32_t open = (phase == 1 ? ~0u : anchored) & ~closed;
      std::uint64_t key = 0;  // this lane's best (gain, id) key (ids ascend: the max is the first) and its share
      float key_share = 0.0f;
#pragma unroll
      for (int i = 0; i < per_lane; ++i) {
        std::uint64_t ki;
        if constexpr (keep_keys) ki = gk[i];
        else ki = detail::gain_key(detail::share_gain(s[i], kth), warp_row<MaxN>::expert(i));
        if (((open >> i) & 1u) && ki > key) key = ki, key_share = s[i];
      }
      const std::uint64_t chosen = detail::warp_max_key(key);
      const gain_t g = chosen ? detail::key_gain(chosen) : 0;
      const int c = chosen ? detail::key_expert(chosen) : -1;
      if (c < 0 || (phase == 1 && g == 0)) break;
      // The chosen expert's share: its lane's best (s indexed at run time would live in local memory).
      const float sc = __shfl_sync(detail::full_mask, key_share, c % 32);
      if (lane == c % 32) closed |= 1u << (c / 32);
      if (lane == 0) detail::set_bit(active, c);
      total += g;
      ++size;
      if (sc > kth) {  // share_insert_k on the lane-spread list: lane j takes slot j
        const float prev = __shfl_up_sync(detail::full_mask, top, 1);
        const float slot = detail::share_slot(top, prev, lane == 0, sc);
        if (lane < k) top = slot;
        kth = __shfl_sync(detail::full_mask, top, k - 1);
      }
    }
  }
  __syncwarp();
  // The gains vanished below k experts (every share left underflows): the plain top-k fills K.
  for (int r = 0; r < K && size < k; ++r) {
    if (r >= k) break;
    const int e = key_expert(topk_slot(plain, r));
    if (!detail::test_bit(active, e)) {
      if (lane == 0) detail::set_bit(active, e);
      ++size;
    }
    __syncwarp();
  }
}

}  // namespace lynx
