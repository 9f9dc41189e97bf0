// The policies beyond the paper (issue: routing quality): top-1 anchor, pinned rows,
// piggybacking, the greedy budget, and the library default.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include <lynx/host.hpp>
#include <lynx/measures.hpp>

#include "../../examples/common/npy.hpp"
#include "../support/budget_rule.hpp"
#include "../support/data_dir.hpp"
#include "../support/random_logits.hpp"

namespace policies_tests {

lynx::route_params params(int n, int k, lynx::policy kind = lynx::policy::lynx) {
  lynx::route_params p;
  p.num_experts = n;
  p.top_k = k;
  p.alpha = 1.0f;
  p.beta = 1;
  p.kind = kind;
  return p;
}

struct routed {
  std::vector<int> ids;
  std::vector<float> w;
};

routed route(const std::vector<float>& L, int rows, int b, const lynx::route_params& p,
             const std::uint8_t* pinned = nullptr) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k), std::vector<float>(static_cast<std::size_t>(rows) * p.top_k)};
  EXPECT_EQ(lynx::host::route(lynx::batch_ref<float, int>{L.data(), p.num_experts, rows, b, r.ids.data(), r.w.data(), pinned},
                              p),
            lynx::status::success);
  return r;
}

routed plain(const std::vector<float>& L, int rows, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k), std::vector<float>(static_cast<std::size_t>(rows) * p.top_k)};
  EXPECT_EQ(lynx::host::topk_route(L.data(), p.num_experts, rows, rows, p, r.ids.data(), r.w.data()), lynx::status::success);
  return r;
}

int argmax(const std::vector<float>& L, int t, int n) {
  return static_cast<int>(std::max_element(L.begin() + t * n, L.begin() + (t + 1) * n) - (L.begin() + t * n));
}

bool has(const routed& r, int t, int k, int e) {
  return std::find(r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k, e) != r.ids.begin() + (t + 1) * k;
}

void expect_valid_rows(const routed& r, int rows, int n, int k) {
  for (int t = 0; t < rows; ++t) {
    std::set<int> s(r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k);
    ASSERT_EQ(static_cast<int>(s.size()), k);
    ASSERT_GE(*s.begin(), 0);
    ASSERT_LT(*s.rbegin(), n);
  }
}

TEST(Anchor, KeepsEveryTop1ThatPlainLynxDrops) {
  // alpha 1, beta 1 on a flat layer loses many top-1s; the anchor keeps all of them.
  int lost = 0;
  for (std::uint32_t seed = 0; seed < 40; ++seed) {
    const int n = 64, k = 6, b = 16;
    const auto L = lynx_test::random_logits(b, n, seed, 0.3f);
    auto p = params(n, k);
    const routed off = route(L, b, b, p);
    p.anchor_top1 = true;
    const routed on = route(L, b, b, p);
    expect_valid_rows(on, b, n, k);
    for (int t = 0; t < b; ++t) {
      lost += !has(off, t, k, argmax(L, t, n));
      ASSERT_TRUE(has(on, t, k, argmax(L, t, n))) << "seed " << seed << " token " << t;
    }
  }
  EXPECT_GT(lost, 0) << "the case never exercised the anchor";
}

TEST(Pinned, PinnedRowsKeepTheirPlainTopKAndShareTheirExperts) {
  // Piggyback, keep 1 of k 2. Unpinned, token 0 adds only its top-1: K = {0, 2} and token 1
  // gets {2, 0}. Pinned (a prefill token), token 0 keeps {0, 1}, so K = {0, 1, 2} and token 1
  // takes e1, which it prefers to e0 and which is loaded anyway.
  const int n = 4, k = 2;
  const std::vector<float> L = {3.0f, 2.0f, -5.0f, -5.0f,  //
                                -5.0f, 1.0f, 2.0f, 1.5f};
  auto p = params(n, k, lynx::policy::piggyback);
  p.keep_k = 1;
  EXPECT_EQ(route(L, 2, 2, p).ids, (std::vector<int>{0, 2, 2, 0}));
  const std::uint8_t pinned[] = {1, 0};
  const routed r = route(L, 2, 2, p, pinned), base = plain(L, 2, p);
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1, 2, 1}));
  EXPECT_EQ(std::vector<float>(r.w.begin(), r.w.begin() + k), std::vector<float>(base.w.begin(), base.w.begin() + k));
}

