// SPEC §3.3, §4 and §5 for the composed host path (route, remap_topk, topk_route).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <lynx/half.hpp>
#include <lynx/host.hpp>
#include <lynx/measures.hpp>

#include "../support/params.hpp"
#include "../support/random_logits.hpp"
#include "../support/reference.hpp"

namespace route_tests {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

using lynx_test::params;

struct routed {
  std::vector<int> ids;
  std::vector<float> weights;
};

template <class T = float>
routed run_route(const std::vector<T>& L, int rows, int b, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k, -7),
           std::vector<float>(static_cast<std::size_t>(rows) * p.top_k, -7.0f)};
  EXPECT_EQ(lynx::host::route(L.data(), p.num_experts, rows, b, p, r.ids.data(), r.weights.data()),
            lynx::status::success);
  return r;
}

routed run_topk(const std::vector<float>& L, int rows, int b, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k, -7),
           std::vector<float>(static_cast<std::size_t>(rows) * p.top_k, -7.0f)};
  EXPECT_EQ(lynx::host::topk_route(L.data(), p.num_experts, rows, b, p, r.ids.data(), r.weights.data()),
            lynx::status::success);
  return r;
}

TEST(Route, HandComputedTwoTokens) {
  // N 8, k 2, alpha 1, beta 1. Row 0 peaks at e7, row 1 at e0; all else is in bin -1.
  // H: e0 = e7 = (1, 1), others (0, 2), so inside bin -1 both rows prefer e0 / e7 (rank 0)
  // over their own second choice: K = {0, 7} and the batch touches 2 experts instead of 4.
  const std::vector<float> L = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};
  const routed r = run_route(L, 2, 2, params(8, 2, 1.0f, 1));
  EXPECT_EQ(r.ids, (std::vector<int>{7, 0, 0, 7}));
  const float w0 = 1.0f / (1.0f + std::exp(-7.0f));
  EXPECT_NEAR(r.weights[0], w0, 2e-7);
  EXPECT_NEAR(r.weights[1], 1.0f - w0, 2e-7);
}

TEST(Route, SupportIsLexicographicAcrossBins) {
  // N 5, k 2, alpha 1, beta 2. Token 0 has e1 (-1.6) and e2 (-1.4) both in bin -1. Besides
  // token 0, e1 gets one vote in bin 0 (token 1) and e2 two votes in bin -1 (tokens 1, 2).
  // One vote in a better bin outweighs all votes in worse bins, so token 0 z-picks e1, and
  // K = {0,1} u {1,4} u {3,4} leaves e2 out although token 0 prefers it by logit.
  const std::vector<float> L = {
      0.0f, -1.6f, -1.4f, -5.0f, -5.0f,  // token 0: q = 0, -1, -1, -2, -2
      -5.0f, 0.0f, -1.5f, -5.0f, -0.1f,  // token 1: q = -2, 0, -1, -2, 0
      -5.0f, -5.0f, -1.5f, -0.1f, 0.0f,  // token 2: q = -2, -2, -1, 0, 0
  };
  const routed r = run_route(L, 3, 3, params(5, 2, 1.0f, 2));
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1, 1, 4, 4, 3}));
}

TEST(Route, SingleTokenIsNeverRemapped) {
  for (std::uint32_t seed = 0; seed < 300; ++seed) {
    const int n = 8 + static_cast<int>(seed % 120), k = 1 + static_cast<int>(seed % 8);
    const auto L = lynx_test::random_logits(1, n, seed, 1.0f, seed % 3 == 0 ? 0.25f : 0.0f);
    const auto p = params(n, k, 3.0f, 4);
    const routed a = run_route(L, 1, 1, p), b = run_topk(L, 1, 1, p);
    ASSERT_EQ(a.ids, b.ids) << "seed " << seed;
    for (int i = 0; i < k; ++i) ASSERT_NEAR(a.weights[i], b.weights[i], 2e-6 * b.weights[i]);
  }
}

struct combo {
  int n, k, b;
  float alpha;
  int beta;
  lynx::scoring s;
  bool renorm;
};

