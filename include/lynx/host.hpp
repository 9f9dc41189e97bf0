#pragma once
// The host path: the same stages and results as the device launchers, on host memory.
// It is the test oracle for the kernels and a real router for CPU engines. Per-element math
// comes from detail/row_math.hpp, which the kernels share, so ids agree bitwise (SPEC §5).
//
// Unlike the device launchers, host functions keep their scratch in std::vector.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "detail/budget.hpp"
#include "detail/histogram_rank.hpp"
#include "detail/row_math.hpp"
#include "params.hpp"

namespace lynx {

namespace host {

/// SPEC §3.1. Writes bins[t * N + e] for every row t < num_rows; rows that do not vote
/// (t >= num_valid, or no finite logit) are filled with lynx::no_vote.
template <class T>
status affinity_bin(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                    const route_params& p, std::int8_t* bins) {
  if (const status s = check(p, num_rows, row_stride, num_valid, {logits, bins});
      s != status::success)
    return s;
  if (num_valid == 0) return status::success;  // B = 0: nothing to do
  const int n = p.num_experts, depth = detail::bin_depth(p.beta);
  for (int t = 0; t < num_rows; ++t) {
    std::int8_t* out = bins + static_cast<std::int64_t>(t) * n;
    const T* row = logits + t * row_stride;
    const float m = t < num_valid ? detail::row_max(row, n) : -INFINITY;
    for (int e = 0; e < n; ++e)
      out[e] = m == -INFINITY ? no_vote
                              : static_cast<std::int8_t>(detail::affinity_bin_of(
                                    detail::load_logit(row, e), m, p.alpha, depth));
  }
  return status::success;
}

/// SPEC §3.2. counts[j * N + e] (j < histogram_bins(p)) and the exact rank of every expert
/// (0 = greatest H; equal histograms share a rank).
inline status score_experts(const std::int8_t* bins, int num_rows, const route_params& p,
                            std::int32_t* counts, std::int32_t* ranks) {
  if (const status s = check(p, num_rows, p.num_experts, num_rows, {bins, counts, ranks});
      s != status::success)
    return s;
  const int n = p.num_experts, nbins = histogram_bins(p);
  std::fill(counts, counts + static_cast<std::size_t>(nbins) * n, 0);
  for (int t = 0; t < num_rows; ++t)
    for (int e = 0; e < n; ++e) {
      const int j = detail::bin_digit(bins[static_cast<std::int64_t>(t) * n + e]);
      if (j >= 0 && j < nbins) ++counts[j * n + e];
    }
  // Sorting gives the same competition ranks as the kernels' all-pairs count in O(N log N).
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto greater = [&](int a, int b) {
    return detail::histogram_greater(counts, n, nbins, a, b);
  };
  std::sort(order.begin(), order.end(), greater);
  for (int i = 0; i < n; ++i)
    ranks[order[i]] = (i > 0 && !greater(order[i - 1], order[i])) ? ranks[order[i - 1]] : i;
  return status::success;
}

namespace detail {

inline int count_flags(const std::vector<std::uint8_t>& f) {
  return static_cast<int>(std::count(f.begin(), f.end(), std::uint8_t{1}));
}

template <class IdT>
void write_pad_rows(const std::vector<std::uint8_t>& loaded, const std::vector<std::uint8_t>& votes,
                    int num_rows, const route_params& p, IdT* ids, float* weights) {
  int pad[max_top_k];
  lynx::detail::pad_ids(loaded.data(), p.num_experts, p.top_k, pad);
  for (int t = 0; t < num_rows; ++t)
    if (!votes[t])
      lynx::detail::emit_pad_row(pad, p.top_k, p.pad_with_sentinel, p.sentinel_id,
                                 ids + static_cast<std::int64_t>(t) * p.top_k,
                                 weights + static_cast<std::int64_t>(t) * p.top_k);
}

}  // namespace detail

namespace detail {

// The budget policy's greedy (detail/budget.hpp): anchors first, then the best marginal gain,
// until the limit, the target mass, or no gain is left. The device kernel evaluates every gain
// at every step; here stale gains serve as upper bounds (lazy greedy). Each term of a gain only
// shrinks as K grows and fp32 addition is monotone, so a stale sum bounds the fresh one even
// in floating point, and the steps, the ties (lower id) and the sums are the device's exactly.
template <class T>
void budget_greedy(const T* logits, std::int64_t row_stride, const std::vector<std::uint8_t>& votes,
                   const std::vector<std::uint8_t>& anchors, const std::vector<float>& row_m,
                   const std::vector<std::uint64_t>& plain, int plain_unique, const route_params& p,
                   std::vector<std::uint8_t>& in_active) {
  namespace d = lynx::detail;
  const int n = p.num_experts, k = p.top_k, rows = static_cast<int>(votes.size());
  std::vector<int> voters;
  for (int t = 0; t < rows; ++t)
    if (votes[t]) voters.push_back(t);
  const int v = static_cast<int>(voters.size());
  // share[e * v + i]: expert-major, so a gain is one contiguous pass in token order.
  std::vector<float> share(static_cast<std::size_t>(n) * v), top(static_cast<std::size_t>(v) * k, 0.0f), kth(v, 0.0f);
  for (int i = 0; i < v; ++i) {
    const int t = voters[i];
    const T* row = logits + t * row_stride;
    const float sum = d::plain_activation_sum(row, row_m[t], plain.data() + static_cast<std::size_t>(t) * k, k, p.score);
    for (int e = 0; e < n; ++e)
      share[static_cast<std::size_t>(e) * v + i] = d::activation(d::load_logit(row, e), row_m[t], p.score) / sum;
  }
  const auto gain_of = [&](int e) {
    const float* s = share.data() + static_cast<std::size_t>(e) * v;
    float g = 0.0f;
    for (int i = 0; i < v; ++i) g += d::share_gain(s[i], kth[i]);
    return g;
  };
  int size = 0;
  float total = 0.0f;
  const auto add = [&](int e, float gain) {
    in_active[e] = 1;
    ++size;
    total += gain;
    const float* s = share.data() + static_cast<std::size_t>(e) * v;
    for (int i = 0; i < v; ++i) {
      if (!(s[i] > kth[i])) continue;
      d::share_insert(&top[static_cast<std::size_t>(i) * k], k, s[i]);
      kth[i] = top[static_cast<std::size_t>(i) * k + k - 1];
    }
  };
  for (int e = 0; e < n; ++e)  // pinned experts are loaded whatever the budget says
    if (in_active[e]) add(e, gain_of(e));
  const int limit = d::budget_limit(p.budget_experts, p.budget_fraction, plain_unique, n, k);
  const float target = p.budget_mass * static_cast<float>(v);
  std::vector<float> bound(n);
  std::vector<int> fresh_at(n, -1);  // the step at which bound[e] was computed
  for (int e = 0; e < n; ++e) bound[e] = in_active[e] ? 0.0f : gain_of(e);
  std::fill(fresh_at.begin(), fresh_at.end(), size);
  for (int phase = 0; phase < 2; ++phase)
    while (size < limit && (phase == 0 || !(p.budget_mass > 0.0f) || total < target)) {
      int pick = -1;
      for (;;) {
        std::uint64_t best = 0;
        for (int e = 0; e < n; ++e) {
          if (in_active[e] || (phase == 0 && !anchors[e])) continue;
          const std::uint64_t key = d::gain_key(bound[e], e);
          best = key > best ? key : best;
        }
        if (best == 0) break;
        const int e = d::key_expert(best);
        if (fresh_at[e] == size) {
          pick = e;
          break;
        }
        bound[e] = gain_of(e);
        fresh_at[e] = size;
      }
      if (pick < 0 || (phase == 1 && !(bound[pick] > 0.0f))) break;
      add(pick, bound[pick]);
    }
}

}  // namespace detail

/// SPEC §3.3 (and the never-worse guard, step 5), from the bins and ranks of the previous
/// stages (only the lynx policy reads them; others may pass null). Writes ids/weights
/// [num_rows x k]; non-voting rows as SPEC §5 says.
template <class T, class IdT>
status remap_topk(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                  const std::int8_t* bins, const std::int32_t* ranks, const route_params& p,
                  IdT* ids, float* weights) {
  const bool needs_scores = p.kind == policy::lynx;
  if (const status s = check(p, num_rows, row_stride, num_valid,
                             {logits, ids, weights, needs_scores ? static_cast<const void*>(bins) : logits,
                              needs_scores ? static_cast<const void*>(ranks) : logits});
      s != status::success)
    return s;
  if (num_rows == 0 || num_valid == 0) return status::success;
  namespace d = lynx::detail;
  const int n = p.num_experts, k = p.top_k;
  std::vector<std::uint8_t> in_active(n, 0), in_plain(n, 0), in_final(n, 0), votes(num_rows, 0), anchors(n, 0);
  std::vector<std::uint64_t> plain(static_cast<std::size_t>(num_rows) * k);
  std::vector<float> mass(num_rows), row_m(num_rows);
  std::uint64_t best[max_top_k];

  // Every voting row's logit keys, built once and reused by every selection below.
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(num_valid) * n);
  for (int t = 0; t < num_valid; ++t) {  // selection: each row's contribution to K
    const T* row = logits + t * row_stride;
    std::uint64_t* rk = keys.data() + static_cast<std::size_t>(t) * n;
    row_m[t] = d::row_keys(row, n, rk);
    if (row_m[t] == -INFINITY) continue;
    votes[t] = 1;
    std::uint64_t* pk = plain.data() + static_cast<std::size_t>(t) * k;
    d::topk_of_keys(rk, n, k, pk);
    for (int i = 0; i < k; ++i) in_plain[d::key_expert(pk[i])] = 1;
    mass[t] = d::original_mass(row, n, row_m[t], pk, k, p.score, p.renormalize);
    if (p.pinned && p.pinned[t]) {
      for (int i = 0; i < k; ++i) in_active[d::key_expert(pk[i])] = 1;
      continue;
    }
    if (p.anchor_top1 || p.kind == policy::budget) anchors[d::key_expert(pk[0])] = 1;
    if (p.kind == policy::lynx) {
      const std::int8_t* q = bins + static_cast<std::int64_t>(t) * n;
      d::topk_clear(best, k);
      for (int e = 0; e < n; ++e) d::topk_push(best, k, d::z_key_high(q[e], ranks[e]) | rk[e]);
      for (int i = 0; i < k; ++i) in_active[d::key_expert(best[i])] = 1;
    } else if (p.kind == policy::piggyback) {
      for (int i = 0; i < p.keep_k; ++i) in_active[d::key_expert(pk[i])] = 1;
    }
  }
  if (p.anchor_top1 && p.kind != policy::budget)
    for (int e = 0; e < n; ++e) in_active[e] |= anchors[e];
  if (p.kind == policy::budget)
    detail::budget_greedy(logits, row_stride, votes, anchors, row_m, plain, detail::count_flags(in_plain), p, in_active);

