#pragma once
// The host path's budget greedy: the kernels' steps exactly, with lazy gains.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "../../params.hpp"
#include "../budget.hpp"
#include "../row_math.hpp"
#include "topk.hpp"

namespace lynx {
namespace host {
namespace detail {

namespace d = lynx::detail;

/// The budget policy's greedy (detail/budget.hpp), from loaded rows x (row t at t * n), or from
/// given shares ([voting rows x n], voter-major; x and row_m unused then: a model router's).
/// K starts as K0 = the pinned experts, plus the anchors when all of them fit in the limit (the
/// greedy would take every anchor first anyway), inserted at once; the batch's mass is then
/// summed token by token. Then the best marginal gain, anchors first when they did not fit,
/// until the limit, the target mass, or no gain is left; below k experts, the target does not
/// stop it, and vanished gains leave the rest to fill_from_plain. Gains and the batch's mass are
/// exact sums on the gain grid (detail/budget.hpp), so they do not depend on the order in which
/// the kernel adds them. The kernel keeps every gain fresh; here stale gains serve as upper
/// bounds (lazy greedy): each term only shrinks as K grows, so a stale sum bounds the fresh one,
/// and the steps and the ties (lower id) are the kernel's exactly.
template <class Isa>
LYNX_HOST_INLINE void budget_greedy(Isa isa, const float* x, const float* row_m,
                                    const std::uint8_t* votes, int rows, const std::uint8_t* anchors,
                                    const std::uint64_t* plain, int plain_unique, const route_params& p,
                                    std::uint8_t* in_active, const float* given_shares = nullptr) {
  const int n = p.num_experts, k = p.top_k;
  std::vector<int> voters;
  for (int t = 0; t < rows; ++t)
    if (votes[t]) voters.push_back(t);
  const int v = static_cast<int>(voters.size());
  // share[i * n + e]: token-major, so that the first gains of all experts are one vector pass.
  std::vector<float> share(static_cast<std::size_t>(v) * n), top(static_cast<std::size_t>(v) * k, 0.0f), kth(v, 0.0f);
  std::vector<d::gain_t> bound(n, 0);
  if (given_shares) std::copy_n(given_shares, share.size(), share.begin());
  for (int i = 0; i < v && !given_shares; ++i) {
    const int t = voters[i];
    const float* xt = x + static_cast<std::size_t>(t) * n;
    const std::uint64_t* pt = plain + static_cast<std::size_t>(t) * k;
    float sum = 0.0f;  // plain_activation_sum, over the loaded row
    for (int j = 0; j < k; ++j) sum += d::activation(xt[d::key_expert(pt[j])], row_m[t], p.score);
    float* s = share.data() + static_cast<std::size_t>(i) * n;
    const float mt = row_m[t];
    if (p.score == scoring::sigmoid)  // d::activation, one loop per scoring so that it vectorizes
      for (int e = 0; e < n; ++e) s[e] = d::scaled_sigmoid(xt[e], mt) / sum;
    else
      for (int e = 0; e < n; ++e) s[e] = d::exp_f32(xt[e] - mt) / sum;
  }
  const auto insert = [&](int e) {
    for (int i = 0; i < v; ++i) {
      float* ti = top.data() + static_cast<std::size_t>(i) * k;
      d::share_insert(ti, k, share[static_cast<std::size_t>(i) * n + e]);
      kth[i] = ti[k - 1];
    }
  };
  const int limit = d::budget_limit(p.budget_experts, p.budget_fraction, plain_unique, n, k);
  int size = 0, with_anchors = 0;
  for (int e = 0; e < n; ++e) {
    size += in_active[e] ? 1 : 0;
    with_anchors += (in_active[e] || anchors[e]) ? 1 : 0;
  }
  const bool bulk = with_anchors <= limit;
  std::vector<std::uint32_t> mask(n);
  for (int e = 0; e < n; ++e) {
    if (bulk && anchors[e]) in_active[e] = 1;
    mask[e] = in_active[e] ? ~0u : 0u;
  }
  if (bulk) size = with_anchors;
  // Inserting K0's shares one by one leaves each token the k largest positive ones. A share is
  // exp_f32 or sigmoid of the logit over a per-token sum, and exp_f32 is monotone (checked over
  // every float), so those are the shares of the token's top-k logits inside K0.
  if (size > 0 && given_shares) {  // the same k largest positive shares, one by one
    for (int e = 0; e < n; ++e)
      if (in_active[e]) insert(e);
  } else if (size > 0) {
    final_scratch fs(n);
    std::uint64_t best[max_top_k];
    const int take = size < k ? size : k;
    for (int i = 0; i < v; ++i) {
      const int t = voters[i];
      const std::size_t at = static_cast<std::size_t>(t) * n;
      masked_topk(isa, x + at, row_m[t], n, k, mask.data(), fs, best);
      float* ti = top.data() + static_cast<std::size_t>(i) * k;
      for (int j = 0; j < take; ++j) {
        const float sh = share[static_cast<std::size_t>(i) * n + d::key_expert(best[j])];
        ti[j] = sh > 0.0f ? sh : 0.0f;  // share_insert never takes 0 or NaN
      }
      kth[i] = ti[k - 1];
    }
  }
  d::gain_t total = 0;
  for (int i = 0; i < v; ++i)
    for (int j = 0; j < k; ++j) total += d::to_gain(top[static_cast<std::size_t>(i) * k + j]);
  const auto gain_of = [&](int e) {
    d::gain_t g = 0;
    for (int i = 0; i < v; ++i) g += d::share_gain(share[static_cast<std::size_t>(i) * n + e], kth[i]);
    return g;
  };
  for (int i = 0; i < v; ++i) {  // every gain, token by token
    const float* s = share.data() + static_cast<std::size_t>(i) * n;
    const float ki = kth[i];
    for (int e = 0; e < n; ++e) bound[e] += d::share_gain(s[e], ki);
  }
  std::vector<int> fresh_at(n, size);  // the K size at which bound[e] was computed
  const d::gain_t target = d::to_gain(p.budget_mass * static_cast<float>(v));
  // Candidates by their bound, then the lower id, the greatest on top: the argmax in O(log N).
  const auto below = [](const std::pair<d::gain_t, int>& a, const std::pair<d::gain_t, int>& b) {
    return d::gain_before(b.first, b.second, a.first, a.second);
  };
  std::vector<std::pair<d::gain_t, int>> heap;
  for (int phase = bulk ? 1 : 0; phase < 2; ++phase) {
    heap.clear();
    for (int e = 0; e < n; ++e)
      if (!in_active[e] && (phase == 1 || anchors[e])) heap.emplace_back(bound[e], e);
    std::make_heap(heap.begin(), heap.end(), below);
    // To the limit, or in mass mode to the target, but not below k experts: with fewer, every
    // token would fill its top-k from outside K, and a count limit would break.
    while (size < limit && (phase == 0 || size < k || !(p.budget_mass > 0.0f) || total < target)) {
      int pick = -1;
      while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), below);
        const int e = heap.back().second;
        heap.pop_back();
        if (fresh_at[e] == size) {
          pick = e;
          break;
        }
        bound[e] = gain_of(e);
        fresh_at[e] = size;
        heap.emplace_back(bound[e], e);
        std::push_heap(heap.begin(), heap.end(), below);
      }
      if (pick < 0 || (phase == 1 && bound[pick] == 0)) break;
      in_active[pick] = 1;
      ++size;
      total += bound[pick];
      insert(pick);
    }
  }
  for (int i = 0; i < v && size < k; ++i)
    size = d::fill_from_plain(plain + static_cast<std::size_t>(voters[i]) * k, k, in_active, size);
}

}  // namespace detail
}  // namespace host
}  // namespace lynx
