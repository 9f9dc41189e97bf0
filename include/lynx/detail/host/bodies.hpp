#pragma once
// The host path's entry points, written once as forced-inline templates that host.hpp
// instantiates for AVX2 + FMA and for any CPU (simd.hpp). The per-element math is
// row_math.hpp's, shared with the kernels; what differs from the kernels is only how work is
// organised:
//
// - each row is loaded once into sanitized floats, in a loop without branches that compilers
//   vectorize (rows.hpp);
// - each row runs one N-wide selection, its plain top-k (P), and derives the other two from it
//   (topk.hpp, z_topk.hpp): the z top-k (SPEC §3.3 step 1) needs only the bin q* of P's k-th
//   expert, because bins are monotone in the logit, and then the best of bin q* by batch rank;
//   the top-k inside K is usually P, or the first k members of K among P's ranked candidates,
//   so it rarely scans N again;
// - the budget greedy is lazy (budget.hpp): the kernels' steps, with stale gains as bounds.
//
// Every shortcut yields the same ids, in the same order, as the kernels' packed-key top-k, and
// each falls back to that top-k where its premise does not hold (bins not from affinity_bin).
// Unlike the device launchers, these allocate their scratch on the heap.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../../params.hpp"
#include "../row_math.hpp"
#include "budget.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "topk.hpp"
#include "z_topk.hpp"

