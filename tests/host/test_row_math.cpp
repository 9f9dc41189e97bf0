// The shared per-element math: exp_f32 accuracy, key order, the output order on equal weights,
// the budget's share inserts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include <lynx/host.hpp>

namespace row_math_tests {

TEST(RowMath, ExpIsAccurateEverywhereItIsUsed) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(lynx::detail::exp_f32(x) - want) / want);
  }
  EXPECT_LT(worst, 2.4e-7);  // about 2 ulp; the weights' budget is 2e-6
  EXPECT_EQ(lynx::detail::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(lynx::detail::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(lynx::detail::exp_f32(100.0f), INFINITY);
}

TEST(RowMath, ExpRoundsIntoTheSubnormals) {
  // Below FLT_MIN the result is the nearest subnormal (spacing 2^-149), not 0, so that weight
  // ratios down to 2^-149 survive (SPEC §3.3 step 4); below 2^-150 it is 0.
  for (float x = -103.9f; x < -87.4f; x += 0.0371f) {
    const double want = std::exp(static_cast<double>(x)), got = lynx::detail::exp_f32(x);
    ASSERT_GT(got, 0.0) << x;
    ASSERT_LE(std::fabs(got - want), 2.4e-7 * want + std::ldexp(1.0, -150)) << x;
  }
  EXPECT_EQ(lynx::detail::exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(lynx::detail::exp_f32(-1000.0f), 0.0f);
  EXPECT_NEAR(lynx::detail::exp_f32(-100.0f), std::exp(-100.0), std::ldexp(1.0, -149));
}

TEST(RowMath, ExpUp124IsExpTimes2To124) {
  // What a sigmoid mass far below FLT_MIN is summed with (detail::tiny_mass_logit): normal down
  // to 2^-126 (x = ln 2^-250) with exp_f32's accuracy, then the nearest subnormal, 0 below
  // 2^-150. Where exp_f32 is normal it is exp_f32 times 2^124 exactly (the same reduction).
  namespace d = lynx::detail;
  double worst = 0;
  for (float x = -189.9f; x <= 0.0f; x += 0.0173f) {
    const double want = std::ldexp(std::exp(static_cast<double>(x)), 124), got = d::exp_f32_up124(x);
    ASSERT_GT(got, 0.0) << x;
    ASSERT_LE(std::fabs(got - want), 2.4e-7 * want + std::ldexp(1.0, -150)) << x;
    if (want >= std::ldexp(1.0, -126)) worst = std::max(worst, std::fabs(got - want) / want);
    if (x >= -87.3f) {
      ASSERT_EQ(got, std::ldexp(static_cast<double>(d::exp_f32(x)), 124)) << x;
    }
  }
  EXPECT_LT(worst, 2.4e-7);
  EXPECT_EQ(d::exp_f32_up124(0.0f), 0x1p124f);
  EXPECT_EQ(d::exp_f32_up124(-190.0f), 0.0f);
  EXPECT_EQ(d::exp_f32_up124(-INFINITY), 0.0f);
}

TEST(RowMath, TinyMassesKeepTheirDigits) {
  // A sigmoid mass whose every term is below 2^-115 travels as -(mass * 2^124); times_mass
  // undoes it in one rounding. Every other mass multiplies as it is, bitwise.
  namespace d = lynx::detail;
  const float row[4] = {-100.0f, -101.0f, -79.0f, -150.0f};
  const std::uint64_t tiny_keys[2] = {d::logit_key(row[0], 0), d::logit_key(row[1], 1)};
  const float tiny = d::topk_mass(row, 0.0f, tiny_keys, 2, lynx::scoring::sigmoid, 0.0f);
  const double exact = std::exp(-100.0) + std::exp(-101.0);
  ASSERT_LT(tiny, 0.0f);
  EXPECT_NEAR(-tiny, std::ldexp(exact, 124), 5e-7 * std::ldexp(exact, 124));
  // The weight of one chosen expert holding all of it, times a router scaling of 2^100
  // (scaled_emit's product): a normal float, which the plain fp32 mass (subnormal, 37 ulps of
  // 2^-149) could give only to about 1%.
  const float w = d::times_mass(1.0f, tiny * 0x1p100f);
  EXPECT_NEAR(w, std::ldexp(exact, 100), 5e-7 * std::ldexp(exact, 100));
  EXPECT_EQ(d::times_mass(1.0f, tiny), static_cast<float>(exact));  // subnormal, rounded once
  // One term at -79: the plain sum, bitwise.
  const std::uint64_t plain_keys[2] = {d::logit_key(row[2], 2), d::logit_key(row[3], 3)};
  EXPECT_EQ(d::topk_mass(row, 0.0f, plain_keys, 2, lynx::scoring::sigmoid, 0.0f),
            d::sigmoid(row[2]) + d::sigmoid(row[3]));
  EXPECT_EQ(d::times_mass(0.375f, 0.3f), 0.375f * 0.3f);
  EXPECT_EQ(d::times_mass(0.375f, 0.0f), 0.0f);
  // Every term below 2^-274: the tiny mass is -0, and its weights +0 (not -0).
  const float deep[2] = {-200.0f, -201.0f};
  const std::uint64_t deep_keys[2] = {d::logit_key(deep[0], 0), d::logit_key(deep[1], 1)};
  const float zero = d::topk_mass(deep, 0.0f, deep_keys, 2, lynx::scoring::sigmoid, 0.0f);
  EXPECT_EQ(d::float_bits(zero), 0x80000000u);
  EXPECT_EQ(d::float_bits(d::times_mass(0.5f, zero)), 0u);
  EXPECT_EQ(d::float_bits(d::times_mass(0.5f, tiny * 0x1p-100f * 0x1p-100f)), 0u);  // scaled to -0
}

TEST(RowMath, FarRatiosKeepTheirDigits) {
  // A chosen weight whose ratio to the largest chosen one lies below e^-80 is taken again
  // from that ratio times 2^124 (tiny_ratio_weight). Where the plain product was normal it is
  // bitwise the same; where the plain ratio was subnormal or 0 the digits come back.
  namespace d = lynx::detail;
  int compared = 0;
  for (const lynx::scoring s : {lynx::scoring::softmax, lynx::scoring::sigmoid})
    for (const float top : {0.0f, 3.0f, -20.0f})
      for (const float mass : {1.0f, 0.7f, 0x1p40f, 0x1p100f, -0x1p10f /* a tiny mass */})
        for (float arg = -80.0625f; arg > -87.0f; arg -= 0.0625f) {
          // sigmoid ratios are to exp(min(top, 0))
          const float l = (s == lynx::scoring::sigmoid ? std::min(top, 0.0f) : top) + arg, denom = 1.6180339f;
          ASSERT_LT(d::chosen_ratio_arg(l, top, s), d::tiny_ratio_arg);
          const float ratio = s == lynx::scoring::sigmoid ? d::scaled_sigmoid(l, top) : d::exp_f32(l - top);
          const float plain = d::times_mass(ratio / denom, mass);
          if (ratio < FLT_MIN || ratio / denom < FLT_MIN || std::fabs(plain) < FLT_MIN) continue;
          ++compared;
          ASSERT_EQ(d::float_bits(d::tiny_ratio_weight(l, top, s, denom, mass)), d::float_bits(plain))
              << static_cast<int>(s) << " " << top << " " << mass << " " << arg;
        }
  EXPECT_GT(compared, 400);
  // Chosen logits 0 and -150, a mass of 1 times a scaling of 2^100: e^-150 * 2^100 / (1 + e^-150)
  // is 9.1e-36 (the plain ratio e^-150 is 0 in fp32).
  const double want = std::ldexp(std::exp(-150.0), 100);
  EXPECT_EQ(d::exp_f32(-150.0f), 0.0f);
  EXPECT_NEAR(d::tiny_ratio_weight(-150.0f, 0.0f, lynx::scoring::softmax, 1.0f, 0x1p100f), want, 4e-7 * want);
  // Sigmoid at 0: the ratio is e^-150 / (1 + e^-150) over 1/2's divisor term.
  EXPECT_NEAR(d::tiny_ratio_weight(-150.0f, 0.0f, lynx::scoring::sigmoid, 0.5f, 0x1p100f), 2 * want, 8e-7 * want);
  // A tiny mass as well: both 2^-124 factors, and +0 where the product vanishes.
  EXPECT_EQ(d::float_bits(d::tiny_ratio_weight(-150.0f, 0.0f, lynx::scoring::softmax, 1.0f, -1.0f)), 0u);
  EXPECT_EQ(d::float_bits(d::tiny_ratio_weight(-INFINITY, 0.0f, lynx::scoring::sigmoid, 1.0f, 0x1p100f)), 0u);
}

TEST(RowMath, KeysOrderByValueThenLowerId) {
  using lynx::detail::logit_key;
  EXPECT_GT(logit_key(1.0f, 5), logit_key(0.5f, 0));
  EXPECT_GT(logit_key(1.0f, 2), logit_key(1.0f, 3));
  EXPECT_GT(logit_key(-1.0f, 9), logit_key(-INFINITY, 0));
  EXPECT_EQ(logit_key(lynx::detail::sanitize(-0.0f), 1), logit_key(0.0f, 1));
  // z: own bin first, then rank (0 best), then logit.
  using lynx::detail::z_key;
  EXPECT_GT(z_key(0, 100, -3.0f, 7), z_key(-1, 0, 5.0f, 1));
  EXPECT_GT(z_key(-1, 0, -3.0f, 7), z_key(-1, 1, 5.0f, 1));
  EXPECT_GT(z_key(-1, 1, 5.0f, 7), z_key(-1, 1, 4.0f, 1));
}

TEST(RowMath, BinZKeysOrderAsZInsideABin) {
  // A set key (one bin's z without q, the id in 10 bits) orders as (code, logit key), gives
  // the logit key back and is never 0; codes from ranks order as z's ranks do.
  namespace d = lynx::detail;
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> code(0, (1u << d::order_code_bits) - 1);
  std::uniform_int_distribution<int> id(0, lynx::max_experts - 1), pick(0, 7);
  const float special[] = {-INFINITY, -0.0f, 0.0f, 1e-30f, -1e30f, 3.5f, -3.5f, 1e30f};
  std::normal_distribution<float> logit(0.0f, 4.0f);
  const auto draw = [&] {  // one draw at a time, so the sequence does not depend on the compiler
    const float l = pick(rng) == 0 ? special[pick(rng)] : logit(rng);
    const std::uint32_t c = pick(rng) == 0 ? 5u : code(rng);
    const int e = id(rng);
    return std::pair<std::uint32_t, std::uint64_t>(c, d::logit_key(d::sanitize(l), e));
  };
  for (int i = 0; i < 20000; ++i) {
    const auto a = draw(), b = draw();
    const std::uint64_t ka = d::bin_z_key(a.first, a.second), kb = d::bin_z_key(b.first, b.second);
    ASSERT_NE(ka, 0u);
    ASSERT_EQ(d::logit_key_of(ka), a.second);
    ASSERT_EQ(ka > kb, a > b) << i;
    ASSERT_EQ(ka == kb, a == b) << i;
  }
  for (int ra = 0; ra < lynx::max_experts; ra += 37)
    for (int rb = 0; rb < lynx::max_experts; rb += 41) {
      const std::uint64_t key = d::logit_key(1.0f, 3), other = d::logit_key(2.0f, 4);
      EXPECT_EQ(d::bin_z_key(d::order_code_of_rank(ra), key) > d::bin_z_key(d::order_code_of_rank(rb), other),
                d::z_key_high(-1, ra) + key > d::z_key_high(-1, rb) + other);
    }
}

TEST(RowMath, EqualWeightsGoToTheLowerId) {
  // Sigmoid saturates to exactly 1.0f above ~17: the weights tie although the logits differ,
  // so SPEC's "descending weight, then ascending id" orders them by id, not by logit.
  lynx::route_params p;
  p.num_experts = 4;
  p.top_k = 3;
  p.score = lynx::scoring::sigmoid;
  p.renormalize = false;
  const std::vector<float> L = {20.0f, 30.0f, -2.0f, 25.0f};
  std::vector<int> ids(3);
  std::vector<float> w(3);
  ASSERT_EQ(lynx::host::topk_route(L.data(), 4, 1, 1, p, ids.data(), w.data()), lynx::status::success);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(w[0], 1.0f);
}

}  // namespace row_math_tests

namespace row_math_tests {

TEST(RowMath, CanonicalRowSumIsTheWarpButterfly) {
  // The butterfly sum differs from a left-to-right sum only by rounding, and every lane of the
  // emulated warp ends with the same value (what lets the device use any lane's result).
  std::vector<float> row(300);
  for (int e = 0; e < 300; ++e) row[e] = std::sin(0.37f * e) * 3.0f;
  const float m = *std::max_element(row.begin(), row.end());
  double exact = 0;
  for (float x : row) exact += std::exp(static_cast<double>(x) - m);
  const float canonical = lynx::detail::row_exp_sum(row.data(), 300, m);
  EXPECT_NEAR(canonical, exact, 2e-6 * exact);
  float p[32];
  for (int j = 0; j < 32; ++j) p[j] = lynx::detail::lane_exp_sum(row.data(), 300, m, j);
  for (int o = 16; o > 0; o >>= 1) {
    float next[32];
    for (int j = 0; j < 32; ++j) next[j] = p[j] + p[j ^ o];
    std::copy(next, next + 32, p);
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(p[j], canonical);
}

TEST(RowMath, BudgetSlotInsertsAreTheHostsInsert) {
  // The device inserts a share into a token's k best shares inside K slot by slot (share_slot:
  // share_insert_k's strided list in block_budget, a lane a slot in warp_budget_row); the host
  // path shifts the list (share_insert). Same lists for every k, share and tie: drawn from a
  // few values so that equal shares and a list not yet full (its tail 0) are common.
  namespace d = lynx::detail;
  constexpr int K = 8, stride = 3;
  std::mt19937 gen(5);
  const float values[] = {0.0f, 0.0625f, 0.125f, 0.25f, 0.3f, 0.5f, 0.7f, 1.0f};
  std::uniform_int_distribution<int> pick(0, 7), pick_k(1, K);
  int inserted = 0, ties = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int k = pick_k(gen);
    std::vector<float> list(k);
    for (float& v : list) v = values[pick(gen)];
    std::sort(list.begin(), list.end(), std::greater<float>());
    const float share = values[pick(gen)];
    if (!(share > list[k - 1])) continue;  // the callers insert only shares above the k-th
    ++inserted;
    ties += std::count(list.begin(), list.end(), share) > 0;
    std::vector<float> want = list;
    d::share_insert(want.data(), k, share);
    std::vector<float> strided(static_cast<std::size_t>(K) * stride, -1.0f);
    for (int i = 0; i < k; ++i) strided[static_cast<std::size_t>(i) * stride] = list[i];
    const float kth = d::share_insert_k<K>(strided.data(), stride, k, share);
    EXPECT_EQ(kth, want[k - 1]) << "trial " << trial;
    for (int i = 0; i < K; ++i) {
      const float got = strided[static_cast<std::size_t>(i) * stride];
      if (i < k) {
        EXPECT_EQ(got, want[i]) << "trial " << trial << " slot " << i;
        EXPECT_EQ(d::share_slot(list[i], i == 0 ? 0.0f : list[i - 1], i == 0, share), want[i]);
      } else {
        EXPECT_EQ(got, -1.0f) << "slot " << i << " past k was written";
      }
    }
  }
  EXPECT_GT(inserted, 1000);
  EXPECT_GT(ties, 100);
}

}  // namespace row_math_tests
