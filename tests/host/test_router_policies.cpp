// The Lynx policies on the models' own routers (docs/ROUTERS.md), on the host path: hand cases
// for the group limit kept and relaxed, the definition's reduction to plain Lynx where the
// router's choice is plain top-k, and invariants on random and adversarial batches at every
// model's routing constants (k distinct ids, the kept groups, B = 1, never worse, the anchor,
// pinned rows, budgets, weights). The kept groups and the first choice are recomputed here in
// double precision from the published algorithm (vLLM's grouped_topk).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <string>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <lynx/half.hpp>
#include <lynx/host.hpp>
#include <lynx/measures.hpp>

#include "../support/params.hpp"
#include "../support/random_logits.hpp"

namespace router_policies_tests {

using lynx::policy;

struct routed {
  std::vector<int> ids;
  std::vector<float> w;
};

routed run(bool lynx_route, const std::vector<float>& L, int rows, int valid, const lynx::route_params& p,
           const std::vector<std::uint8_t>* pinned = nullptr) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k, -7),
           std::vector<float>(static_cast<std::size_t>(rows) * p.top_k, -7.0f)};
  lynx::batch_ref<float, int> b{L.data(), p.num_experts, rows, valid, r.ids.data(), r.w.data()};
  b.pinned = pinned ? pinned->data() : nullptr;
  EXPECT_EQ(lynx_route ? lynx::host::route(b, p) : lynx::host::topk_route(b, p), lynx::status::success);
  return r;
}

/// The kept groups (a flag per expert) and the first choice of a row, from vLLM's algorithm.
struct model_view {
  std::vector<bool> allowed;
  int first = -1;
};
model_view reference_view(const float* l, const lynx::route_params& p) {
  const int n = p.num_experts, G = p.router.num_groups, size = n / G;
  std::vector<double> c(n);
  for (int e = 0; e < n; ++e)
    c[e] = p.router.bias ? 1.0 / (1.0 + std::exp(-static_cast<double>(l[e]))) + p.router.bias[e] : l[e];
  std::vector<double> group(G);
  for (int g = 0; g < G; ++g) {
    std::vector<double> v(c.begin() + g * size, c.begin() + (g + 1) * size);
    std::sort(v.rbegin(), v.rend());
    group[g] = p.router.bias ? v[0] + v[1] : v[0];
  }
  std::vector<int> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return group[a] > group[b]; });
  model_view v;
  v.allowed.assign(n, false);
  for (int j = 0; j < p.router.top_groups; ++j)
    for (int e = order[j] * size; e < (order[j] + 1) * size; ++e) v.allowed[e] = true;
  for (int e = 0; e < n; ++e)
    if (v.allowed[e] && (v.first < 0 || c[e] > c[v.first])) v.first = e;
  return v;
}

lynx::route_params grouped(int n, int k, int groups, int top_groups, policy kind, bool relaxed) {
  auto p = lynx_test::params(n, k, 1.0f, 1, lynx::scoring::softmax, true);
  p.router.num_groups = groups, p.router.top_groups = top_groups, p.router.relaxed_groups = relaxed;
  p.kind = kind, p.keep_k = 1;
  if (kind == policy::budget) p.budget_experts = k;
  return p;
}

