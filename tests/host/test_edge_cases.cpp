// SPEC §3.3 step 4 and §5 on the inputs that broke them: each fuzzer finding of the issue
// "The device path executed" (F1-F4) as its minimal reproduction, plus the invariants behind it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include <lynx/host.hpp>
#include <lynx/measures.hpp>

#include "../support/params.hpp"
#include "../support/random_logits.hpp"
#include "../support/reference.hpp"

namespace edge_cases_tests {

constexpr float inf = std::numeric_limits<float>::infinity();
using lynx_test::params;

struct routed {
  std::vector<int> ids;
  std::vector<float> w;
};

routed route(const std::vector<float>& L, int rows, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k, -7),
           std::vector<float>(static_cast<std::size_t>(rows) * p.top_k, -7.0f)};
  EXPECT_EQ(lynx::host::route(L.data(), p.num_experts, rows, rows, p, r.ids.data(), r.w.data()),
            lynx::status::success);
  return r;
}

routed topk(const std::vector<float>& L, int rows, const lynx::route_params& p) {
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * p.top_k, -7),
           std::vector<float>(static_cast<std::size_t>(rows) * p.top_k, -7.0f)};
  EXPECT_EQ(lynx::host::topk_route(L.data(), p.num_experts, rows, rows, p, r.ids.data(), r.w.data()),
            lynx::status::success);
  return r;
}

int unique_experts(const routed& r) { return static_cast<int>(std::set<int>(r.ids.begin(), r.ids.end()).size()); }

TEST(EdgeCases, F1ScoreExpertsWithZeroRowsNeedsItsOutputs) {
  // counts and ranks are per expert: required even for zero rows, and nothing is written
  // when one is missing (it used to segfault).
  const auto p = params(8, 2);
  const std::vector<std::int8_t> bins(8, 0);
  std::vector<std::int32_t> counts(2 * 8, 42), ranks(8, 42);
  EXPECT_EQ(lynx::host::score_experts(bins.data(), 0, p, nullptr, ranks.data()), lynx::status::null_pointer);
  EXPECT_EQ(lynx::host::score_experts(bins.data(), 0, p, counts.data(), nullptr), lynx::status::null_pointer);
  for (const auto x : counts) EXPECT_EQ(x, 42);
  for (const auto x : ranks) EXPECT_EQ(x, 42);
  // With both outputs and no rows: the empty batch's histogram (no bins are read).
  EXPECT_EQ(lynx::host::score_experts(nullptr, 0, p, counts.data(), ranks.data()), lynx::status::success);
  for (const auto x : counts) EXPECT_EQ(x, 0);
  for (const auto x : ranks) EXPECT_EQ(x, 0);
  EXPECT_EQ(lynx::host::score_experts(nullptr, 1, p, counts.data(), ranks.data()), lynx::status::null_pointer);
}

TEST(EdgeCases, F2TopkInsideKRanksMembersAtMinusInfAboveOutsiders) {
  // N 16, k 2: row 0 has e0 = 0, e1 = -5, the rest -inf; row 1 has e9 = e10 = 0. K = {0, 9, 10}.
  // Row 0's top-2 inside K is e0 then e9 (-inf, the lower id of K's two -inf members); e1 is
  // outside K. The host used to give {0, 1}: its ranking ignored the mask at a -inf cutoff.
  const int n = 16;
  std::vector<float> L(2 * n, -inf);
  L[0] = 0.0f;
  L[1] = -5.0f;
  L[n + 9] = L[n + 10] = 0.0f;
  const auto p = params(n, 2, 1.0f, 1);
  const routed r = route(L, 2, p);
  const auto ref = lynx_test::ref_route(L, 2, 2, {n, 2, 1.0f, 1});
  EXPECT_EQ(ref.active, (std::vector<int>{0, 9, 10}));
  EXPECT_EQ(r.ids, ref.ids);
  EXPECT_EQ(r.ids, (std::vector<int>{0, 9, 9, 10}));
}