namespace lynx {
namespace host {
namespace detail {

template <class Isa, class T>
LYNX_HOST_INLINE void affinity_bin_body(Isa, const T* logits, std::int64_t row_stride, int num_rows,
                                        int num_valid, route_params p, std::int8_t* bins) {
  const int n = p.num_experts, depth = lynx::detail::bin_depth(p.beta);
  buffer<float> x(n);
  for (int t = 0; t < num_rows; ++t) {
    std::int8_t* out = bins + static_cast<std::int64_t>(t) * n;
    const float m = t < num_valid ? load_row(logits + t * row_stride, n, x.data()) : -INFINITY;
    if (m == -INFINITY)
      std::fill(out, out + n, no_vote);
    else
      bin_row(x.data(), n, m, p.alpha, depth, out);
  }
}
LYNX_HOST_DISPATCHED(affinity_bin_body)

template <class Isa>
LYNX_HOST_INLINE void score_experts_body(Isa, const std::int8_t* bins, int num_rows, route_params p,
                                         std::int32_t* counts, std::int32_t* ranks) {
  const int n = p.num_experts, nbins = histogram_bins(p);
  std::fill(counts, counts + static_cast<std::size_t>(nbins) * n, 0);
  {
    histogram_counter h(n, nbins, counts);
    for (int t = 0; t < num_rows; ++t) h.add(bins + static_cast<std::int64_t>(t) * n);
  }
  rank_histograms(counts, n, nbins, ranks);
}
LYNX_HOST_DISPATCHED(score_experts_body)

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

/// Every valid row loaded once (rows.hpp's load_row): rows t < num_valid at t * n.
struct loaded_rows {
  buffer<float> x, m;
  loaded_rows(int rows, int n) : x(static_cast<std::size_t>(rows) * n), m(static_cast<std::size_t>(rows)) {}
  template <class T>
  LYNX_HOST_INLINE float load(const T* row, int t, int n) {
    const std::size_t at = static_cast<std::size_t>(t) * n;
    return m[t] = load_row(row, n, x.data() + at);
  }
};

/// remap_topk on loaded rows. `trusted_bins`: the bins are affinity_bin's for these rows (z_topk).
template <class Isa, class T, class IdT>
LYNX_HOST_INLINE void remap_rows(Isa isa, const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                                 const std::int8_t* bins, bool trusted_bins, const std::int32_t* ranks,
                                 const rank_order& ro, const route_params& p, const std::uint8_t* pinned,
                                 const loaded_rows& lr, IdT* ids, float* weights) {
  namespace d = lynx::detail;
  const int n = p.num_experts, k = p.top_k;
  const std::size_t rows = static_cast<std::size_t>(num_valid);
  std::vector<std::uint8_t> in_active(n, 0), in_plain(n, 0), in_final(n, 0), votes(num_rows, 0),
      anchors(n, 0);
  buffer<float> mass(rows);
  buffer<std::uint64_t> plain(rows * k), ranked(rows * max_ranked);
  buffer<int> num_ranked(rows), plain_ids(rows * k);  // plain's experts, as ids
  std::vector<int> pick;
  topk_scratch ts(n);
  const int depth = d::bin_depth(p.beta);

  for (int t = 0; t < num_valid; ++t) {  // selection: each row's contribution to K
    const float m = lr.m[t];
    if (m == -INFINITY) continue;
    votes[t] = 1;
    const T* row = logits + t * row_stride;
    const float* xt = lr.x.data() + static_cast<std::size_t>(t) * n;
    std::uint64_t* pk = plain.data() + static_cast<std::size_t>(t) * k;
    int* pe = plain_ids.data() + static_cast<std::size_t>(t) * k;
    num_ranked[t] = plain_topk(isa, xt, nullptr, n, k, m, ts, pk,
                               ranked.data() + static_cast<std::size_t>(t) * max_ranked);
    for (int i = 0; i < k; ++i) pe[i] = d::key_expert(pk[i]);
    for (int i = 0; i < k; ++i) in_plain[pe[i]] = 1;
    mass[t] = original_mass(row, xt, n, m, pk, k, p.score, p.renormalize);
    if (pinned && pinned[t]) {
      for (int i = 0; i < k; ++i) in_active[pe[i]] = 1;
      continue;
    }
    if (p.anchor_top1 || p.kind == policy::budget) anchors[pe[0]] = 1;
    if (p.kind == policy::lynx)
      z_topk(isa, bins + static_cast<std::int64_t>(t) * n, xt, ranks, ro, pe, n, k, depth, trusted_bins,
             in_active.data(), pick);
    else if (p.kind == policy::piggyback)
      for (int i = 0; i < p.keep_k; ++i) in_active[pe[i]] = 1;
  }
  if (p.anchor_top1 && p.kind != policy::budget)
    for (int e = 0; e < n; ++e) in_active[e] |= anchors[e];
  if (p.kind == policy::budget)
    budget_greedy(isa, lr.x.data(), lr.m.data(), votes.data(), num_valid, anchors.data(), plain.data(),
                  count_flags(in_plain), p, in_active.data());

  const active_set K(in_active);
  final_scratch fs(n);
  std::uint64_t chosen[max_top_k];
  for (int t = 0; t < num_valid; ++t) {  // final: each row's top-k inside K
    if (!votes[t]) continue;
    const std::size_t at = static_cast<std::size_t>(t) * n;
    final_topk(isa, lr.x.data() + at, lr.m[t], plain.data() + static_cast<std::size_t>(t) * k,
               plain_ids.data() + static_cast<std::size_t>(t) * k,
               ranked.data() + static_cast<std::size_t>(t) * max_ranked, num_ranked[t], n, k, K, fs, chosen);
    for (int i = 0; i < k; ++i) in_final[d::key_expert(chosen[i])] = 1;
    d::emit_row(logits + t * row_stride, chosen, k, p.score, p.renormalize, mass[t],
                ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
  }
  const bool fallback = count_flags(in_final) > count_flags(in_plain);
  if (fallback)
    for (int t = 0; t < num_valid; ++t)
      if (votes[t])
        d::emit_row(logits + t * row_stride, plain.data() + static_cast<std::size_t>(t) * k,
                    k, p.score, p.renormalize, mass[t], ids + static_cast<std::int64_t>(t) * k,
                    weights + static_cast<std::int64_t>(t) * k);
  write_pad_rows(fallback ? in_plain : in_final, votes, num_rows, p, ids, weights);
}

template <class Isa, class T, class IdT>
LYNX_HOST_INLINE void remap_topk_body(Isa isa, const T* logits, std::int64_t row_stride, int num_rows,
                                      int num_valid, const std::int8_t* bins,
                                      const std::int32_t* ranks, route_params p, const std::uint8_t* pinned,
                                      IdT* ids, float* weights) {
  loaded_rows lr(num_valid, p.num_experts);
  for (int t = 0; t < num_valid; ++t) lr.load(logits + t * row_stride, t, p.num_experts);
  rank_order ro;
  if (p.kind == policy::lynx) ro.build(ranks, p.num_experts);
  remap_rows(isa, logits, row_stride, num_rows, num_valid, bins, false, ranks, ro, p, pinned, lr, ids, weights);
}
LYNX_HOST_DISPATCHED(remap_topk_body)

/// The lynx policy's whole step with each row loaded once: bins and histogram, ranks, remap.
template <class Isa, class T, class IdT>
LYNX_HOST_INLINE void route_body(Isa isa, const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                                 route_params p, const std::uint8_t* pinned, IdT* ids, float* weights) {
  const int n = p.num_experts, nbins = histogram_bins(p), depth = lynx::detail::bin_depth(p.beta);
  loaded_rows lr(num_valid, n);
  buffer<std::int8_t> bins(static_cast<std::size_t>(num_valid) * n);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(nbins) * n, 0), ranks(n);
  {
    histogram_counter h(n, nbins, counts.data());
    for (int t = 0; t < num_valid; ++t) {
      std::int8_t* q = bins.data() + static_cast<std::size_t>(t) * n;
      const float m = lr.load(logits + t * row_stride, t, n);
      if (m == -INFINITY) continue;  // no votes: its bins are never read
      bin_row(lr.x.data() + static_cast<std::size_t>(t) * n, n, m, p.alpha, depth, q);
      h.add(q);
    }
  }
  rank_order ro;
  ro.order.resize(n);
  rank_histograms(counts.data(), n, nbins, ranks.data(), ro.order.data());
  ro.runs(ranks.data(), n);
  remap_rows(isa, logits, row_stride, num_rows, num_valid, bins.data(), true, ranks.data(), ro, p, pinned, lr, ids,
             weights);
}
LYNX_HOST_DISPATCHED(route_body)

template <class Isa, class T, class IdT>
LYNX_HOST_INLINE void topk_route_body(Isa isa, const T* logits, std::int64_t row_stride, int num_rows,
                                      int num_valid, route_params p, IdT* ids, float* weights) {
  namespace d = lynx::detail;
  const int n = p.num_experts, k = p.top_k;
  std::vector<std::uint8_t> in_plain(n, 0), votes(num_rows, 0);
  buffer<float> x(n);
  topk_scratch ts(n);
  std::uint64_t best[max_top_k], taken[max_top_k];
  const bool custom = p.router.custom_choice();
  router_scratch rs(custom ? n : 1);
  buffer<float> c(custom ? n : 1);
  for (int t = 0; t < num_valid; ++t) {
    const T* row = logits + t * row_stride;
    const float m = load_row(row, n, x.data());
    if (m == -INFINITY) continue;
    votes[t] = 1;
    if (custom) {  // the model's choice, re-keyed by logit for the weights
      router_choice_row(isa, x.data(), n, k, p.router, c.data(), rs.masked.data(), rs.mask.data(), rs.ts, taken);
      d::by_logit(row, taken, k, best);
    } else
      plain_topk(isa, x.data(), nullptr, n, k, m, ts, best);
    for (int i = 0; i < k; ++i) in_plain[d::key_expert(best[i])] = 1;
    const d::emit_scale e = d::scaled_emit(p, original_mass(row, x.data(), n, m, best, k, p.score, p.renormalize));
    d::emit_row(row, best, k, p.score, e.renormalize, e.mass, ids + static_cast<std::int64_t>(t) * k,
                weights + static_cast<std::int64_t>(t) * k);
  }
  write_pad_rows(in_plain, votes, num_rows, p, ids, weights);
}
LYNX_HOST_DISPATCHED(topk_route_body)

}  // namespace detail
}  // namespace host
}  // namespace lynx