TEST(RouterPolicies, GroupLimitKeptAndRelaxedByHand) {
  // 8 experts in 2 groups of 4, keep 1 group (softmax, group max: DeepSeek-V2 style), top-2.
  // A keeps group 0 (max 3 > 1): P = {0, 1}. B keeps group 1 (max 3 > 2.5): P = {4, 5},
  // although plain top-2 would take 0 (2.5) over 5 (2).
  const std::vector<float> L = {3, 2, 0, 0, 1, 0, 0, 0,  //
                                2.5f, 0, 0, 0, 3, 2, 0, 0};
  for (const policy kind : {policy::piggyback, policy::budget}) {
    // piggyback keep 1, and budget of 2 experts (anchors first): K = {0, 4}.
    const auto kept = run(true, L, 2, 2, grouped(8, 2, 2, 1, kind, false));
    // Kept: each token has one expert of K in its groups and fills from its groups.
    EXPECT_EQ(kept.ids, (std::vector<int>{0, 1, 4, 5})) << int(kind);
    const auto relaxed = run(true, L, 2, 2, grouped(8, 2, 2, 1, kind, true));
    // Relaxed: both take K = {0, 4}, each in its own order; 2 experts instead of 4.
    EXPECT_EQ(relaxed.ids, (std::vector<int>{0, 4, 4, 0})) << int(kind);
    const float a = 1.0f / (1.0f + std::exp(-2.0f)), b = 1.0f / (1.0f + std::exp(-0.5f));
    EXPECT_NEAR(relaxed.w[0], a, 1e-6f);
    EXPECT_NEAR(relaxed.w[1], 1.0f - a, 1e-6f);
    EXPECT_NEAR(relaxed.w[2], b, 1e-6f);
    EXPECT_NEAR(relaxed.w[3], 1.0f - b, 1e-6f);
    // The baseline is the model's own choice.
    EXPECT_EQ(run(false, L, 2, 2, grouped(8, 2, 2, 1, kind, false)).ids, (std::vector<int>{0, 1, 4, 5}));
  }
}

TEST(RouterPolicies, ExpertsOutsideATokensGroupsGetNoVoteByHand) {
  // lynx policy, alpha 1, beta 2 (bins 0, -1, -2), top-2, 2 groups of 4, keep 1 (group max).
  // A keeps group 0 (3 > 2.95), so its 2.95 on expert 5 is no vote (the deepest bin), not bin 0.
  // B keeps group 1: expert 4 in bin 0, experts 5 (1.5) and 6 (1.6) in bin -1. Their batch
  // scores are then equal (A: bin -2 for both), and the tie goes to the higher logit: 6. Had
  // A's 2.95 voted, expert 5 would outrank 6 and B would take it.
  const std::vector<float> L = {3, 2.9f, 0, 0, 0, 2.95f, 0, 0,  //
                                0, 0, 0, 0, 3, 1.5f, 1.6f, 0};
  auto p = grouped(8, 2, 2, 1, policy::lynx, false);
  p.alpha = 1.0f, p.beta = 2;
  EXPECT_EQ(run(true, L, 2, 2, p).ids, (std::vector<int>{0, 1, 4, 6}));
}

TEST(RouterPolicies, ScalingMultipliesTheWeights) {
  const std::vector<float> L = {3, 2, 0, 0, 1, 0, 0, 0, 2.5f, 0, 0, 0, 3, 2, 0, 0};
  auto p = grouped(8, 2, 2, 1, policy::piggyback, true);
  const auto one = run(true, L, 2, 2, p);
  p.router.scaling = 2.5f;
  const auto scaled = run(true, L, 2, 2, p);
  EXPECT_EQ(scaled.ids, one.ids);
  for (std::size_t i = 0; i < one.w.size(); ++i) EXPECT_NEAR(scaled.w[i], 2.5f * one.w[i], 1e-6f) << i;
}

