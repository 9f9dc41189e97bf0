// The models' own routers (model_router: DeepSeek-V3 style biased groups, DeepSeek-V2 style
// groups, Kimi-K2 / GLM-4.5 style bias without groups, the routed scaling factor) in
// lynx::host::topk_route, against hand-computed cases and against a reference written here
// from vLLM's grouped_topk (the published algorithm: scores, biased choice, group scores,
// masked top-k, unbiased weights, renormalize, scaling) with libm math.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <lynx/host.hpp>

#include "../support/params.hpp"
#include "../support/random_logits.hpp"

namespace router_tests {

struct routed {
  std::vector<int> ids;
  std::vector<float> w;
};

routed host_topk(const std::vector<float>& L, int rows, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k), std::vector<float>(static_cast<std::size_t>(rows) * p.top_k)};
  EXPECT_EQ(lynx::host::topk_route(L.data(), p.num_experts, rows, rows, p, r.ids.data(), r.w.data()),
            lynx::status::success);
  return r;
}

/// vLLM's grouped_topk for one row, in plain C++ (ties: the lower group, then the lower id).
routed reference_row(const float* l, const lynx::route_params& p, const std::vector<float>& bias) {
  const int n = p.num_experts, k = p.top_k, G = p.router.num_groups, size = n / G;
  std::vector<double> scores(n), choice(n);
  if (p.score == lynx::scoring::sigmoid) {
    for (int e = 0; e < n; ++e) scores[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
  } else {
    const double m = *std::max_element(l, l + n);
    double sum = 0;
    for (int e = 0; e < n; ++e) sum += std::exp(l[e] - m);
    for (int e = 0; e < n; ++e) scores[e] = std::exp(l[e] - m) / sum;
  }
  for (int e = 0; e < n; ++e) choice[e] = scores[e] + (bias.empty() ? 0.0 : bias[e]);
  std::vector<double> group(G);
  for (int g = 0; g < G; ++g) {
    std::vector<double> v(choice.begin() + g * size, choice.begin() + (g + 1) * size);
    std::sort(v.rbegin(), v.rend());
    group[g] = bias.empty() ? v[0] : v[0] + v[1];
  }
  std::vector<int> gorder(G);
  std::iota(gorder.begin(), gorder.end(), 0);
  std::stable_sort(gorder.begin(), gorder.end(), [&](int a, int b) { return group[a] > group[b]; });
  std::vector<bool> allowed(G, false);
  for (int j = 0; j < p.router.top_groups; ++j) allowed[gorder[j]] = true;
  std::vector<int> order;
  for (int e = 0; e < n; ++e)
    if (allowed[e / size]) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return choice[a] > choice[b]; });
  routed r;
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += scores[order[j]];
  for (int j = 0; j < k; ++j) {
    r.ids.push_back(order[j]);
    r.w.push_back(static_cast<float>(scores[order[j]] / (p.renormalize ? sum : 1.0) * p.router.scaling));
  }
  return r;
}

/// Ids as a set per row (the library writes descending weight, vLLM its choice order) and the
/// weight of each id.
void expect_matches_reference(const std::vector<float>& L, int rows, const lynx::route_params& p,
                              const std::vector<float>& bias) {
  const routed got = host_topk(L, rows, p);
  const int k = p.top_k;
  for (int t = 0; t < rows; ++t) {
    const routed want = reference_row(L.data() + static_cast<std::size_t>(t) * p.num_experts, p, bias);
    for (int j = 0; j < k; ++j) {
      const auto at = std::find(got.ids.begin() + t * k, got.ids.begin() + (t + 1) * k, want.ids[j]);
      ASSERT_NE(at, got.ids.begin() + (t + 1) * k) << "row " << t << ": expert " << want.ids[j] << " missing";
      EXPECT_NEAR(got.w[at - got.ids.begin()], want.w[j], 2e-6 * std::fabs(want.w[j]) + 1e-7) << "row " << t;
    }
  }
}

lynx::route_params router_params(int n, int k, lynx::scoring s, bool renorm, int groups, int top_groups, float scaling,
                                 const std::vector<float>* bias) {
  auto p = lynx_test::params(n, k, 1.0f, 1, s, renorm);
  p.router.num_groups = groups, p.router.top_groups = top_groups, p.router.scaling = scaling;
  p.router.bias = bias && !bias->empty() ? bias->data() : nullptr;
  return p;
}

