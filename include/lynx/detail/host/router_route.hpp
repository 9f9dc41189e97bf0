#pragma once
// The host path's Lynx policies on a model router with a custom choice (groups, a correction
// bias): docs/ROUTERS.md defines what it computes. Written as a straightforward reference,
// row by row; the per-element math is row_math.hpp's and budget.hpp's, and the greedy is the
// plain-router path's (budget.hpp) on this file's shares.
#include <cstdint>
#include <vector>

#include "../../params.hpp"
#include "../budget.hpp"
#include "../row_math.hpp"
#include "budget.hpp"
#include "bodies.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "topk.hpp"

namespace lynx {
namespace host {
namespace detail {

/// One row as the router sees it: choice scores, kept groups, the model's choice P.
struct router_rows {
  int n, k;
  std::vector<float> c;             // [rows x n] choice scores
  std::vector<std::uint32_t> kept;  // [rows] kept groups
  std::vector<std::uint64_t> plain; // [rows x k] P, choice keys in choice order
  std::vector<std::uint64_t> plain_logit;  // [rows x k] P re-keyed by logit (emit order)
  std::vector<float> mass;          // [rows] P's original mass (SPEC §3.3 step 4)
  router_rows(int rows, int n_, int k_)
      : n(n_), k(k_), c(static_cast<std::size_t>(rows) * n_), kept(rows), plain(static_cast<std::size_t>(rows) * k_),
        plain_logit(plain.size()), mass(rows) {}
  float* c_of(int t) { return c.data() + static_cast<std::size_t>(t) * n; }
  std::uint64_t* plain_of(int t) { return plain.data() + static_cast<std::size_t>(t) * k; }
  std::uint64_t* plain_logit_of(int t) { return plain_logit.data() + static_cast<std::size_t>(t) * k; }
};

/// Expert e's key in a row's selections among `pool` (0: never chosen), with `hi` above the
/// choice key (z's bin and rank, or K's bit).
inline std::uint64_t pool_key(bool in_pool, std::uint64_t hi, float c, int e) {
  return in_pool ? hi | lynx::detail::logit_key(c, e) : 0;
}

template <class Isa, class T, class IdT>
LYNX_HOST_INLINE void router_route_body(Isa isa, const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                                        route_params p, const std::uint8_t* pinned, IdT* ids, float* weights) {
  namespace d = lynx::detail;
  const model_router& r = p.router;
  const int n = p.num_experts, k = p.top_k, depth = d::bin_depth(p.beta);
  router_rows rr(num_rows, n, k);
  buffer<float> x(static_cast<std::size_t>(n));
  router_scratch rs(n);
  std::vector<std::uint8_t> in_active(n, 0), in_plain(n, 0), in_final(n, 0), anchors(n, 0);
  std::vector<std::uint8_t> votes(num_rows, 0);

  for (int t = 0; t < num_valid; ++t) {  // the model's own choice, row by row
    const T* row = logits + t * row_stride;
    const float m = load_row(row, n, x.data());
    if (m == -INFINITY) continue;
    votes[t] = 1;
    rr.kept[t] = router_choice_row(isa, x.data(), n, k, r, rr.c_of(t), rs.masked.data(), rs.mask.data(), rs.ts,
                                   rr.plain_of(t));
    d::by_logit(row, rr.plain_of(t), k, rr.plain_logit_of(t));
    rr.mass[t] = original_mass(row, x.data(), n, m, rr.plain_logit_of(t), k, p.score, p.renormalize);
    for (int i = 0; i < k; ++i) in_plain[d::key_expert(rr.plain_of(t)[i])] = 1;
    if (pinned && pinned[t]) {
      for (int i = 0; i < k; ++i) in_active[d::key_expert(rr.plain_of(t)[i])] = 1;
      continue;
    }
    if (p.anchor_top1 || p.kind == policy::budget) anchors[d::key_expert(rr.plain_of(t)[0])] = 1;
    if (p.kind == policy::piggyback)
      for (int i = 0; i < p.keep_k; ++i) in_active[d::key_expert(rr.plain_of(t)[i])] = 1;
  }
  std::vector<std::uint8_t> group_of(n);  // router_allows without a division per expert
  for (int e = 0; e < n; ++e) group_of[e] = static_cast<std::uint8_t>(e / (n / r.num_groups));
  const auto allows = [&](int t, int e) { return (rr.kept[t] >> group_of[e] & 1u) != 0; };

  if (p.kind == policy::lynx) {
    // Bins of the choice score against the row's first choice; experts outside the kept
    // groups count as -inf (the deepest bin). Every voting row is in the histogram.
    const int nbins = histogram_bins(p);
    std::vector<std::int8_t> q(static_cast<std::size_t>(num_valid) * n);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(nbins) * n, 0), ranks(n);
    for (int t = 0; t < num_valid; ++t) {
      if (!votes[t]) continue;
      const float* c = rr.c_of(t);
      const float top = c[d::key_expert(rr.plain_of(t)[0])];
      std::int8_t* qt = q.data() + static_cast<std::size_t>(t) * n;
      for (int e = 0; e < n; ++e) {
        qt[e] = static_cast<std::int8_t>(d::affinity_bin_of(allows(t, e) ? c[e] : -INFINITY, top, p.alpha, depth));
        ++counts[static_cast<std::size_t>(d::bin_digit(qt[e])) * n + e];
      }
    }
    rank_histograms(counts.data(), n, nbins, ranks.data());
    std::uint64_t best[max_top_k];
    for (int t = 0; t < num_valid; ++t) {  // each row's top-k by z inside its kept groups
      if (!votes[t] || (pinned && pinned[t])) continue;
      const float* c = rr.c_of(t);
      const std::int8_t* qt = q.data() + static_cast<std::size_t>(t) * n;
      d::topk_clear(best, k);
      for (int e = 0; e < n; ++e) d::topk_push(best, k, pool_key(allows(t, e), d::z_key_high(qt[e], ranks[e]), c[e], e));
      for (int i = 0; i < k; ++i) in_active[d::key_expert(best[i])] = 1;
    }
  }
  if (p.anchor_top1 && p.kind != policy::budget)
    for (int e = 0; e < n; ++e) in_active[e] |= anchors[e];