TEST(RouterPolicies, APlainChoiceThroughTheRouterPathIsPlainLynxBitwise) {
  // Every group kept and no bias: the router's choice is plain top-k, and the definition
  // reduces to SPEC §3 exactly. The router path (router_route.hpp) then must give the plain
  // path's ids and weights bit for bit, for every policy, with anchors, pins and padding.
  for (const int n : {64, 128}) {
    const int k = n == 64 ? 6 : 8, rows = 24, valid = 21;
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
      const auto L = lynx_test::random_logits(rows, n, seed * 31 + n, 1.5f, seed % 2 ? 0.25f : 0.0f);
      std::vector<std::uint8_t> pinned(rows, 0);
      pinned[3] = pinned[11] = 1;
      for (const auto s : {lynx::scoring::softmax, lynx::scoring::sigmoid})
        for (const policy kind : {policy::lynx, policy::piggyback, policy::budget}) {
          auto plain = lynx_test::params(n, k, 2.0f, 2, s, seed % 3 != 0);
          plain.kind = kind, plain.keep_k = 2, plain.anchor_top1 = seed % 2 == 0;
          if (kind == policy::budget) {
            if (seed % 3 == 0) {
              plain.budget_experts = 2 * k;
            } else {
              plain.budget_mass = 0.9f;
            }
          }
          auto via = plain;
          via.router.num_groups = 4, via.router.top_groups = 4;
          ASSERT_FALSE(via.router.plain());
          const auto a = run(true, L, rows, valid, plain, &pinned), b = run(true, L, rows, valid, via, &pinned);
          ASSERT_EQ(a.ids, b.ids) << n << " seed " << seed << " policy " << int(kind) << " scoring " << int(s);
          for (std::size_t i = 0; i < a.w.size(); ++i)
            ASSERT_EQ(a.w[i], b.w[i]) << n << " seed " << seed << " policy " << int(kind) << " at " << i;
        }
    }
  }
}

std::vector<float> model_bias(int n, std::uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> b(n);
  for (float& x : b) x = d(rng);
  return b;
}

/// Every invariant of docs/ROUTERS.md on one batch.
void check_invariants(const std::vector<float>& L, int rows, int valid, const lynx::route_params& p,
                      const std::vector<std::uint8_t>& pinned, const char* what) {
  const int n = p.num_experts, k = p.top_k;
  const routed got = run(true, L, rows, valid, p, &pinned), base = run(false, L, rows, valid, p);
  std::set<int> after, before;
  for (int t = 0; t < rows; ++t) {
    const float* l = L.data() + static_cast<std::size_t>(t) * n;
    std::set<int> row(got.ids.begin() + t * k, got.ids.begin() + (t + 1) * k);
    ASSERT_EQ(static_cast<int>(row.size()), k) << what << " row " << t << ": duplicate ids";
    ASSERT_TRUE(*row.begin() >= 0 && *row.rbegin() < n) << what << " row " << t;
    const bool votes = std::any_of(l, l + n, [](float x) { return x == x && x != -INFINITY; });
    if (t >= valid || !votes) {
      for (int j = 0; j < k; ++j) EXPECT_EQ(got.w[t * k + j], 0.0f) << what << " padding row " << t;
      continue;
    }
    after.insert(row.begin(), row.end());
    before.insert(base.ids.begin() + t * k, base.ids.begin() + (t + 1) * k);
    const model_view v = reference_view(l, p);
    if (!p.router.relaxed_groups) {
      for (const int e : row) EXPECT_TRUE(v.allowed[e]) << what << " row " << t << ": expert " << e << " outside its groups";
    }
    if (pinned[t])
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(got.ids[t * k + j], base.ids[t * k + j]) << what << " pinned row " << t;
        EXPECT_EQ(got.w[t * k + j], base.w[t * k + j]) << what << " pinned row " << t;
      }
    const bool anchored = (p.anchor_top1 && p.kind != policy::budget) || (p.kind == policy::budget && p.budget_mass > 0);
    if (anchored && !(p.router.relaxed_groups && p.router.grouped())) {  // docs/ROUTERS.md: relaxed may trade it
      EXPECT_TRUE(row.count(v.first)) << what << " row " << t << " lost its first choice " << v.first;
    }
    if (p.renormalize) {
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += got.w[t * k + j];
      EXPECT_NEAR(sum, p.router.scaling, 2e-6 * p.router.scaling) << what << " row " << t;
    }
    for (int j = 1; j < k; ++j) EXPECT_GE(got.w[t * k + j - 1], got.w[t * k + j]) << what << " row " << t;
  }
  EXPECT_LE(after.size(), before.size()) << what << ": worse than the model's own routing";
  if (p.kind == policy::budget && p.budget_experts > 0 && p.router.relaxed_groups) {
    EXPECT_LE(static_cast<int>(after.size()), std::max<int>(p.budget_experts, before.size())) << what;
  }
}