TEST(Router, DeepSeekV3StyleHandCase) {
  // 8 experts in 4 groups of 2, keep 2 groups, top-2, sigmoid + bias, renormalize, scaling 2.5.
  // Logits 0 everywhere but expert 7 (logit 2): sigmoid 0.5 / 0.8808. Bias makes group 1
  // (experts 2, 3) best: 0.3 + 0.2; group 3 (6, 7): 0.0 + 0.1 on 0.5 / 0.8808.
  const std::vector<float> L = {0, 0, 0, 0, 0, 0, 0, 2};
  const std::vector<float> bias = {0.0f, 0.0f, 0.3f, 0.2f, 0.05f, 0.0f, 0.0f, 0.1f};
  const auto p = router_params(8, 2, lynx::scoring::sigmoid, true, 4, 2, 2.5f, &bias);
  // Group scores: g0 1.0, g1 0.8 + 0.7 = 1.5, g2 0.55 + 0.5 = 1.05, g3 0.5 + 0.9808 = 1.4808.
  // Kept: g1, g3. Choice inside: 7 (0.9808), 2 (0.8). Weights: sigmoid 0.8808 and 0.5,
  // renormalized, times 2.5.
  const routed r = host_topk(L, 1, p);
  EXPECT_EQ(r.ids, (std::vector<int>{7, 2}));
  const float s7 = 1.0f / (1.0f + std::exp(-2.0f));
  EXPECT_NEAR(r.w[0], s7 / (s7 + 0.5f) * 2.5f, 1e-6f);
  EXPECT_NEAR(r.w[1], 0.5f / (s7 + 0.5f) * 2.5f, 1e-6f);
  // Without groups, the same two (the best choice scores overall).
  const auto flat = router_params(8, 2, lynx::scoring::sigmoid, true, 1, 1, 1.0f, &bias);
  EXPECT_EQ(host_topk(L, 1, flat).ids, (std::vector<int>{7, 2}));
  // And plain top-k (no bias) takes 7 and the lowest tied id, 0.
  EXPECT_EQ(host_topk(L, 1, lynx_test::params(8, 2, 1.0f, 1, lynx::scoring::sigmoid)).ids, (std::vector<int>{7, 0}));
}

TEST(Router, GroupsExcludeTheBestExpertOfAWeakGroup) {
  // DeepSeek-V2 style: softmax, group max, 3 groups of 2, keep 1 group, k 2, no renormalize,
  // scaling 16. The kept group is the argmax's, {4, 5}: both picks come from it, so expert 4
  // (logit -3) is chosen over experts 0 and 3 (logits 1.0 and 1.2) of the other groups.
  const std::vector<float> L = {1.0f, 0.9f, 0.0f, 1.2f, -3.0f, 2.0f};
  const auto p = router_params(6, 2, lynx::scoring::softmax, false, 3, 1, 16.0f, nullptr);
  const routed r = host_topk(L, 1, p);
  EXPECT_EQ(r.ids, (std::vector<int>{5, 4})) << "the only group kept is {4, 5}";
  double sum = 0;
  for (float x : L) sum += std::exp(x - 2.0);
  EXPECT_NEAR(r.w[0], 16.0 / sum, 2e-5);
  EXPECT_NEAR(r.w[1], 16.0 * std::exp(-5.0) / sum, 1e-6);
  // Keep 2 groups: {4, 5} and {2, 3} (max 1.2 > group 0's 1.0): 5 then 3.
  auto p2 = p;
  p2.router.top_groups = 2;
  EXPECT_EQ(host_topk(L, 1, p2).ids, (std::vector<int>{5, 3}));
}