TEST(Pinned, RandomBatchesNeverChangePinnedRows) {
  for (std::uint32_t seed = 0; seed < 60; ++seed) {
    const int n = 64, k = 8, b = 24;
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f);
    std::vector<std::uint8_t> pinned(b);
    for (int t = 0; t < b; ++t) pinned[t] = (t * 7 + seed) % 3 == 0;
    for (const auto kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
      auto p = params(n, k, kind);
      p.keep_k = 2;
      p.budget_fraction = kind == lynx::policy::budget ? 0.6f : 0.0f;
      const routed r = route(L, b, b, p, pinned.data()), base = plain(L, b, p);
      expect_valid_rows(r, b, n, k);
      for (int t = 0; t < b; ++t) {
        if (!pinned[t]) continue;
        for (int i = 0; i < k; ++i) ASSERT_EQ(r.ids[t * k + i], base.ids[t * k + i]) << "seed " << seed;
      }
    }
  }
}

TEST(Piggyback, HandComputed) {
  // keep 1 of k 2: the active set is the union of the top-1s {0, 3}; each token fills its
  // second slot from it.
  const int n = 4, k = 2;
  const std::vector<float> L = {3.0f, 2.0f, 1.0f, 0.0f,  //
                                0.0f, 1.0f, 2.0f, 3.0f};
  auto p = params(n, k, lynx::policy::piggyback);
  p.keep_k = 1;
  EXPECT_EQ(route(L, 2, 2, p).ids, (std::vector<int>{0, 3, 3, 0}));
}

TEST(Piggyback, KeepsEachTokensTopKeepAndUsesOnlyTheirUnion) {
  for (std::uint32_t seed = 0; seed < 50; ++seed) {
    const int n = 64, k = 6, b = 16, keep = 1 + static_cast<int>(seed % 5);
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f);
    auto p = params(n, k, lynx::policy::piggyback);
    p.keep_k = keep;
    const routed r = route(L, b, b, p), base = plain(L, b, p);
    std::set<int> kept;
    for (int t = 0; t < b; ++t)
      for (int i = 0; i < keep; ++i) kept.insert(base.ids[t * k + i]);
    for (int t = 0; t < b; ++t)
      for (int i = 0; i < keep; ++i) ASSERT_TRUE(has(r, t, k, base.ids[t * k + i]));
    if (static_cast<int>(kept.size()) < k) continue;
    for (int x : r.ids) ASSERT_TRUE(kept.count(x)) << "seed " << seed;
  }
}

// The budget objective, exactly as the policy defines it (in double).
double objective(const std::vector<float>& L, int b, int n, int k, const std::vector<int>& set) {
  double f = 0;
  for (int t = 0; t < b; ++t) {
    std::vector<double> p(n);
    const double m = *std::max_element(L.begin() + t * n, L.begin() + (t + 1) * n);
    for (int e = 0; e < n; ++e) p[e] = std::exp(L[t * n + e] - m);
    std::vector<double> all = p, in;
    std::sort(all.rbegin(), all.rend());
    double top = 0;
    for (int i = 0; i < k; ++i) top += all[i];
    for (int e : set) in.push_back(p[e]);
    std::sort(in.rbegin(), in.rend());
    for (int i = 0; i < k && i < static_cast<int>(in.size()); ++i) f += in[i] / top;
  }
  return f;
}

TEST(Budget, HandComputedGreedy) {
  // k 1, budget 2 experts, 3 tokens: tops are e0, e0, e2, so the anchors {0, 2} fill the budget.
  const int n = 4, k = 1;
  const std::vector<float> L = {2.0f, 1.9f, 0.0f, 0.0f,  //
                                2.0f, 0.0f, 1.9f, 0.0f,  //
                                0.0f, 1.9f, 2.0f, 0.0f};
  auto p = params(n, k, lynx::policy::budget);
  p.budget_experts = 2;
  EXPECT_EQ(route(L, 3, 3, p).ids, (std::vector<int>{0, 0, 2}));
  // k 2, budget 3: anchors {0, 2}, then the expert that adds most mass: e1 (tokens 0 and 2
  // give it shares near their top) beats e3 (near zero everywhere).
  auto p2 = params(n, 2, lynx::policy::budget);
  p2.budget_experts = 3;
  const routed r = route(L, 3, 3, p2);
  EXPECT_EQ(std::set<int>(r.ids.begin(), r.ids.end()), (std::set<int>{0, 1, 2}));
}