TEST(EdgeCases, F2BudgetSharesInsideK0IgnoreExpertsOutsideIt) {
  // default_params(16, 2): row 0 e8 = 10, e0 = 9.99; row 1 e9 = 10, e1 = 9.99; the rest -inf.
  // K0 = the anchors {8, 9}; each row's second share inside K0 is 0, not its e0 / e1. With the
  // inflated shares the greedy stopped at 0.751 retained mass against a target of 0.94.
  const int n = 16;
  std::vector<float> L(2 * n, -inf);
  L[8] = 10.0f;
  L[0] = 9.99f;
  L[n + 9] = 10.0f;
  L[n + 1] = 9.99f;
  for (const float target : {0.6f, 0.75f, 0.94f}) {
    auto p = lynx::default_params(n, 2);
    p.budget_mass = target;
    const routed r = route(L, 2, p);
    const auto m = lynx::measure_batch(L.data(), n, 2, p, r.ids.data());
    EXPECT_GE(m.retained_mass, target - 1e-6) << "target " << target;
    EXPECT_EQ(m.top1_kept, 1.0);
  }
}

TEST(EdgeCases, F3RenormalizedWeightsOfChosenExpertsFarBelowTheRowMax) {
  // lynx, N 2, k 1, alpha 0.001, beta 1: rows [0, -100], [-2000, 0], [-2000, 0]. All bins are 0,
  // e1 has the batch's support, so row 0 takes e1: its one renormalized weight is 1 (it was 0).
  const std::vector<float> L = {0.0f, -100.0f, -2000.0f, 0.0f, -2000.0f, 0.0f};
  const routed r = route(L, 3, params(2, 1, 0.001f, 1));
  EXPECT_EQ(r.ids, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(r.w, (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

TEST(EdgeCases, F3SigmoidWeightsOfTinySigmoidsKeepTheirRatios) {
  // sigmoid + renormalize on [-100, -101, -102, -103], k 2: sigmoids about e^-100, e^-101,
  // whose ratio is e; the weights were 0, 0.
  const std::vector<float> L = {-100.0f, -101.0f, -102.0f, -103.0f};
  const routed r = topk(L, 1, params(4, 2, 1.0f, 1, lynx::scoring::sigmoid, true));
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1}));
  const double w0 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(r.w[0], w0, 1e-6);
  EXPECT_NEAR(r.w[1], 1.0 - w0, 1e-6);
}

TEST(EdgeCases, SigmoidMassWithoutRenormalizeKeepsTinySigmoids) {
  // sigmoid without renormalize on [-95, -96, -200, -300], k 2: the weights are the sigmoids,
  // about 5.5e-42 and 2.0e-42 (subnormal, but representable); they were 0, 0, because
  // 1 / (1 + exp(95)) overflowed exp. Where exp(-x) is finite, sigmoid is the formula, bitwise.
  const std::vector<float> L = {-95.0f, -96.0f, -200.0f, -300.0f};
  const auto p = params(4, 2, 1.0f, 1, lynx::scoring::sigmoid, false);
  for (const routed& r : {topk(L, 1, p), route(L, 1, p)}) {
    EXPECT_EQ(r.ids, (std::vector<int>{0, 1}));
    for (int i = 0; i < 2; ++i) {
      const double want = std::exp(static_cast<double>(L[i]));  // 1 + e^l is 1 in double too
      EXPECT_NEAR(r.w[i] / want, 1.0, 2e-3) << i;  // subnormals: about 2.5e-4 relative resolution
    }
  }
  namespace d = lynx::detail;
  EXPECT_EQ(d::sigmoid(-88.72283f), 1.0f / (1.0f + d::exp_f32(88.72283f)));
  EXPECT_GT(d::sigmoid(-88.72284f), 0.0f);
  EXPECT_EQ(d::sigmoid(-104.0f), 0.0f);  // below 2^-150
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> x(-88.72283f, 100.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = x(gen);
    ASSERT_EQ(d::float_bits(d::sigmoid(v)), d::float_bits(1.0f / (1.0f + d::exp_f32(-v)))) << v;
  }
  for (float v = -103.9f; v < -88.73f; v += 0.37f) {
    ASSERT_EQ(d::sigmoid(v), d::exp_f32(v)) << v;
    ASSERT_GT(d::sigmoid(v), 0.0f) << v;
  }
}

TEST(EdgeCases, TinySigmoidMassSurvivesARoutersScaling) {
  // Sigmoid without renormalize, every logit below -80: the original top-k mass S[t] lies far
  // below FLT_MIN, but S[t] times a scaling of up to 2^100 is a normal float. The fp32 mass
  // lost it (scaling 2^100, one logit at -104: weight 0 where SPEC's is 8.6e-16). Each weight
  // against lynx_test::ref_route's in double times the scaling, for route (remapping) and
  // topk_route, at rows that remap and rows from -81 down to -190. Ids are compared as sets:
  // weights that round to one float (0 included) go by ascending id, not by their exact order.
  constexpr int n = 16, k = 4, rows = 8;
  std::mt19937 gen(11);
  int remapping_batches = 0;
  for (const float scaling : {lynx::max_router_scaling, 0x1p60f, 2.5f, 1.0f})
    for (const float top : {-81.0f, -104.0f, -140.0f, -175.0f}) {
      std::uniform_real_distribution<float> below(0.0f, 15.0f);
      std::vector<float> L(static_cast<std::size_t>(rows) * n);
      for (float& x : L) x = top - below(gen);
      auto p = params(n, k, 2.0f, 3, lynx::scoring::sigmoid, false);
      p.router.scaling = scaling;
      const auto ref = lynx_test::ref_route(L, rows, rows, {n, k, 2.0f, 3, true, false});
      const routed got[2] = {route(L, rows, p), topk(L, rows, p)};
      int remapped = 0, normal = 0;
      for (int t = 0; t < rows; ++t) {
        const auto slots = [&](const std::vector<int>& ids) {
          return std::set<int>(ids.begin() + t * k, ids.begin() + (t + 1) * k);
        };
        ASSERT_EQ(slots(got[0].ids), slots(ref.ids)) << "scaling " << scaling << " top " << top << " row " << t;
        for (int i = 0; i < k; ++i) {
          const std::size_t at = static_cast<std::size_t>(t) * k + i;
          remapped += slots(got[1].ids).count(got[0].ids[at]) == 0;
          // route's exact weight is ref_route's for that id; topk_route's chosen set is the
          // original top-k, whose weights are the sigmoids (e^l to double's precision here).
          const std::size_t ref_at = std::find(ref.ids.begin() + t * k, ref.ids.end(), got[0].ids[at]) - ref.ids.begin();
          const double want[2] = {ref.weights[ref_at] * scaling,
                                  std::exp(static_cast<double>(L[static_cast<std::size_t>(t) * n + got[1].ids[at]])) * scaling};
          for (int r = 0; r < 2; ++r) {
            normal += want[r] >= FLT_MIN;
            ASSERT_LE(std::fabs(got[r].w[at] - want[r]), 4e-6 * want[r] + std::ldexp(1.0, -149))
                << "scaling " << scaling << " top " << top << (r ? " topk_route" : " route") << " row " << t
                << " weight " << i << ": " << got[r].w[at] << " vs SPEC " << want[r];
          }
        }
      }
      remapping_batches += remapped > 0;
      if (scaling == lynx::max_router_scaling && top > -150.0f) {
        EXPECT_EQ(normal, 2 * rows * k) << top;
      }
    }
  EXPECT_GE(remapping_batches, 8);  // of 16: route's weights are of remapped rows, not only topk_route's
  // Masses that vanish (every term below 2^-274, or a tiny scaling) give weights of +0, not -0.
  for (const auto& [top, scaling] : {std::pair{-200.0f, 1.0f}, std::pair{-170.0f, 0x1p-100f}}) {
    const std::vector<float> row = {top, top - 1, top - 2, top - 3};
    auto p = params(4, 2, 1.0f, 1, lynx::scoring::sigmoid, false);
    p.router.scaling = scaling;
    for (const routed& r : {route(row, 1, p), topk(row, 1, p)}) {
      for (const float w : r.w) {
        EXPECT_FALSE(std::signbit(w)) << top << " " << w;
      }
    }
  }
}

TEST(EdgeCases, FarChosenWeightsSurviveARoutersScaling) {
  // Chosen logits far below the largest chosen one: its ratio exp(l - top) (or its sigmoid's)
  // lies below fp32's normals, but times the mass and a scaling of up to 2^100 the weight is a
  // normal float (scaling 2^100, chosen logits 0 and -150: weight 0 where SPEC's is 9.1e-36).
  // topk_route's weights (route's take the same path) against SPEC's in long double, for
  // softmax and sigmoid, with and without renormalize, rows at and away from zero.
  constexpr int n = 8, k = 3;
  int normal = 0;
  for (const lynx::scoring s : {lynx::scoring::softmax, lynx::scoring::sigmoid})
    for (const bool renormalize : {false, true})
      for (const float scaling : {lynx::max_router_scaling, 0x1p60f, 2.5f, 1.0f})
        for (const float top : {0.0f, 6.0f, -30.0f})
          for (const float gap : {60.0f, 82.0f, 95.0f, 120.0f, 150.0f, 185.0f}) {
            const std::vector<float> row = {top - gap / 2, -1000.0f, top, top - gap, -2000.0f,
                                            top - gap - 40, -inf, top - gap - 60};
            auto p = params(n, k, 1.0f, 1, s, renormalize);
            p.router.scaling = scaling;
            const routed got = topk(row, 1, p);
            const bool sig = s == lynx::scoring::sigmoid;
            const auto act = [&](long double l) {  // softmax relative to the top: same ratios
              return sig ? 1.0L / (1.0L + std::exp(-l)) : std::exp(l - top);
            };
            long double chosen = 0, all = 0;
            for (const int e : {0, 2, 3}) chosen += act(row[e]);
            for (const float l : row) all += act(l);
            const long double norm = renormalize ? chosen : sig ? 1.0L : all;
            for (int i = 0; i < k; ++i) {
              ASSERT_TRUE(got.ids[i] == 0 || got.ids[i] == 2 || got.ids[i] == 3) << got.ids[i];
              const double want = static_cast<double>(act(row[got.ids[i]]) / norm * scaling);
              normal += want >= FLT_MIN;
              ASSERT_LE(std::fabs(got.w[i] - want), 4e-6 * want + std::ldexp(1.0, -149))
                  << (sig ? "sigmoid" : "softmax") << " renormalize " << renormalize << " scaling " << scaling
                  << " top " << top << " gap " << gap << " weight " << i << ": " << got.w[i] << " vs SPEC " << want;
              ASSERT_FALSE(std::signbit(got.w[i]));
            }
          }
  EXPECT_GE(normal, 300);  // the scalings bring most of them back into the normals
}

/// The exact weights of chosen experts (SPEC §3.3 step 4, renormalize), in long double relative
/// to the largest chosen logit, in the output order of `ids`.
std::vector<long double> exact_renormalized(const float* row, const int* ids, int k, bool sigmoid) {
  long double top = -INFINITY;
  for (int i = 0; i < k; ++i) top = std::max<long double>(top, row[ids[i]]);
  const auto log_act = [&](long double l) {  // log of the activation, up to a common term
    return sigmoid ? -std::log1p(std::exp(-l)) : l - top;
  };
  std::vector<long double> w(k);
  long double ref = -INFINITY, sum = 0;
  for (int i = 0; i < k; ++i) ref = std::max(ref, log_act(row[ids[i]]));
  for (int i = 0; i < k; ++i) sum += w[i] = std::exp(log_act(row[ids[i]]) - ref);
  for (auto& x : w) x /= sum;
  return w;
}

TEST(EdgeCases, F3RenormalizedWeightsSumToOneWhateverTheLogits) {
  // Rows far below zero, far below their max, or spread over thousands of nats, for every
  // policy and scoring: every voting row's weights sum to 1 within 1e-6, each is the exact
  // value to 1e-5 relative, and none is 0 unless its exact ratio to the row's largest is
  // below 2^-126.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 70), k = 1 + static_cast<int>(rng() % std::min(n, 8));
    const int rows = 1 + static_cast<int>(rng() % 12);
    const float offset = -static_cast<float>(rng() % 3000), spread = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 2);
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> L(static_cast<std::size_t>(rows) * n);
    for (auto& x : L) x = offset + normal(rng);
    auto p = params(n, k, 0.001f + static_cast<float>(rng() % 100) * 0.03f, static_cast<int>(rng() % 4),
                    rng() % 2 ? lynx::scoring::sigmoid : lynx::scoring::softmax, true);
    p.kind = static_cast<lynx::policy>(rng() % 3);
    p.keep_k = 1;
    if (p.kind == lynx::policy::budget) p.budget_mass = 0.9f;
    p.anchor_top1 = rng() % 2;
    const routed r = route(L, rows, p);
    for (int t = 0; t < rows; ++t) {
      const float* row = L.data() + static_cast<std::size_t>(t) * n;
      const int* ids = r.ids.data() + static_cast<std::size_t>(t) * k;
      const auto want = exact_renormalized(row, ids, k, p.score == lynx::scoring::sigmoid);
      double sum = 0;
      for (int i = 0; i < k; ++i) {
        const float w = r.w[static_cast<std::size_t>(t) * k + i];
        sum += w;
        if (want[i] >= 1e-30L) {
          ASSERT_NEAR(w, static_cast<double>(want[i]), 1e-5 * static_cast<double>(want[i]) + 1e-7)
              << "trial " << trial << " row " << t << " slot " << i;
        }
        if (want[i] >= std::ldexp(1.0L, -126) * want[0]) {
          ASSERT_GT(w, 0.0f) << "trial " << trial;
        }
      }
      ASSERT_NEAR(sum, 1.0, 1e-6) << "trial " << trial << " row " << t;
    }
  }
}