TEST(Route, MatchesTheExactReferenceOnRandomAndTieHeavyBatches) {
  const combo combos[] = {
      {8, 2, 4, 0.7f, 1, lynx::scoring::softmax, true},
      {8, 2, 16, 1.0f, 1, lynx::scoring::softmax, false},
      {16, 1, 8, 1.0f, 0, lynx::scoring::sigmoid, false},
      {16, 4, 8, 1.0f, 2, lynx::scoring::sigmoid, true},
      {60, 4, 16, 2.0f, 3, lynx::scoring::softmax, false},
      {64, 6, 16, 1.0f, 1, lynx::scoring::softmax, true},
      {64, 8, 32, 3.0f, 4, lynx::scoring::softmax, false},
      {128, 8, 16, 3.0f, 2, lynx::scoring::softmax, true},
      {160, 6, 8, 1.0f, 2, lynx::scoring::softmax, true},
      {128, 4, 24, 3.0f, 2, lynx::scoring::softmax, true},
      {384, 16, 8, 2.0f, 3, lynx::scoring::softmax, true},
      {512, 10, 4, 1.0f, 0, lynx::scoring::softmax, true},
      {1024, 32, 3, 1.0f, 2, lynx::scoring::sigmoid, false},
      {2, 2, 5, 1.0f, 1, lynx::scoring::softmax, true},
  };
  int fallbacks = 0, checked = 0;
  for (const combo& c : combos)
    for (std::uint32_t seed = 0; seed < 12; ++seed) {
      // Odd seeds: logits on a coarse grid, so logit ties, z ties and bin-edge values abound.
      const float quantum = seed % 2 ? 0.25f : 0.0f;
      const int rows = c.b + static_cast<int>(seed % 3);  // some padding rows too
      const auto L = lynx_test::random_logits(rows, c.n, 1000 * c.n + seed, 1.5f, quantum);
      const auto p = params(c.n, c.k, c.alpha, c.beta, c.s, c.renorm);
      const routed r = run_route(L, rows, c.b, p);
      const auto ref = lynx_test::ref_route(
          L, rows, c.b, {c.n, c.k, c.alpha, c.beta, c.s == lynx::scoring::sigmoid, c.renorm});
      fallbacks += ref.fell_back;
      ++checked;
      ASSERT_EQ(r.ids, ref.ids) << "n " << c.n << " k " << c.k << " seed " << seed;
      for (std::size_t i = 0; i < r.weights.size(); ++i)
        ASSERT_NEAR(r.weights[i], ref.weights[i], 1e-5 * ref.weights[i] + 1e-30)
            << "n " << c.n << " seed " << seed << " at " << i;
    }
  RecordProperty("fallbacks", fallbacks);
  EXPECT_GT(checked, 100);
}

TEST(Route, NeverWorseGuardFallsBackToPlainTopK) {
  // Find batches where the remapped choices would touch more experts than plain top-k (SPEC
  // §3.3 step 5; the reference finds them among small top-1 batches on a coarse logit grid)
  // and check that they get plain top-k.
  int found = 0;
  const int n = 5, k = 1, b = 4;
  for (std::uint32_t seed = 0; seed < 20000 && found < 3; ++seed) {
    const auto L = lynx_test::random_logits(b, n, seed, 1.5f, 1.0f);
    const auto ref = lynx_test::ref_route(L, b, b, {n, k, 0.5f, 2, false, true});
    if (!ref.fell_back) continue;
    ++found;
    const auto p = params(n, k, 0.5f, 2);
    const routed r = run_route(L, b, b, p);
    EXPECT_EQ(r.ids, run_topk(L, b, b, p).ids) << "seed " << seed;
    EXPECT_EQ(r.ids, ref.ids) << "seed " << seed;
  }
  EXPECT_EQ(found, 3) << "no batch exercised the guard";
}

TEST(Route, InvariantsOnRandomBatches) {
  for (std::uint32_t seed = 0; seed < 400; ++seed) {
    const int n = 4 + static_cast<int>(seed * 37 % 300), k = 1 + static_cast<int>(seed % std::min(n, 16));
    const int b = 1 + static_cast<int>(seed * 13 % 64), rows = b + static_cast<int>(seed % 4);
    const auto L = lynx_test::random_logits(rows, n, seed, 2.0f, seed % 4 == 0 ? 0.5f : 0.0f);
    const auto p = params(n, k, 0.5f + static_cast<float>(seed % 5), static_cast<int>(seed % 5),
                          seed % 7 == 0 ? lynx::scoring::sigmoid : lynx::scoring::softmax, seed % 2);
    const routed r = run_route(L, rows, b, p);
    for (int t = 0; t < rows; ++t) {
      std::set<int> ids;
      for (int i = 0; i < k; ++i) {
        const int e = r.ids[static_cast<std::size_t>(t) * k + i];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, n);
        ids.insert(e);
      }
      ASSERT_EQ(static_cast<int>(ids.size()), k) << "duplicate id, seed " << seed;
    }
    const auto m = lynx::measure_batch(L.data(), n, b, p, r.ids.data());
    ASSERT_LE(m.unique_after, m.unique_before) << "seed " << seed;
    // Padding rows only use experts the batch loads anyway.
    std::set<int> loaded(r.ids.begin(), r.ids.begin() + static_cast<std::ptrdiff_t>(b) * k);
    for (int t = b; t < rows; ++t)
      for (int i = 0; i < k; ++i) {
        ASSERT_TRUE(loaded.count(r.ids[static_cast<std::size_t>(t) * k + i]) || static_cast<int>(loaded.size()) < k);
        ASSERT_EQ(r.weights[static_cast<std::size_t>(t) * k + i], 0.0f);
      }
  }
}

