// SPEC §3.2 for score_experts on the host path: exact counts and exact ranks.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include <lynx/host.hpp>

namespace score_experts_tests {

lynx::route_params params(int n, int beta) {
  lynx::route_params p;
  p.num_experts = n;
  p.top_k = 1;
  p.alpha = 1.0f;
  p.beta = beta;
  return p;
}

TEST(ScoreExperts, HandComputedCountsAndRanks) {
  // 3 tokens x 4 experts, beta 2 (bins 0, -1, -2); the third row does not vote.
  const std::vector<std::int8_t> bins = {0, -1, -2, -1,  //
                                         -1, 0, -2, -2,  //
                                         lynx::no_vote, lynx::no_vote, lynx::no_vote, lynx::no_vote};
  std::vector<std::int32_t> counts(3 * 4), ranks(4);
  ASSERT_EQ(lynx::host::score_experts(bins.data(), 3, params(4, 2), counts.data(), ranks.data()),
            lynx::status::success);
  // H (digits bin0, bin-1, bin-2): e0 (1,1,0), e1 (1,1,0), e2 (0,0,2), e3 (0,1,1).
  EXPECT_EQ(counts, (std::vector<std::int32_t>{1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 2, 1}));
  EXPECT_EQ(ranks, (std::vector<std::int32_t>{0, 0, 3, 2}));
}

TEST(ScoreExperts, RanksOrderTheExactSupportInsideEveryTokensBin) {
  // The property remap_topk relies on: for a token t and two experts in t's own bin q, the
  // exact support H[e] - B^q (an integer once scaled by B^depth) orders them as the ranks do.
  // (Whole histograms can tie as numbers with different digits, e.g. 2*B^-1 = B^0 at B = 2;
  // the support cannot, since t's own vote is removed and every digit is then below B.)
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 40), b = 1 + static_cast<int>(rng() % 20);
    const int beta = 1 + static_cast<int>(rng() % 4);
    std::vector<std::int8_t> bins(static_cast<std::size_t>(b) * n);
    for (auto& q : bins) q = static_cast<std::int8_t>(-static_cast<int>(rng() % (beta + 1)));
    std::vector<std::int32_t> counts(static_cast<std::size_t>(beta + 1) * n), ranks(n);
    ASSERT_EQ(lynx::host::score_experts(bins.data(), b, params(n, beta), counts.data(), ranks.data()),
              lynx::status::success);
    const auto pow_b = [&](int d) {
      long long w = 1;
      for (int i = 0; i < d; ++i) w *= b;
      return w;
    };
    std::vector<long long> H(n, 0);  // H * B^beta
    for (int t = 0; t < b; ++t)
      for (int e = 0; e < n; ++e) H[e] += pow_b(beta + bins[static_cast<std::size_t>(t) * n + e]);
    for (int t = 0; t < b; ++t)
      for (int e1 = 0; e1 < n; ++e1)
        for (int e2 = 0; e2 < n; ++e2) {
          const int q1 = bins[static_cast<std::size_t>(t) * n + e1];
          if (q1 != bins[static_cast<std::size_t>(t) * n + e2]) continue;
          const long long s1 = H[e1] - pow_b(beta + q1), s2 = H[e2] - pow_b(beta + q1);
          ASSERT_EQ(s1 > s2, ranks[e1] < ranks[e2]) << "trial " << trial;
          ASSERT_EQ(s1 == s2, ranks[e1] == ranks[e2]) << "trial " << trial;
        }
  }
}