TEST(EdgeCases, F4BudgetCountLimitHoldsWhenGainsVanish) {
  // N 8, k 2, 3 rows: row t has e0 = 0, e(t+1) = -100, the rest -1000. K0 = {e0}; every other
  // gain is (nearly) 0. The greedy used to stop with |K| = 1 < k, and every row filled its
  // second slot from outside K: 4 experts against a limit of 2.
  const int n = 8, k = 2, rows = 3;
  for (const float far : {-100.0f, -1000.0f}) {
    std::vector<float> L(rows * n, -1000.0f);
    for (int t = 0; t < rows; ++t) {
      L[t * n] = 0.0f;
      L[t * n + t + 1] = far;
    }
    auto by_count = lynx::default_params(n, k);
    by_count.budget_mass = 0.0f;
    by_count.budget_experts = 2;
    auto by_fraction = by_count;
    by_fraction.budget_experts = 0;
    by_fraction.budget_fraction = 0.5f;  // of 4 plain unique experts
    for (const auto& p : {by_count, by_fraction}) {
      const routed r = route(L, rows, p);
      EXPECT_LE(unique_experts(r), 2) << "far " << far;
      for (int t = 0; t < rows; ++t) {
        EXPECT_EQ(r.ids[t * k], 0);
        EXPECT_NE(r.ids[t * k], r.ids[t * k + 1]);
      }
    }
  }
}