TEST(Budget, CountLimitIsNeverExceededAndTop1IsKept) {
  for (std::uint32_t seed = 0; seed < 80; ++seed) {
    const int n = 32 + static_cast<int>(seed % 4) * 32, k = 2 + static_cast<int>(seed % 7), b = 4 + static_cast<int>(seed % 29);
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f, seed % 3 == 0 ? 0.25f : 0.0f);
    auto p = params(n, k, lynx::policy::budget);
    p.budget_experts = std::max(k, 2 * k + static_cast<int>(seed % 9));
    const routed r = route(L, b, b, p);
    expect_valid_rows(r, b, n, k);
    const std::set<int> used(r.ids.begin(), r.ids.end());
    std::set<int> tops;
    for (int t = 0; t < b; ++t) tops.insert(argmax(L, t, n));
    ASSERT_LE(static_cast<int>(used.size()), p.budget_experts) << "seed " << seed;  // a hard limit
    if (static_cast<int>(tops.size()) > p.budget_experts) continue;  // then not every anchor fits
    for (int t = 0; t < b; ++t) ASSERT_TRUE(has(r, t, k, argmax(L, t, n))) << "seed " << seed;
  }
}

TEST(Budget, FractionAndMassModes) {
  for (std::uint32_t seed = 0; seed < 40; ++seed) {
    const int n = 64, k = 6, b = 16;
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f);
    auto p = params(n, k, lynx::policy::budget);
    p.budget_fraction = 0.7f;
    const routed r = route(L, b, b, p);
    const auto m = lynx::measure_batch(L.data(), n, b, p, r.ids.data());
    ASSERT_LE(m.unique_after, static_cast<int>(0.7f * m.unique_before + 0.5f));
    auto q = params(n, k, lynx::policy::budget);
    q.budget_mass = 0.95f;
    const routed rm = route(L, b, b, q);
    const auto mm = lynx::measure_batch(L.data(), n, b, q, rm.ids.data());
    ASSERT_GE(mm.retained_mass, 0.95 - 1e-5) << "seed " << seed;
    ASSERT_EQ(mm.top1_kept, 1.0);
  }
}

TEST(Budget, GreedyIsWithinOneMinusOneOverEOfTheBestSetWithTheAnchors) {
  // Brute force over every superset of the anchors of the same size on small batches.
  for (std::uint32_t seed = 0; seed < 30; ++seed) {
    const int n = 10, k = 2, b = 3, size = 4;
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f);
    auto p = params(n, k, lynx::policy::budget);
    p.budget_experts = size;
    const routed r = route(L, b, b, p);
    std::set<int> got(r.ids.begin(), r.ids.end()), anchors;
    for (int t = 0; t < b; ++t) anchors.insert(argmax(L, t, n));
    double best = 0;
    for (int mask = 0; mask < (1 << n); ++mask) {
      if (__builtin_popcount(mask) != size) continue;
      std::vector<int> s;
      bool ok = true;
      for (int e = 0; e < n; ++e)
        if (mask >> e & 1) s.push_back(e);
      for (int a : anchors) ok &= static_cast<bool>(mask >> a & 1);
      if (ok) best = std::max(best, objective(L, b, n, k, s));
    }
    const double mine = objective(L, b, n, k, std::vector<int>(got.begin(), got.end()));
    ASSERT_GE(mine, (1.0 - 1.0 / std::exp(1.0)) * best - 1e-9) << "seed " << seed;
    ASSERT_LE(static_cast<int>(got.size()), size);
  }
}

