#pragma once
// The host path's z top-k (SPEC §3.3 step 1) from a row's plain top-k: bins are monotone in
// the logit, so only the bin q* of the k-th plain expert needs choosing by batch rank.
#include <cstdint>
#include <vector>

#include "../row_math.hpp"
#include "rows.hpp"
#include "topk.hpp"

namespace lynx {
namespace host {
namespace detail {

namespace d = lynx::detail;

/// SPEC §3.3 step 1 for one row: its top-k by z = (bin, batch rank, logit, lower id), the same
/// set as the kernels' top-k of z_key, from the row's plain top-k P (`plain`: its ids in key
/// order). Marks the chosen experts in `mark`.
/// Bins are monotone in the logit, so every expert above the bin q* of the k-th plain expert is
/// in P, and the rest come from bin q* in rank order. `trusted`: the bins are affinity_bin's
/// for these logits (route's own); otherwise the premise is checked, and where it fails this
/// runs the packed-key top-k.
template <class Isa>
LYNX_HOST_INLINE void z_topk(Isa isa, const std::int8_t* q, const float* x, const std::int32_t* ranks,
                             const rank_order& ro, const int* plain, int n, int k, int depth,
                             bool trusted, std::uint8_t* mark, std::vector<int>& pick) {
  // q* = the bin of P's k-th expert; above = how many experts have a higher bin. With bins
  // monotone in the logit, those are all in P, and bin q* holds the k - above others.
  const int star = q[plain[k - 1]];
  int above = 0;
  for (int i = 0; i < k; ++i) above += q[plain[i]] > star ? 1 : 0;
  if (!trusted) {
    int all_above = 0, p_at_least = 0;
    for (int e = 0; e < n; ++e) all_above += q[e] > star ? 1 : 0;
    for (int i = 0; i < k; ++i) p_at_least += q[plain[i]] >= star ? 1 : 0;
    if (star > 0 || star < -depth || all_above != above || p_at_least != k) {
      std::uint64_t best[max_top_k];
      d::topk_clear(best, k);
      for (int e = 0; e < n; ++e) d::topk_push(best, k, d::z_key_high(q[e], ranks[e]) | key_of(x[e], e));
      for (int i = 0; i < k; ++i) mark[d::key_expert(best[i])] = 1;
      return;
    }
  }
  for (int i = 0; i < k; ++i)
    if (q[plain[i]] > star) mark[plain[i]] = 1;
  const std::int8_t want = static_cast<std::int8_t>(star);
  const int need = k - above;
  if (need == 0) return;
  // Bin q* is sparse when q* is not the deepest bin: then the row's few experts in it by
  // (rank, logit key) cost less than a walk in rank order to the need-th of them.
  std::uint64_t words[max_experts / 64];
  const int in_star = match_bits(isa, q, n, want, words);
  if (in_star * in_star <= need * n) {
    std::uint64_t best[max_top_k];
    d::topk_clear(best, need);
    for (int w = 0; w < (n + 63) / 64; ++w)
      for (std::uint64_t b = words[w]; b; b &= b - 1) {
        const int e = w * 64 + lowest_set_bit(b);
        const int r = rank_order::clamp(ranks[e], n);
        d::topk_push(best, need, (static_cast<std::uint64_t>(n - r) << 48) | key_of(x[e], e));
      }
    for (int j = 0; j < need; ++j) mark[d::key_expert(best[j])] = 1;
    return;
  }
  pick.resize(n);
  const int* order = ro.order.data();
  int* picked = pick.data();
  int c = 0, i = 0;  // the first `need` experts of bin q* in rank order
  for (; i < n; ++i) {
    const int e = order[i];
    picked[c] = e;
    c += q[e] == want ? 1 : 0;
    if (c == need) break;
  }
  if (c == need && ro.end[i] - ro.first[i] > 1) {
    // The last pick's rank is shared: its run's experts of bin q* go by logit key instead.
    for (int j = ro.first[i]; j <= i; ++j) c -= q[ro.order[j]] == want ? 1 : 0;
    const int rest = need - c;
    std::uint64_t best[max_top_k];
    d::topk_clear(best, rest);
    for (int j = ro.first[i]; j < ro.end[i]; ++j) {
      const int e = ro.order[j];
      if (q[e] == want) d::topk_push(best, rest, key_of(x[e], e));
    }
    for (int j = 0; j < rest; ++j) mark[d::key_expert(best[j])] = 1;
  }
  for (int j = 0; j < c; ++j) mark[picked[j]] = 1;
}

}  // namespace detail
}  // namespace host
}  // namespace lynx