TEST(Router, TiesGoToTheLowerGroupThenTheLowerId) {
  // Every logit equal, zero bias: every group ties, so groups 0 and 1 are kept, and inside them
  // the lowest ids.
  const std::vector<float> L(16, 0.5f), bias(16, 0.0f);
  const auto p = router_params(16, 3, lynx::scoring::sigmoid, true, 4, 2, 1.0f, &bias);
  EXPECT_EQ(host_topk(L, 1, p).ids, (std::vector<int>{0, 1, 2}));
  auto q = p;
  q.top_k = 6;  // both kept groups entirely (4 + 4 > 6): 0..5
  EXPECT_EQ(host_topk(L, 1, q).ids, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Router, MatchesTheReferenceAtTheModelsShapes) {
  struct shape {
    int n, k;
    lynx::scoring s;
    bool renorm, bias;
    int groups, top_groups;
    float scaling;
  };
  const shape shapes[] = {
      {256, 8, lynx::scoring::sigmoid, true, true, 8, 4, 2.5f},     // DeepSeek-V3 / R1
      {384, 8, lynx::scoring::sigmoid, true, true, 1, 1, 2.827f},   // Kimi-K2
      {160, 8, lynx::scoring::sigmoid, true, true, 1, 1, 2.5f},     // GLM-4.5
      {256, 8, lynx::scoring::sigmoid, true, true, 1, 1, 1.0f},     // MiniMax-M2 style
      {160, 6, lynx::scoring::softmax, false, false, 8, 3, 16.0f},  // DeepSeek-V2
      {64, 6, lynx::scoring::softmax, false, false, 1, 1, 1.0f},    // DeepSeek-V2-Lite (plain)
      {256, 8, lynx::scoring::sigmoid, false, true, 8, 4, 2.5f},    // no renormalize
  };
  std::uint32_t seed = 1;
  for (const auto& sh : shapes) {
    SCOPED_TRACE(testing::Message() << "n " << sh.n << " k " << sh.k << " groups " << sh.groups);
    const int rows = 40;
    const auto L = lynx_test::random_logits(rows, sh.n, seed++, 2.0f);
    std::vector<float> bias;
    if (sh.bias) {
      std::mt19937 rng(seed++);
      std::normal_distribution<float> d(0.0f, 0.5f);
      for (int e = 0; e < sh.n; ++e) bias.push_back(d(rng));
    }
    const auto p = router_params(sh.n, sh.k, sh.s, sh.renorm, sh.groups, sh.top_groups, sh.scaling, &bias);
    ASSERT_NO_FATAL_FAILURE(expect_matches_reference(L, rows, p, bias));
  }
}

TEST(Router, InvariantsOnAdversarialRows) {
  // Quantized logits (ties), NaN and inf entries, a bias with NaN: k distinct ids in [0, N),
  // every one inside a kept group, weights finite, renormalized rows summing to the scaling.
  const int n = 64, k = 6, groups = 8, top_groups = 3, rows = 60;
  auto L = lynx_test::random_logits(rows, n, 9, 3.0f, 0.5f);
  for (int t = 0; t < rows; t += 7) L[t * n + (t % n)] = NAN;
  for (int t = 3; t < rows; t += 11) L[t * n + 1] = INFINITY;
  std::vector<float> bias(n, 0.1f);
  bias[5] = NAN;
  const auto p = router_params(n, k, lynx::scoring::sigmoid, true, groups, top_groups, 2.0f, &bias);
  const routed r = host_topk(L, rows, p);
  for (int t = 0; t < rows; ++t) {
    std::set<int> seen, groups_used;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      const int e = r.ids[t * k + j];
      ASSERT_TRUE(e >= 0 && e < n);
      seen.insert(e), groups_used.insert(e / (n / groups));
      ASSERT_TRUE(std::isfinite(r.w[t * k + j]));
      sum += r.w[t * k + j];
    }
    EXPECT_EQ(static_cast<int>(seen.size()), k) << "row " << t;
    EXPECT_LE(static_cast<int>(groups_used.size()), top_groups) << "row " << t;
    EXPECT_NEAR(sum, 2.0f, 2e-5f) << "row " << t;
  }
}

TEST(Router, PlainRouterIsBitwiseUnchanged) {
  // num_groups 1, no bias, scaling 1 is plain top-k: the same bits as before the router existed
  // (custom_choice and scaled_emit are skipped), checked against routing with scaling 1 and one
  // group spelled out.
  const int n = 128, k = 8, rows = 32;
  const auto L = lynx_test::random_logits(rows, n, 4);
  for (const bool renorm : {true, false}) {
    const auto plain = lynx_test::params(n, k, 1.0f, 1, lynx::scoring::softmax, renorm);
    auto one_group = plain;
    one_group.router.num_groups = 1, one_group.router.top_groups = 1;
    const routed a = host_topk(L, rows, plain), b = host_topk(L, rows, one_group);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(0, std::memcmp(a.w.data(), b.w.data(), a.w.size() * sizeof(float)));
    auto scaled = plain;
    scaled.router.scaling = 2.0f;  // an exact power of two: every weight exactly doubles
    const routed c = host_topk(L, rows, scaled);
    EXPECT_EQ(c.ids, a.ids);
    for (std::size_t i = 0; i < a.w.size(); ++i) EXPECT_EQ(c.w[i], 2.0f * a.w[i]) << i;
  }
}