TEST(Budget, OneRowSkipsTheGreedyOnlyWhereItsKHoldsThePlainTopK) {
  // With a single voting row, block_route skips the budget's greedy and keeps the plain top-k
  // when detail::one_row_keeps_plain, from the shares of the row's plain k-th and (k + 1)-th
  // (warp_budget_keeps_plain), says K holds it. Wherever it says so, the host's budget route of
  // the row must be its plain top-k (topk_route's ids and weights); it must say so for nearly
  // every ordinary row; and the batch must include rows where the budget takes another expert
  // (shares that tie only on the gain grid), all of which it must refuse. Rows as the one-row
  // device test draws them; every limit mode, both scorings, pinned or not.
  const int dims[][2] = {{8, 2}, {16, 1}, {64, 6}, {128, 8}, {256, 8}, {512, 16}, {1000, 20}};
  const struct {
    int experts;
    float fraction, mass;
  } modes[] = {{0, 0.0f, 0.94f}, {3, 0.0f, 0.0f}, {0, 0.7f, 0.0f}, {0, 0.0f, 1.0f}, {1024, 0.0f, 0.0f}};
  std::uint32_t seed = 9100;
  int ordinary = 0, ordinary_kept = 0, other = 0;
  for (const auto& d : dims)
    for (int kind = 0; kind < 5; ++kind)
      for (const auto& mode : modes)
        for (const auto score : {lynx::scoring::softmax, lynx::scoring::sigmoid})
          for (const std::uint8_t pinned : {std::uint8_t{0}, std::uint8_t{1}}) {
            const int n = d[0], k = d[1];
            auto L = lynx_test::random_logits(1, n, seed++, 1.5f, kind == 1 ? 0.5f : 0.0f);
            if (kind == 2) L[n / 2] = 60.0f;  // every other share underflows the gain grid
            if (kind == 3) L[1] = NAN, L[n - 1] = INFINITY;
            if (kind == 4)  // shares near 2^-32 x a few: equal on the grid, distinct as floats
              for (int e = 1; e < n; ++e) L[e] = -19.0f - 1e-5f * static_cast<float>((e * 7) % 13);
            auto p = params(n, k, lynx::policy::budget);
            p.score = score;
            p.budget_experts = mode.experts ? std::clamp(mode.experts, k, n) : 0;  // a count limit in [k, N]
            p.budget_fraction = mode.fraction;
            p.budget_mass = mode.mass;
            const bool keeps = lynx_test::one_row_keeps_plain(L.data(), n, k, score);
            const routed budget = route(L, 1, 1, p, &pinned), top = plain(L, 1, p);
            const bool same = budget.ids == top.ids && budget.w == top.w;
            if (keeps) {
              ASSERT_TRUE(same) << "N " << n << " k " << k << " row kind " << kind << " seed " << seed - 1;
            }
            if (kind == 0) ordinary += 1, ordinary_kept += keeps;
            other += !same;
          }
  EXPECT_GT(other, 10) << "rows where the budget's one-row choice is not the plain top-k";
  EXPECT_GE(ordinary_kept * 10, ordinary * 9) << ordinary_kept << " of " << ordinary << " ordinary rows";
}

TEST(TopOne, RouteRunsAsPiggybackOnlyWhereKHoldsEveryTop1) {
  // effective_params (params.hpp): with k = 1, the policies whose K holds every voting token's
  // top-1 run as piggyback with keep_k 1; others, and every k > 1, run as given.
  const auto runs = [](lynx::route_params p) { return lynx::effective_params(p).kind; };
  auto p = lynx::default_params(128, 1);  // budget, mass mode, anchored
  EXPECT_EQ(runs(p), lynx::policy::piggyback);
  EXPECT_EQ(lynx::effective_params(p).keep_k, 1);
  p.budget_mass = 0.0f, p.budget_fraction = 1.0f;
  EXPECT_EQ(runs(p), lynx::policy::piggyback);
  p.budget_fraction = 0.5f;  // may stop below the plain top-1 set
  EXPECT_EQ(runs(p), lynx::policy::budget);
  p.budget_fraction = 0.0f, p.budget_experts = 127;
  EXPECT_EQ(runs(p), lynx::policy::budget);
  p.budget_experts = 128;
  EXPECT_EQ(runs(p), lynx::policy::piggyback);
  auto q = params(128, 1);  // the paper's lynx policy: no anchor
  EXPECT_EQ(runs(q), lynx::policy::lynx);
  q.anchor_top1 = true;
  EXPECT_EQ(runs(q), lynx::policy::piggyback);
  q.top_k = 2;
  EXPECT_EQ(runs(q), lynx::policy::lynx);
  EXPECT_EQ(runs(lynx::default_params(128, 2)), lynx::policy::budget);
}