TEST(RouterPolicies, InvariantsAtEveryModelsRouting) {
  int remapped = 0, batches = 0;
  for (const auto& m : lynx::model_routings) {
    const auto bias = model_bias(m.num_experts, m.num_experts, 0.05f);
    const auto base = lynx::model_params(m, bias.data());
    for (const int rows : {1, 5, 16, 48})
      for (std::uint32_t seed = 1; seed <= 2; ++seed) {
        const int valid = rows > 4 ? rows - 2 : rows;
        const auto L = lynx_test::random_logits(rows, m.num_experts, seed * 977 + rows, 1.0f, seed == 2 ? 0.25f : 0.0f);
        std::vector<std::uint8_t> pinned(rows, 0);
        if (rows > 4) pinned[1] = 1;
        for (const policy kind : {policy::lynx, policy::piggyback, policy::budget})
          for (const bool relaxed : {false, true}) {
            auto p = base;
            p.kind = kind, p.keep_k = 2, p.router.relaxed_groups = relaxed, p.anchor_top1 = seed == 1;
            p.alpha = m.biased ? 20.0f : 2.0f, p.beta = 2;  // biased: bins per unit of choice score
            if (kind == policy::budget) {
              if (seed == 1) {
                p.budget_mass = 0.94f;
              } else {
                p.budget_experts = m.top_k + 4;
              }
            }
            const std::string what = std::string(m.name) + " rows " + std::to_string(rows) + " seed " +
                                     std::to_string(seed) + " policy " + std::to_string(int(kind)) +
                                     (relaxed ? " relaxed" : " kept");
            check_invariants(L, rows, valid, p, pinned, what.c_str());
            if (rows == 1) {  // a single token is never remapped
              const auto a = run(true, L, 1, 1, p), b = run(false, L, 1, 1, p);
              EXPECT_EQ(a.ids, b.ids) << what;
              EXPECT_EQ(a.w, b.w) << what;
            } else {
              ++batches;
              remapped += run(true, L, rows, valid, p).ids != run(false, L, rows, valid, p).ids;
            }
          }
      }
  }
  EXPECT_GT(remapped, batches / 2) << "the policies should remap most batches of several tokens";
}

TEST(RouterPolicies, WideBiasesMakeChoiceScoresNegative) {
  // Biases around -2 but for one expert a group: every row's P holds experts with choice scores
  // below 0, so the budget's max(c, 0) shares clip.
  const auto m = *lynx::find_model("deepseek-v3");
  auto bias = model_bias(m.num_experts, 21, 0.3f);
  for (int e = 0; e < m.num_experts; ++e) bias[e] += e % 32 == 0 ? 0.3f : -2.0f;  // one expert a group above 0
  int clipped_rows = 0;
  for (const int rows : {1, 7, 32}) {
    const auto L = lynx_test::random_logits(rows, m.num_experts, 100 + rows, 2.0f);
    std::vector<std::uint8_t> pinned(rows, 0);
    for (const policy kind : {policy::lynx, policy::piggyback, policy::budget})
      for (const bool relaxed : {false, true}) {
        auto p = lynx::default_params(m, bias.data());
        p.kind = kind, p.keep_k = 2, p.router.relaxed_groups = relaxed;
        if (kind == policy::budget && rows == 7) p.budget_mass = 0.0f, p.budget_experts = m.top_k + 2;
        check_invariants(L, rows, rows, p, pinned, ("wide bias rows " + std::to_string(rows)).c_str());
        if (rows == 1) {
          EXPECT_EQ(run(true, L, 1, 1, p).ids, run(false, L, 1, 1, p).ids) << int(kind);
        }
      }
    for (int t = 0; t < rows; ++t) {  // how many rows have a choice score <= 0 in P
      const routed base = run(false, L, rows, rows, lynx::model_params(m, bias.data()));
      for (int j = 0; j < m.top_k; ++j) {
        const int e = base.ids[t * m.top_k + j];
        const float x = L[static_cast<std::size_t>(t) * m.num_experts + e];
        if (1.0f / (1.0f + std::exp(-x)) + bias[e] <= 0.0f) {
          ++clipped_rows;
          break;
        }
      }
    }
  }
  EXPECT_GT(clipped_rows, 0) << "the case should reach clipped shares";
  // Every choice score below 0: every row's shares are 0, and the budget fills K from P.
  for (float& b : bias) b = -3.0f - 0.01f * b;
  for (const int rows : {1, 9}) {
    const auto L = lynx_test::random_logits(rows, m.num_experts, 300 + rows, 1.0f);
    std::vector<std::uint8_t> pinned(rows, 0);
    for (const bool relaxed : {false, true}) {
      auto p = lynx::default_params(m, bias.data());
      p.router.relaxed_groups = relaxed;
      check_invariants(L, rows, rows, p, pinned, "all-negative bias");
      if (rows == 1) {
        EXPECT_EQ(run(true, L, 1, 1, p).ids, run(false, L, 1, 1, p).ids);
      }
    }
  }
}