TEST(EdgeCases, BudgetNeverStopsBelowKExperts) {
  // Mass mode too: one confident token reaches the target with its top-1 alone, but K must
  // still hold k experts so that every row's top-k lies inside it.
  const int n = 16, k = 4;
  std::vector<float> L(n, -50.0f);
  L[3] = 0.0f;
  auto p = lynx::default_params(n, k);
  const routed one = route(L, 1, p);
  EXPECT_EQ(one.ids, topk(L, 1, p).ids);  // a single token is never remapped
  // Two tokens whose top-2 masses meet the target with the anchors {3, 7} alone, and whose
  // next choices differ (e0, e1 against e14, e15): filling from outside K touched 6 experts.
  std::vector<float> two(L);
  two.insert(two.end(), L.begin(), L.end());
  two[0] = -40.0f;
  two[1] = -41.0f;
  two[n + 7] = 1.0f;
  two[n + 14] = -40.0f;
  two[n + 15] = -41.0f;
  const routed r = route(two, 2, p);
  EXPECT_EQ(unique_experts(r), k);
}

TEST(EdgeCases, PointerTokenCountRoutesAsTheKernelsDo) {
  // A token count given by pointer (host memory on the host path) is clamped to [0, rows], and
  // the call routes every row whatever it reads, as a kernel in a graph replay does: at 0 every
  // row is padding (the lowest ids, or the sentinel, weight 0). A host count of 0 writes
  // nothing. (The host path wrote nothing for a pointer count of 0 or less.)
  const int n = 24, k = 3, rows = 5;
  const auto L = lynx_test::random_logits(rows, n, 11);
  std::vector<float> bias(n);
  for (int e = 0; e < n; ++e) bias[e] = 0.05f * static_cast<float>(e % 5);
  std::vector<lynx::route_params> cases;
  for (const lynx::policy kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
    auto p = lynx::default_params(n, k);
    p.kind = kind;
    p.keep_k = 1;
    cases.push_back(p);
  }
  cases.push_back(cases.back());
  cases.back().pad_with_sentinel = true, cases.back().sentinel_id = n;
  cases.push_back(cases.back());  // a grouped, biased router (docs/ROUTERS.md)
  cases.back().router.num_groups = 4, cases.back().router.top_groups = 2, cases.back().router.bias = bias.data();
  cases.back().score = lynx::scoring::sigmoid;
  enum class call { route, topk, remap };
  for (const auto& p : cases)
    for (const call c : {call::route, call::topk, call::remap}) {
      if (c == call::remap && (p.kind == lynx::policy::lynx || !p.router.plain())) continue;  // no bins; no router
      const auto run = [&](lynx::token_count valid, std::vector<int>& ids, std::vector<float>& w) {
        const lynx::batch_ref<float, int> b{L.data(), n, rows, valid, ids.data(), w.data()};
        return c == call::route ? lynx::host::route(b, p)
               : c == call::topk ? lynx::host::topk_route(b, p)
                                 : lynx::host::remap_topk(b, nullptr, nullptr, p);
      };
      for (const int count : {0, -3, 2, rows, rows + 4}) {
        SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(p.kind) << " call "
                                        << static_cast<int>(c) << " count " << count << " sentinel "
                                        << p.pad_with_sentinel << " router " << !p.router.plain());
        std::vector<int> ids(rows * k, -7), want(rows * k, -7);
        std::vector<float> w(rows * k, -7.0f), want_w(rows * k, -7.0f);
        ASSERT_EQ(run(lynx::token_count(&count), ids, w), lynx::status::success);
        const int b = std::clamp(count, 0, rows);
        if (b > 0) {
          ASSERT_EQ(run(b, want, want_w), lynx::status::success);
        } else {
          for (int i = 0; i < rows * k; ++i) want[i] = p.pad_with_sentinel ? p.sentinel_id : i % k, want_w[i] = 0.0f;
        }
        EXPECT_EQ(ids, want);
        EXPECT_EQ(w, want_w);
      }
      std::vector<int> ids(rows * k, -7);  // a host count of 0: nothing written
      std::vector<float> w(rows * k, -7.0f);
      ASSERT_EQ(run(0, ids, w), lynx::status::success);
      EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int x) { return x == -7; }));
      EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](float x) { return x == -7.0f; }));
    }
}