TEST(Route, WeightsFollowTheScoringRules) {
  const int n = 64, k = 6, b = 16;
  const auto L = lynx_test::random_logits(b, n, 99, 1.0f);
  for (const auto s : {lynx::scoring::softmax, lynx::scoring::sigmoid})
    for (const bool renorm : {true, false}) {
      const auto p = params(n, k, 1.0f, 1, s, renorm);
      const routed r = run_route(L, b, b, p), plain = run_topk(L, b, b, p);
      for (int t = 0; t < b; ++t) {
        double sum = 0, plain_sum = 0;
        for (int i = 0; i < k; ++i) {
          sum += r.weights[t * k + i];
          plain_sum += plain.weights[t * k + i];
          if (i > 0) {
            ASSERT_GE(r.weights[t * k + i - 1], r.weights[t * k + i]);  // output order
          }
        }
        // Renormalized weights sum to 1; otherwise the total is the original top-k mass.
        ASSERT_NEAR(sum, renorm ? 1.0 : plain_sum, 1e-5) << "row " << t;
        if (!renorm && s == lynx::scoring::softmax) {
          double top = 0, all = 0, m = -1e30;
          for (int e = 0; e < n; ++e) m = std::max(m, static_cast<double>(L[t * n + e]));
          std::vector<double> sorted;
          for (int e = 0; e < n; ++e) {
            all += std::exp(L[t * n + e] - m);
            sorted.push_back(L[t * n + e]);
          }
          std::sort(sorted.rbegin(), sorted.rend());
          for (int i = 0; i < k; ++i) top += std::exp(sorted[i] - m);
          ASSERT_NEAR(sum, top / all, 1e-5);
        }
      }
    }
}

TEST(Route, SigmoidTopOneKeepsTheOriginalSigmoid) {
  const int n = 16, b = 16;
  const auto L = lynx_test::random_logits(b, n, 5, 1.0f);
  const auto p = params(n, 1, 1.0f, 0, lynx::scoring::sigmoid, false);
  const routed r = run_route(L, b, b, p);
  for (int t = 0; t < b; ++t) {
    const float top = *std::max_element(L.begin() + t * n, L.begin() + (t + 1) * n);
    ASSERT_NEAR(r.weights[t], 1.0f / (1.0f + std::exp(-top)), 1e-6);
  }
}

TEST(Route, PaddingAndDeadRowsGetTheLowestLoadedIds) {
  // Rows 0-1 vote; row 2 is all NaN/-inf (dead); rows 3-4 are padding (B = 3).
  const int n = 8, k = 2;
  std::vector<float> L = {0, 1, 2, 3, 4, 5, 6, 9, 9, 6, 5, 4, 3, 2, 1, 0};
  for (int e = 0; e < n; ++e) L.push_back(e % 2 ? nan : -inf);
  for (int e = 0; e < 2 * n; ++e) L.push_back(100.0f + e);  // padding must not influence anything
  const auto p = params(n, k, 1.0f, 1);
  const routed r = run_route(L, 5, 3, p);
  const routed alone = run_route(std::vector<float>(L.begin(), L.begin() + 2 * n), 2, 2, p);
  EXPECT_TRUE(std::equal(alone.ids.begin(), alone.ids.end(), r.ids.begin()));
  std::set<int> loaded(r.ids.begin(), r.ids.begin() + 2 * k);
  std::vector<int> expected(loaded.begin(), loaded.end());
  expected.resize(k);
  for (int t = 2; t < 5; ++t) {
    EXPECT_EQ(std::vector<int>(r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k), expected);
    EXPECT_EQ(r.weights[t * k], 0.0f);
    EXPECT_EQ(r.weights[t * k + 1], 0.0f);
  }
  auto ps = p;
  ps.pad_with_sentinel = true;
  ps.sentinel_id = -1;
  const routed s = run_route(L, 5, 3, ps);
  for (int i = 2 * k; i < 5 * k; ++i) EXPECT_EQ(s.ids[i], -1);
  EXPECT_TRUE(std::equal(alone.ids.begin(), alone.ids.end(), s.ids.begin()));
}