TEST(RouterPolicies, AdversarialRowsAndBiases) {
  // NaN / inf logits, rows with no finite logit, a NaN and an infinite bias, ties everywhere.
  const auto m = *lynx::find_model("deepseek-v3");
  auto bias = model_bias(m.num_experts, 5, 0.02f);
  bias[3] = NAN, bias[70] = INFINITY, bias[71] = -INFINITY;
  const int rows = 12;
  auto L = lynx_test::random_logits(rows, m.num_experts, 9, 1.0f, 0.5f);
  for (int e = 0; e < m.num_experts; ++e) L[2 * m.num_experts + e] = NAN;  // row 2 does not vote
  L[4 * m.num_experts + 7] = INFINITY, L[5 * m.num_experts + 9] = -INFINITY, L[6 * m.num_experts + 200] = NAN;
  std::fill(L.begin() + 7 * m.num_experts, L.begin() + 8 * m.num_experts, 0.0f);  // all tied
  std::vector<std::uint8_t> pinned(rows, 0);
  for (const policy kind : {policy::lynx, policy::piggyback, policy::budget})
    for (const bool relaxed : {false, true})
      for (const bool sentinel : {false, true}) {
        auto p = lynx::model_params(m, bias.data());
        p.kind = kind, p.keep_k = 1, p.router.relaxed_groups = relaxed, p.alpha = 20.0f, p.beta = 3;
        p.budget_mass = kind == policy::budget ? 0.9f : 0.0f;
        p.pad_with_sentinel = sentinel;
        const routed got = run(true, L, rows, rows, p, &pinned);
        for (int t = 0; t < rows; ++t) {
          std::set<int> row(got.ids.begin() + t * p.top_k, got.ids.begin() + (t + 1) * p.top_k);
          if (t == 2) {
            for (int j = 0; j < p.top_k; ++j) {
              EXPECT_EQ(got.w[t * p.top_k + j], 0.0f);
              if (sentinel) {
                EXPECT_EQ(got.ids[t * p.top_k + j], -1);
              }
            }
            if (sentinel) continue;
          }
          ASSERT_EQ(static_cast<int>(row.size()), p.top_k) << "row " << t;
          ASSERT_TRUE(*row.begin() >= 0 && *row.rbegin() < m.num_experts) << "row " << t;
          for (int j = 0; j < p.top_k; ++j) ASSERT_TRUE(std::isfinite(got.w[t * p.top_k + j])) << "row " << t;
        }
        if (!sentinel) check_invariants(L, rows, rows, p, pinned, "adversarial");
      }
}