TEST(EdgeCases, NullTokenCountPointerIsRejected) {
  // A count given by a null pointer is a missing count, not B = 0 (it read as 0: success, and
  // the device launchers then wrote nothing). With rows: null_pointer, nothing written.
  const int n = 16, k = 2, rows = 3;
  const auto L = lynx_test::random_logits(rows, n, 5);
  const lynx::token_count no_count(static_cast<const int*>(nullptr));
  for (const lynx::policy kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
    auto p = lynx::default_params(n, k);
    p.kind = kind;
    p.keep_k = 1;
    std::vector<int> ids(rows * k, -7);
    std::vector<float> w(rows * k, -7.0f);
    const lynx::batch_ref<float, int> b{L.data(), n, rows, no_count, ids.data(), w.data()};
    EXPECT_EQ(lynx::host::route(b, p), lynx::status::null_pointer);
    EXPECT_EQ(lynx::host::topk_route(b, p), lynx::status::null_pointer);
    if (kind != lynx::policy::lynx) {
      EXPECT_EQ(lynx::host::remap_topk(b, nullptr, nullptr, p), lynx::status::null_pointer);
    }
    EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int x) { return x == -7; }));
    EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](float x) { return x == -7.0f; }));
    const lynx::batch_ref<float, int> none{L.data(), n, 0, no_count, ids.data(), w.data()};
    EXPECT_EQ(lynx::host::route(none, p), lynx::status::success);  // no rows: nothing to count
  }
}

TEST(EdgeCases, ScoringOutOfRangeIsRejected) {
  // An enum value past sigmoid took the softmax path on the host and a zero mass on the device.
  const int n = 16, k = 2, rows = 3;
  const auto L = lynx_test::random_logits(rows, n, 5);
  for (const int score : {2, -1, 255}) {
    auto p = lynx::default_params(n, k);
    p.score = static_cast<lynx::scoring>(score);
    EXPECT_EQ(lynx::check(p), lynx::status::invalid_scoring);
    std::vector<int> ids(rows * k, -7);
    std::vector<float> w(rows * k, -7.0f);
    EXPECT_EQ(lynx::host::topk_route(L.data(), n, rows, rows, p, ids.data(), w.data()), lynx::status::invalid_scoring);
    EXPECT_EQ(lynx::host::route(L.data(), n, rows, rows, p, ids.data(), w.data()), lynx::status::invalid_scoring);
    EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [](int x) { return x == -7; }));
    EXPECT_STRNE(lynx::status_string(lynx::status::invalid_scoring), "unknown status");
  }
}

}  // namespace edge_cases_tests