TEST(Route, AllRowsDeadFillWithLowestIds) {
  const int n = 6, k = 3;
  const std::vector<float> L(2 * n, nan);
  const routed r = run_route(L, 2, 2, params(n, k, 1.0f, 1));
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  for (float w : r.weights) EXPECT_EQ(w, 0.0f);
}

TEST(Route, NanAndInfinityRowsGiveDistinctValidIds) {
  const int n = 8, k = 4;
  const std::vector<float> L = {nan, inf, nan, 1.0f, nan, -inf, inf, nan,  //
                                inf, inf, inf, inf, inf, inf, inf, inf,   //
                                nan, nan, nan, 2.0f, nan, nan, nan, nan};
  for (const auto s : {lynx::scoring::softmax, lynx::scoring::sigmoid}) {
    const routed r = run_route(L, 3, 3, params(n, k, 3.0f, 0, s, false));
    for (int t = 0; t < 3; ++t) {
      std::set<int> ids(r.ids.begin() + t * k, r.ids.begin() + (t + 1) * k);
      EXPECT_EQ(static_cast<int>(ids.size()), k);
      EXPECT_TRUE(*ids.begin() >= 0 && *ids.rbegin() < n);
      for (int i = 0; i < k; ++i) EXPECT_FALSE(std::isnan(r.weights[t * k + i]));
    }
    // Row 1 is all +inf = FLT_MAX: a tie everywhere goes to the lower ids, weights are equal.
    const auto ref = lynx_test::ref_route(L, 3, 3, {n, k, 3.0f, 0, s == lynx::scoring::sigmoid, false});
    EXPECT_EQ(r.ids, ref.ids);
  }
}

TEST(Route, BitwiseRepeatableAndDtypeConsistent) {
  const int n = 128, k = 8, b = 32;
  const auto L = lynx_test::random_logits(b, n, 3, 1.0f);
  std::vector<__nv_bfloat16> bf;
  std::vector<__half> h;
  std::vector<float> from_bf, from_h;
  for (float x : L) {
    bf.push_back(__float2bfloat16(x));
    h.push_back(__float2half(x));
    from_bf.push_back(__bfloat162float(bf.back()));
    from_h.push_back(__half2float(h.back()));
  }
  const auto p = params(n, k, 3.0f, 2);
  const routed a = run_route(L, b, b, p), a2 = run_route(L, b, b, p);
  EXPECT_EQ(a.ids, a2.ids);
  EXPECT_EQ(0, std::memcmp(a.weights.data(), a2.weights.data(), a.weights.size() * sizeof(float)));
  const routed rb = run_route(bf, b, b, p), rf = run_route(from_bf, b, b, p);
  EXPECT_EQ(rb.ids, rf.ids);
  EXPECT_EQ(rb.weights, rf.weights);
  const routed rh = run_route(h, b, b, p), rhf = run_route(from_h, b, b, p);
  EXPECT_EQ(rh.ids, rhf.ids);
  EXPECT_EQ(rh.weights, rhf.weights);
}

TEST(Route, Int64IdsAndRowStride) {
  const int n = 60, k = 4, b = 8, stride = 64;
  const auto dense = lynx_test::random_logits(b, n, 11, 1.0f);
  std::vector<float> strided(static_cast<std::size_t>(b) * stride, 1e30f);  // junk in the gap
  for (int t = 0; t < b; ++t) std::copy_n(dense.begin() + t * n, n, strided.begin() + t * stride);
  const auto p = params(n, k, 2.0f, 3);
  std::vector<std::int64_t> ids(b * k);
  std::vector<float> w(b * k);
  ASSERT_EQ(lynx::host::route(strided.data(), stride, b, b, p, ids.data(), w.data()),
            lynx::status::success);
  const routed r = run_route(dense, b, b, p);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), r.ids.begin()));
  EXPECT_EQ(w, r.weights);
}