TEST(RouterPolicies, DefaultsForEveryModelAndTheirMeasures) {
  for (const auto& m : lynx::model_routings) {
    const auto bias = model_bias(m.num_experts, 3, 0.05f);
    const auto p = lynx::default_params(m, bias.data());
    ASSERT_EQ(lynx::check(p), lynx::status::success) << m.name;
    EXPECT_EQ(p.kind, policy::budget) << m.name;
    EXPECT_TRUE(p.anchor_top1) << m.name;
    EXPECT_EQ(p.router.num_groups, m.num_groups) << m.name;
    EXPECT_EQ(p.router.scaling, m.scaling) << m.name;
    EXPECT_EQ(p.router.bias != nullptr, m.biased) << m.name;
    EXPECT_FALSE(p.router.relaxed_groups) << m.name;
    // With a bias the bins are in units of choice score: alpha 20, with or without the pointer.
    EXPECT_EQ(p.alpha, m.biased ? 20.0f : lynx::default_params(m.num_experts, m.top_k).alpha) << m.name;
    EXPECT_EQ(lynx::default_params(m).alpha, p.alpha) << m.name;
    const int rows = 16;
    const auto L = lynx_test::random_logits(rows, m.num_experts, 41, 1.0f);
    const routed got = run(true, L, rows, rows, p), base = run(false, L, rows, rows, p);
    const auto after = lynx::measure_batch(L.data(), m.num_experts, rows, p, got.ids.data());
    const auto before = lynx::measure_batch(L.data(), m.num_experts, rows, p, base.ids.data());
    // The measures' baseline is the model's own routing: it measures itself as unchanged.
    EXPECT_EQ(before.unique_before, before.unique_after) << m.name;
    EXPECT_DOUBLE_EQ(before.retained_mass, 1.0) << m.name;
    EXPECT_DOUBLE_EQ(before.top1_kept, 1.0) << m.name;
    EXPECT_LT(after.unique_after, after.unique_before) << m.name;
    EXPECT_DOUBLE_EQ(after.top1_kept, 1.0) << m.name;
    // Without a bias the budget's shares are the measured mass (softmax without renormalize
    // exactly; with it, the same ratios), so the target holds; with one it is the choice's.
    if (!m.biased && !m.renormalize) {
      EXPECT_GE(after.retained_mass, 0.94 - 1e-5) << m.name;
    }
    std::printf("%-18s unique %3d -> %3d  retained mass %.4f\n", std::string(m.name).c_str(), after.unique_before,
                after.unique_after, after.retained_mass);
  }
}

TEST(RouterPolicies, Bf16LogitsAndInt64IdsGiveTheSameRouting) {
  // bf16 logits route as their float values do, and int64 ids hold the same ids, with a
  // row stride above N and padding rows.
  const auto m = *lynx::find_model("deepseek-v3");
  const auto bias = model_bias(m.num_experts, 8, 0.05f);
  const int n = m.num_experts, k = m.top_k, rows = 20, valid = 17, stride = n + 5;
  const auto raw = lynx_test::random_logits(rows, stride, 77, 1.0f);
  std::vector<__nv_bfloat16> bf(raw.size());
  std::vector<float> f(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    bf[i] = __float2bfloat16(raw[i]);
    f[i] = __bfloat162float(bf[i]);
  }
  for (const policy kind : {policy::lynx, policy::piggyback, policy::budget}) {
    auto p = lynx::default_params(m, bias.data());
    p.kind = kind, p.keep_k = 3, p.router.relaxed_groups = kind == policy::piggyback;
    std::vector<int> ids(static_cast<std::size_t>(rows) * k);
    std::vector<std::int64_t> ids64(ids.size());
    std::vector<float> w(ids.size()), w64(ids.size());
    ASSERT_EQ(lynx::host::route(f.data(), stride, rows, valid, p, ids.data(), w.data()), lynx::status::success);
    ASSERT_EQ(lynx::host::route(bf.data(), stride, rows, valid, p, ids64.data(), w64.data()), lynx::status::success);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(ids64[i], ids[i]) << int(kind) << " at " << i;
      ASSERT_EQ(w64[i], w[i]) << int(kind) << " at " << i;
    }
  }
}