  std::vector<std::uint64_t> active_bits(n);
  for (int e = 0; e < n; ++e) active_bits[e] = d::active_bit(in_active[e] != 0);
  for (int t = 0; t < num_valid; ++t) {  // final: each row's top-k inside K (d::active_bit)
    if (!votes[t]) continue;
    const std::uint64_t* rk = keys.data() + static_cast<std::size_t>(t) * n;
    d::topk_clear(best, k);
    for (int e = 0; e < n; ++e) d::topk_push(best, k, rk[e] | active_bits[e]);
    for (int i = 0; i < k; ++i) in_final[d::key_expert(best[i])] = 1;
    d::emit_row(logits + t * row_stride, row_m[t], best, k, p.score, p.renormalize, mass[t],
                ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
  }
  const bool fallback = detail::count_flags(in_final) > detail::count_flags(in_plain);
  if (fallback)
    for (int t = 0; t < num_rows; ++t)
      if (votes[t])
        d::emit_row(logits + t * row_stride, row_m[t], plain.data() + static_cast<std::size_t>(t) * k,
                    k, p.score, p.renormalize, mass[t], ids + static_cast<std::int64_t>(t) * k,
                    weights + static_cast<std::int64_t>(t) * k);
  detail::write_pad_rows(fallback ? in_plain : in_final, votes, num_rows, p, ids, weights);
  return status::success;
}

/// The whole Lynx step: affinity_bin, score_experts, remap_topk.
template <class T, class IdT>
status route(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
             const route_params& p, IdT* ids, float* weights) {
  if (const status s = check(p, num_rows, row_stride, num_valid, {logits, ids, weights});
      s != status::success)
    return s;
  if (num_rows == 0 || num_valid == 0) return status::success;
  if (p.kind != policy::lynx)  // the other policies need no bins or scores
    return remap_topk<T, IdT>(logits, row_stride, num_rows, num_valid, nullptr, nullptr, p, ids, weights);
  std::vector<std::int8_t> bins(static_cast<std::size_t>(num_rows) * p.num_experts);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(histogram_bins(p)) * p.num_experts);
  std::vector<std::int32_t> ranks(p.num_experts);
  affinity_bin(logits, row_stride, num_rows, num_valid, p, bins.data());
  score_experts(bins.data(), num_rows, p, counts.data(), ranks.data());
  return remap_topk(logits, row_stride, num_rows, num_valid, bins.data(), ranks.data(), p, ids,
                    weights);
}

/// SPEC §4, the baseline router: plain top-k with the model's weighting; non-voting rows as
/// SPEC §5 says (the set the batch loads is the union of the voting rows' top-k).
template <class T, class IdT>
status topk_route(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                  const route_params& p, IdT* ids, float* weights) {
  if (const status s = check(p, num_rows, row_stride, num_valid, {logits, ids, weights});
      s != status::success)
    return s;
  if (num_rows == 0 || num_valid == 0) return status::success;
  namespace d = lynx::detail;
  const int n = p.num_experts, k = p.top_k;
  std::vector<std::uint8_t> in_plain(n, 0), votes(num_rows, 0);
  std::uint64_t best[max_top_k];
  for (int t = 0; t < num_valid; ++t) {
    const T* row = logits + t * row_stride;
    const float m = d::row_max(row, n);
    if (m == -INFINITY) continue;
    votes[t] = 1;
    d::plain_topk(row, n, k, best);
    for (int i = 0; i < k; ++i) in_plain[d::key_expert(best[i])] = 1;
    d::emit_row(row, m, best, k, p.score, p.renormalize, d::original_mass(row, n, m, best, k, p.score, p.renormalize),
                ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
  }
  detail::write_pad_rows(in_plain, votes, num_rows, p, ids, weights);
  return status::success;
}

}  // namespace host
}  // namespace lynx