TEST(Route, StagesComposeToRoute) {
  const int n = 64, k = 8, b = 16;
  const auto L = lynx_test::random_logits(b, n, 21, 1.0f);
  const auto p = params(n, k, 3.0f, 4);
  std::vector<std::int8_t> bins(b * n);
  std::vector<std::int32_t> counts(lynx::histogram_bins(p) * n), ranks(n);
  std::vector<int> ids(b * k);
  std::vector<float> w(b * k);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), n, b, b, p, bins.data()), lynx::status::success);
  ASSERT_EQ(lynx::host::score_experts(bins.data(), b, p, counts.data(), ranks.data()), lynx::status::success);
  ASSERT_EQ(lynx::host::remap_topk(L.data(), n, b, b, bins.data(), ranks.data(), p, ids.data(), w.data()),
            lynx::status::success);
  const routed r = run_route(L, b, b, p);
  EXPECT_EQ(ids, r.ids);
  EXPECT_EQ(w, r.weights);
}

TEST(Route, BadArgumentsWriteNothing) {
  const std::vector<float> L(4 * 8, 0.5f);
  std::vector<int> ids(4 * 33, 42);  // room for any k the calls below ask for
  std::vector<float> w(4 * 33, 42.0f);
  using lynx::status;
  const auto call = [&](const lynx::route_params& p, int stride = 8, int rows = 4, int b = 4) {
    return lynx::host::route(L.data(), stride, rows, b, p, ids.data(), w.data());
  };
  EXPECT_EQ(call(params(8, 9, 1.0f, 1)), status::invalid_top_k);
  EXPECT_EQ(call(params(8, 0, 1.0f, 1)), status::invalid_top_k);
  EXPECT_EQ(call(params(8, 33, 1.0f, 1)), status::invalid_top_k);
  EXPECT_EQ(call(params(lynx::max_experts + 1, 2, 1.0f, 1)), status::invalid_num_experts);
  EXPECT_EQ(call(params(8, 2, -1.0f, 1)), status::invalid_alpha);
  EXPECT_EQ(call(params(8, 2, 1.0f, 1), 7), status::invalid_row_stride);
  EXPECT_EQ(call(params(8, 2, 1.0f, 1), 8, -1, 0), status::invalid_num_rows);
  EXPECT_EQ(call(params(8, 2, 1.0f, 1), 8, 4, 5), status::invalid_token_count);
  auto ps = params(8, 2, 1.0f, 1);
  ps.pad_with_sentinel = true;
  ps.sentinel_id = 3;
  EXPECT_EQ(call(ps), status::invalid_sentinel);
  EXPECT_EQ(lynx::host::route(L.data(), 8, 4, 4, params(8, 2, 1.0f, 1), static_cast<int*>(nullptr), w.data()),
            status::null_pointer);
  EXPECT_EQ(lynx::host::topk_route(L.data(), 8, 4, 4, params(8, 9, 1.0f, 1), ids.data(), w.data()),
            status::invalid_top_k);
  EXPECT_EQ(call(params(8, 2, 1.0f, 1), 8, 4, 0), status::success);  // B = 0: nothing to do
  for (int x : ids) EXPECT_EQ(x, 42);
  for (float x : w) EXPECT_EQ(x, 42.0f);
  EXPECT_STRNE(lynx::status_string(status::invalid_alpha), lynx::status_string(status::invalid_beta));
}

TEST(TopkRoute, MatchesThePlainReference) {
  for (std::uint32_t seed = 0; seed < 50; ++seed) {
    const int n = 8 + static_cast<int>(seed * 7 % 200), k = 1 + static_cast<int>(seed % 8), b = 9;
    const auto L = lynx_test::random_logits(b, n, seed, 1.0f, seed % 2 ? 0.25f : 0.0f);
    for (const auto s : {lynx::scoring::softmax, lynx::scoring::sigmoid})
      for (const bool renorm : {true, false}) {
        const routed r = run_topk(L, b, b, params(n, k, 1.0f, 0, s, renorm));
        for (int t = 0; t < b; ++t) {
          std::vector<char> all(n, 1);
          const std::vector<float> row(L.begin() + t * n, L.begin() + (t + 1) * n);
          const auto orig = lynx_test::ref_topk(n, k, row, all, [](int) { return 0; });
          const auto w = lynx_test::ref_weights(row, orig, orig, {n, k, 1.0f, 0, s == lynx::scoring::sigmoid, renorm});
          for (int i = 0; i < k; ++i) {
            ASSERT_EQ(r.ids[t * k + i], orig[i]);
            ASSERT_NEAR(r.weights[t * k + i], w[i], 1e-5 * w[i] + 1e-30);
          }
        }
      }
  }
}

}  // namespace route_tests