TEST(TopOne, RouteAsPiggybackEqualsThePolicyBitwise) {
  // What effective_params relies on: with k = 1, the policy computed in full (the staged host path:
  // affinity_bin, score_experts, remap_topk, which effective_params does not touch) and route give
  // the same ids and weights, bit for bit, on batches with ties, padding, pinned rows, NaN, -inf
  // and +inf rows, both scorings, with and without renormalization. The same batches under the
  // policies effective_params leaves alone (the paper's unanchored lynx policy, a count limit below
  // the plain top-1 set) must differ from plain top-1 somewhere, or this test could not fail.
  std::uint32_t seed = 4400;
  int remapped_unanchored = 0, remapped_count = 0, cases = 0;
  lynx_test::picker pick(77);
  for (const int n : {8, 16, 64, 128, 300})
    for (int trial = 0; trial < 24; ++trial) {
      const int rows = 1 + pick(48), b = pick(4) == 0 ? pick(rows + 1) : rows;
      auto L = lynx_test::random_logits(rows, n, seed++, 1.0f + static_cast<float>(pick(3)), pick(3) == 0 ? 0.5f : 0.0f);
      if (rows > 2 && pick(2)) std::fill(L.begin() + n, L.begin() + 2 * n, -INFINITY);  // row 1 does not vote
      if (rows > 3 && pick(2)) L[2 * n + pick(n)] = NAN, L[2 * n + pick(n)] = INFINITY;
      std::vector<std::uint8_t> pinned(rows);
      for (auto& x : pinned) x = pick(6) == 0;
      auto base = params(n, 1);
      base.score = pick(2) ? lynx::scoring::sigmoid : lynx::scoring::softmax;
      base.renormalize = pick(2);
      base.alpha = 1.0f + static_cast<float>(pick(3));
      base.beta = pick(4);
      auto budget_mass = lynx::default_params(n, 1), budget_fraction = budget_mass, budget_all = budget_mass;
      budget_fraction.budget_mass = 0.0f, budget_fraction.budget_fraction = 1.0f;
      budget_all.budget_mass = 0.0f, budget_all.budget_experts = n;
      auto anchored = base, piggy = base;
      anchored.anchor_top1 = true;
      piggy.kind = lynx::policy::piggyback;
      for (lynx::route_params p : {budget_mass, budget_fraction, budget_all, anchored, piggy}) {
        p.score = base.score, p.renormalize = base.renormalize, p.alpha = base.alpha, p.beta = base.beta;
        ASSERT_EQ(lynx::effective_params(p).kind, lynx::policy::piggyback);
        const routed fast = route(L, rows, b, p, pinned.data());
        routed full{std::vector<int>(rows), std::vector<float>(rows)};
        std::vector<std::int8_t> bins(static_cast<std::size_t>(rows) * n);
        std::vector<std::int32_t> counts(static_cast<std::size_t>(lynx::histogram_bins(p)) * n), ranks(n);
        ASSERT_EQ(lynx::host::affinity_bin(L.data(), n, rows, b, p, bins.data()), lynx::status::success);
        ASSERT_EQ(lynx::host::score_experts(bins.data(), rows, p, counts.data(), ranks.data()), lynx::status::success);
        ASSERT_EQ(lynx::host::remap_topk(lynx::batch_ref<float, int>{L.data(), n, rows, b, full.ids.data(),
                                                                      full.w.data(), pinned.data()},
                                         bins.data(), ranks.data(), p),
                  lynx::status::success);
        ASSERT_EQ(fast.ids, full.ids) << "N " << n << " rows " << rows << " B " << b << " policy " << static_cast<int>(p.kind);
        ASSERT_EQ(std::memcmp(fast.w.data(), full.w.data(), rows * sizeof(float)), 0)  // bit for bit
            << "N " << n << " rows " << rows << " policy " << static_cast<int>(p.kind);
        ++cases;
      }
      // The controls: route as given, against plain top-1.
      const routed top = route(L, rows, b, piggy, pinned.data());
      const routed unanchored = route(L, rows, b, base, pinned.data());
      auto counted = budget_mass;
      counted.budget_mass = 0.0f, counted.budget_experts = 1;
      const routed count = route(L, rows, b, counted, pinned.data());
      remapped_unanchored += unanchored.ids != top.ids;
      remapped_count += count.ids != top.ids;
    }
  EXPECT_EQ(cases, 5 * 24 * 5);
  EXPECT_GT(remapped_unanchored, 5) << "batches where the unanchored lynx policy moves a top-1";
  EXPECT_GT(remapped_count, 5) << "batches where a count limit of 1 moves a top-1";
}