TEST(ScoreExperts, HistogramsAreTheirOwnOrderCodesWhereTheyFit) {
  // The decode kernels order experts by the packed histogram (no ranks) where nbins digits of
  // the count's width fit in an order code: the default lynx parameters' 3 bins up to 127 rows.
  namespace d = lynx::detail;
  EXPECT_EQ(d::histogram_digit_bits(1), 1);
  EXPECT_EQ(d::histogram_digit_bits(2), 2);
  EXPECT_EQ(d::histogram_digit_bits(127), 7);
  EXPECT_EQ(d::histogram_digit_bits(128), 8);
  EXPECT_EQ(d::histogram_digit_bits(512), 10);
  EXPECT_TRUE(d::histograms_are_codes(3, 127));
  EXPECT_FALSE(d::histograms_are_codes(3, 128));
  EXPECT_TRUE(d::histograms_are_codes(5, 15));  // the Qwen2 preset's beta 4
  EXPECT_FALSE(d::histograms_are_codes(5, 16));
  EXPECT_FALSE(d::histograms_are_codes(lynx::histogram_bins(lynx::route_params{}), 1));  // beta 0: 32 bins
  // Without the last digit (histograms of one total): those 3 bins up to 1023 rows, beta 4 up
  // to 31, beta 3 up to 127; never 32 bins.
  EXPECT_TRUE(d::leading_digits_are_codes(3, 1023));
  EXPECT_FALSE(d::leading_digits_are_codes(3, 1024));
  EXPECT_TRUE(d::leading_digits_are_codes(5, 31));
  EXPECT_FALSE(d::leading_digits_are_codes(5, 32));
  EXPECT_TRUE(d::leading_digits_are_codes(4, 127));
  EXPECT_FALSE(d::leading_digits_are_codes(4, 128));
  EXPECT_FALSE(d::leading_digits_are_codes(lynx::histogram_bins(lynx::route_params{}), 1));
}

TEST(ScoreExperts, LeadingDigitsOrderHistogramsOfOneTotal) {
  // block_order_codes leaves the last digit out where every histogram sums to one total (every
  // row bins every expert, as the library's voting rows do): then the leading digits order the
  // histograms exactly as the ranks do. Where totals differ they may not, hence its check.
  namespace d = lynx::detail;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 60), beta = 1 + static_cast<int>(rng() % 4);
    const int b = 1 + static_cast<int>(rng() % 300), nbins = beta + 1;
    std::vector<std::int8_t> bins(static_cast<std::size_t>(b) * n);
    // Deep bins mostly, as in decode batches: histograms then share their leading digits often.
    for (auto& q : bins) q = static_cast<std::int8_t>(rng() % 4 ? -beta : -static_cast<int>(rng() % nbins));
    std::vector<std::int32_t> counts(static_cast<std::size_t>(nbins) * n), ranks(n);
    ASSERT_EQ(lynx::host::score_experts(bins.data(), b, params(n, beta), counts.data(), ranks.data()),
              lynx::status::success);
    const int bits = d::histogram_digit_bits(b);
    std::vector<std::uint64_t> lead(n, 0);
    for (int e = 0; e < n; ++e)
      for (int j = 0; j + 1 < nbins; ++j) lead[e] = lead[e] << bits | static_cast<std::uint64_t>(counts[j * n + e]);
    for (int e1 = 0; e1 < n; ++e1)
      for (int e2 = 0; e2 < n; ++e2) {
        ASSERT_EQ(lead[e1] > lead[e2], ranks[e1] < ranks[e2]) << "trial " << trial;
        ASSERT_EQ(lead[e1] == lead[e2], ranks[e1] == ranks[e2]) << "trial " << trial;
      }
  }
  // Totals that differ (a row that bins one expert and not the other): equal leading digits,
  // different histograms.
  const std::vector<std::int8_t> bins = {0, 0, -2, lynx::no_vote};
  std::vector<std::int32_t> counts(3 * 2), ranks(2);
  ASSERT_EQ(lynx::host::score_experts(bins.data(), 2, params(2, 2), counts.data(), ranks.data()),
            lynx::status::success);
  EXPECT_EQ(counts, (std::vector<std::int32_t>{1, 1, 0, 0, 1, 0}));
  EXPECT_EQ(ranks, (std::vector<std::int32_t>{0, 1}));
}

}  // namespace score_experts_tests