  if (p.kind == policy::budget) {
    // Shares of the choice: the router's activation of the choice score over P's (softmax or
    // sigmoid without a bias: exactly the plain-router shares), or with a bias max(c, 0) over
    // P's sum of it; 0 outside the kept groups.
    std::vector<float> share;
    int v = 0;
    for (int t = 0; t < num_valid; ++t) v += votes[t];
    share.assign(static_cast<std::size_t>(v) * n, 0.0f);
    for (int t = 0, i = 0; t < num_valid; ++t) {
      if (!votes[t]) continue;
      const float* c = rr.c_of(t);
      const std::uint64_t* pt = rr.plain_of(t);
      const float top = c[d::key_expert(pt[0])];
      const auto value = [&](int e) {
        return d::share_value(allows(t, e) ? c[e] : -INFINITY, top, p.score, r.bias != nullptr);
      };
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += value(d::key_expert(pt[j]));
      float* s = share.data() + static_cast<std::size_t>(i++) * n;
      if (sum > 0.0f)
        for (int e = 0; e < n; ++e) s[e] = value(e) / sum;
    }
    budget_greedy(isa, nullptr, nullptr, votes.data(), num_valid, anchors.data(), rr.plain.data(),
                  count_flags(in_plain), p, in_active.data(), share.data());
  }

  std::uint64_t chosen[max_top_k], emit[max_top_k];
  for (int t = 0; t < num_valid; ++t) {  // final: the row's top-k by choice inside K
    if (!votes[t]) continue;
    const float* c = rr.c_of(t);
    d::topk_clear(chosen, k);
    if (pinned && pinned[t])  // keeps P, whatever else a relaxed limit would let it take
      std::copy_n(rr.plain_of(t), k, chosen);
    else
      for (int e = 0; e < n; ++e) {
        const bool kept = allows(t, e), in = in_active[e] && (kept || r.relaxed_groups);
        d::topk_push(chosen, k, pool_key(kept || in, d::active_bit(in), c[e], e));
      }
    for (int i = 0; i < k; ++i) in_final[d::key_expert(chosen[i])] = 1;
    d::by_logit(logits + t * row_stride, chosen, k, emit);
    const d::emit_scale es = d::scaled_emit(p, rr.mass[t]);
    d::emit_row(logits + t * row_stride, emit, k, p.score, es.renormalize, es.mass,
                ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
  }
  const bool fallback = count_flags(in_final) > count_flags(in_plain);  // never worse
  if (fallback)
    for (int t = 0; t < num_valid; ++t)
      if (votes[t]) {
        const d::emit_scale es = d::scaled_emit(p, rr.mass[t]);
        d::emit_row(logits + t * row_stride, rr.plain_logit_of(t), k, p.score, es.renormalize, es.mass,
                    ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
      }
  write_pad_rows(fallback ? in_plain : in_final, votes, num_rows, p, ids, weights);
}
LYNX_HOST_DISPATCHED(router_route_body)

}  // namespace detail
}  // namespace host
}  // namespace lynx