TEST(Policies, InvalidSettingsAreRejected) {
  const std::vector<float> L(16, 0.0f);
  std::vector<int> ids(16, 42);
  std::vector<float> w(16, 42.0f);
  auto p = params(8, 2, lynx::policy::piggyback);
  p.keep_k = 3;
  EXPECT_EQ(lynx::host::route(L.data(), 8, 2, 2, p, ids.data(), w.data()), lynx::status::invalid_policy);
  auto q = params(8, 2, lynx::policy::budget);
  EXPECT_EQ(lynx::host::route(L.data(), 8, 2, 2, q, ids.data(), w.data()), lynx::status::invalid_policy);  // no limit
  q.budget_experts = 1;  // below k
  EXPECT_EQ(lynx::host::route(L.data(), 8, 2, 2, q, ids.data(), w.data()), lynx::status::invalid_policy);
  q.budget_experts = 4;
  q.budget_mass = 0.9f;  // two limits
  EXPECT_EQ(lynx::host::route(L.data(), 8, 2, 2, q, ids.data(), w.data()), lynx::status::invalid_policy);
  q.budget_experts = 0;
  q.budget_mass = 1.5f;
  EXPECT_EQ(lynx::host::route(L.data(), 8, 2, 2, q, ids.data(), w.data()), lynx::status::invalid_policy);
  for (int x : ids) EXPECT_EQ(x, 42);
}

TEST(Default, DerivedFromNAndK) {
  const auto a = lynx::default_params(64, 6), b = lynx::default_params(512, 10);
  EXPECT_EQ(a.kind, lynx::policy::budget);
  EXPECT_EQ(a.budget_mass, 0.94f);
  EXPECT_TRUE(a.anchor_top1);
  EXPECT_EQ(a.alpha, 2.0f);  // k/N >= 1/16
  EXPECT_EQ(b.alpha, 1.5f);  // sparser
  EXPECT_EQ(lynx::check(a), lynx::status::success);
  for (const auto& pr : lynx::presets) EXPECT_EQ(lynx::check(lynx::default_params(pr.num_experts, pr.top_k)), lynx::status::success);
}

TEST(Default, MeetsTheTargetOnTheFlameDecodeTrace) {
  // Issue target: batch 16 on the FLAME decode trace, at least 25% fewer unique experts than
  // plain top-k at a retained mass of at least 0.94, with every token's top-1 kept.
  const std::string dir = lynx_test::shared_dir() + "/data/traces/flame-moe-290m-decode";
  if (!lynx_test::exists(dir + "/logits.npy")) GTEST_SKIP() << "no FLAME trace at " << dir << " (set LYNX_SHARED_DIR)";
  const npy::array a = npy::load(dir + "/logits.npy");
  const auto L = a.as<float>();
  const int layers = static_cast<int>(a.shape[0]), tokens = static_cast<int>(a.shape[1]), n = static_cast<int>(a.shape[2]), k = 6, bs = 16;
  const auto p = lynx::default_params(n, k);
  double before = 0, after = 0, retained = 0, top1 = 0;
  int batches = 0;
  std::vector<int> ids(bs * k);
  std::vector<float> w(bs * k);
  for (int l = 0; l < layers; ++l)
    for (int s = 0; s < tokens; s += bs) {
      const float* x = L.data() + (static_cast<std::size_t>(l) * tokens + s) * n;
      ASSERT_EQ(lynx::host::route(x, n, bs, bs, p, ids.data(), w.data()), lynx::status::success);
      const auto m = lynx::measure_batch(x, n, bs, p, ids.data());
      before += m.unique_before;
      after += m.unique_after;
      retained += m.retained_mass;
      top1 += m.top1_kept;
      ++batches;
    }
  EXPECT_NEAR(before / batches, 49.0, 0.1);
  EXPECT_LE(after / before, 0.75);
  EXPECT_GE(retained / batches, 0.94);
  EXPECT_EQ(top1 / batches, 1.0);
}

}  // namespace policies_tests
