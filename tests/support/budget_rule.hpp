#pragma once
// The one-row budget rule (detail::one_row_keeps_plain) on the host, from a row's logits, with
// the inputs warp_budget_keeps_plain gives it on the device: the row's top k + 1 keys, its max,
// and shares over the plain top-k's sum in key order (row_shares).

#include <algorithm>
#include <cstdint>

#include <lynx/detail/budget.hpp>
#include <lynx/detail/row_math.hpp>
#include <lynx/params.hpp>

namespace lynx_test {

inline bool one_row_keeps_plain(const float* x, int n, int k, lynx::scoring score) {
  namespace d = lynx::detail;
  std::uint64_t best[lynx::max_top_k + 1];
  d::plain_topk(x, n, std::min(k + 1, n), best);
  const float m = d::row_max(x, n);
  const auto value = [&](std::uint64_t key) {
    return d::share_value(d::unordered_float(static_cast<std::uint32_t>(key >> 16)), m, score, false);
  };
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += value(best[j]);
  const auto share = [&](std::uint64_t key) { return sum > 0.0f ? value(key) / sum : 0.0f; };
  return d::one_row_keeps_plain(share(best[k - 1]), n > k ? share(best[k]) : 0.0f);
}

}  // namespace lynx_test