TEST(RouterPolicies, TopOneRunsAsPiggybackWithTheSameResults) {
  // k = 1 on a model router (lynx::effective_params): the default budget and the anchored
  // lynx policy run as piggyback, with the ids and weights of the policy run in full (the
  // router body on the given policy), bit for bit, under both group limits. Under the relaxed
  // one a token takes K's best expert by its choice score (docs/ROUTERS.md), maybe another
  // token's first choice outside its groups; such batches must occur here, or the relaxed
  // cases would not test that argument.
  std::uint32_t seed = 5100;
  int relaxed_moves = 0;
  for (const bool bias : {false, true})
    for (const bool relaxed : {false, true})
      for (int trial = 0; trial < 12; ++trial) {
        const int n = 64, rows = 4 + static_cast<int>(seed % 29);
        auto L = lynx_test::random_logits(rows, n, seed++, 2.0f, trial % 3 == 0 ? 0.5f : 0.0f);
        std::vector<float> b(n);
        for (int e = 0; e < n; ++e) b[e] = 0.3f * std::sin(0.7f * static_cast<float>(e * (trial + 1)));
        std::vector<std::uint8_t> pinned(rows, 0);
        if (trial % 2) pinned[1] = 1;
        const int valid = rows - (trial % 4 == 0 ? 2 : 0);
        for (const policy kind : {policy::budget, policy::lynx}) {
          auto p = lynx::default_params(n, 1);
          p.kind = kind;
          p.score = bias ? lynx::scoring::sigmoid : lynx::scoring::softmax;
          p.router.num_groups = 8, p.router.top_groups = 2, p.router.relaxed_groups = relaxed;
          p.router.bias = bias ? b.data() : nullptr;
          p.alpha = bias ? 20.0f : 2.0f;
          ASSERT_EQ(lynx::check(p), lynx::status::success);
          ASSERT_EQ(lynx::effective_params(p).kind, policy::piggyback);
          const routed fast = run(true, L, rows, valid, p, &pinned);
          routed full{std::vector<int>(rows), std::vector<float>(rows)};
          lynx::host::detail::router_route_body_dispatch(L.data(), std::int64_t{n}, rows, valid, p, pinned.data(),
                                                         full.ids.data(), full.w.data());
          ASSERT_EQ(fast.ids, full.ids) << "bias " << bias << " relaxed " << relaxed << " seed " << seed - 1;
          ASSERT_EQ(std::memcmp(fast.w.data(), full.w.data(), rows * sizeof(float)), 0) << "seed " << seed - 1;
          if (relaxed) relaxed_moves += fast.ids != run(false, L, rows, valid, p, &pinned).ids;
        }
      }
  EXPECT_GT(relaxed_moves, 5) << "relaxed batches where a token leaves its first choice";
}

TEST(RouterPolicies, TheStagedLynxPolicyRefusesRouters) {
  const auto m = *lynx::find_model("deepseek-v2");
  auto p = lynx::model_params(m);
  EXPECT_EQ(lynx::check_staged_router(p), lynx::status::unsupported_router);
  p.kind = policy::budget, p.budget_mass = 0.9f;
  EXPECT_EQ(lynx::check_staged_router(p), lynx::status::success);
  // And the calls: host remap_topk with staged bins refuses the lynx policy, takes budget.
  const int n = m.num_experts, k = m.top_k;
  const auto L = lynx_test::random_logits(3, n, 5);
  std::vector<std::int8_t> bins(3 * n, 0);
  std::vector<std::int32_t> ranks(n, 0);
  std::vector<int> ids(3 * k, -9);
  std::vector<float> w(3 * k, -9.0f);
  auto q = lynx::model_params(m);
  EXPECT_EQ(lynx::host::remap_topk(L.data(), n, 3, 3, bins.data(), ranks.data(), q, ids.data(), w.data()),
            lynx::status::unsupported_router);
  EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int v) { return v == -9; }));
  EXPECT_EQ(lynx::host::remap_topk(L.data(), n, 3, 3, bins.data(), ranks.data(), p, ids.data(), w.data()),
            lynx::status::success);
  EXPECT_EQ(ids, run(true, L, 3, 3, p).ids);
}

}  // namespace router_policies_tests