TEST(Router, BadRoutersAreRejectedAndTheStagedLynxPolicyRefusesRouters) {
  const int n = 64, k = 4;
  std::vector<float> L(2 * n, 0.0f), bias(n, 0.0f), w(2 * k, -5.0f);
  std::vector<int> ids(2 * k, -5);
  const auto expect = [&](const lynx::route_params& p, lynx::status s) {
    EXPECT_EQ(lynx::host::topk_route(L.data(), n, 2, 2, p, ids.data(), w.data()), s);
  };
  const auto good = router_params(n, k, lynx::scoring::sigmoid, true, 8, 2, 2.5f, &bias);
  expect(good, lynx::status::success);
  std::fill(ids.begin(), ids.end(), -5);
  auto p = good;
  p.router.num_groups = 7;  // does not divide 64
  expect(p, lynx::status::invalid_router);
  p = good, p.router.num_groups = 64, p.router.top_groups = 2;  // groups of 1 with a bias
  expect(p, lynx::status::invalid_router);
  p = good, p.router.top_groups = 0;
  expect(p, lynx::status::invalid_router);
  p = good, p.router.top_groups = 9;
  expect(p, lynx::status::invalid_router);
  p = good, p.top_k = 20, p.router.top_groups = 2;  // 2 groups of 8 hold fewer than 20
  expect(p, lynx::status::invalid_router);
  p = good, p.router.scaling = 0.0f;
  expect(p, lynx::status::invalid_router);
  p = good, p.router.scaling = INFINITY;
  expect(p, lynx::status::invalid_router);
  p = good, p.router.scaling = NAN;
  expect(p, lynx::status::invalid_router);
  p = good, p.router.scaling = 2e38f;  // finite, but a sigmoid top-k mass times it is not
  expect(p, lynx::status::invalid_router);
  p = good, p.score = lynx::scoring::softmax;  // a bias only with sigmoid scores
  expect(p, lynx::status::invalid_router);
  p = good, p.router.num_groups = 0;
  expect(p, lynx::status::invalid_router);
  EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int v) { return v == -5; })) << "nothing written on errors";
  // The staged lynx policy cannot take a router (its bins are of the logits); the others can.
  std::vector<std::int8_t> bins(2 * n, 0);
  std::vector<std::int32_t> ranks(n, 0);
  EXPECT_EQ(lynx::host::remap_topk(L.data(), n, 2, 2, bins.data(), ranks.data(), good, ids.data(), w.data()),
            lynx::status::unsupported_router);
  EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int v) { return v == -5; }));
  auto q = good;
  q.kind = lynx::policy::piggyback;
  EXPECT_EQ(lynx::host::remap_topk(L.data(), n, 2, 2, bins.data(), ranks.data(), q, ids.data(), w.data()),
            lynx::status::success);
  // At the largest scaling, a sigmoid top-k mass of almost k (no renormalize) keeps every
  // weight finite.
  p = good, p.router.scaling = lynx::max_router_scaling, p.renormalize = false;
  std::vector<float> hot(2 * n, 20.0f);
  ASSERT_EQ(lynx::host::topk_route(hot.data(), n, 2, 2, p, ids.data(), w.data()), lynx::status::success);
  ASSERT_EQ(lynx::host::route(hot.data(), n, 2, 2, p, ids.data(), w.data()), lynx::status::success);
  for (const float x : w) EXPECT_TRUE(std::isfinite(x) && x > 0.0f) << x;
}

TEST(Router, ModelRoutingConstants) {
  const auto v3 = lynx::find_model("deepseek-v3");
  ASSERT_TRUE(v3.has_value());
  EXPECT_EQ(v3->num_experts, 256);
  EXPECT_EQ(v3->num_groups, 8);
  EXPECT_EQ(v3->top_groups, 4);
  EXPECT_FLOAT_EQ(v3->scaling, 2.5f);
  EXPECT_FALSE(lynx::find_model("no-such-model").has_value());
  std::vector<float> bias(512, 0.0f);
  for (const auto& m : lynx::model_routings) {
    const auto p = lynx::model_params(m, bias.data());
    EXPECT_EQ(lynx::check(p), lynx::status::success) << m.name;
    EXPECT_EQ(p.router.bias != nullptr, m.biased) << m.name;
    // Every preset routes (a real row, the host path).
    const auto L = lynx_test::random_logits(3, m.num_experts, 1);
    std::vector<int> ids(3 * m.top_k);
    std::vector<float> w(ids.size());
    EXPECT_EQ(lynx::host::topk_route(L.data(), m.num_experts, 3, 3, p, ids.data(), w.data()), lynx::status::success)
        << m.name;
  }
}

}  // namespace router_tests
