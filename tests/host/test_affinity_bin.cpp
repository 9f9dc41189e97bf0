// SPEC §3.1 and §5 for affinity_bin on the host path, with hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <lynx/half.hpp>
#include <lynx/host.hpp>

#include "../support/params.hpp"

namespace affinity_bin_tests {

using lynx_test::params;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

TEST(AffinityBin, HandComputedBinsWithClamp) {
  // alpha 2, beta 3: q = max(ceil(2 * (L - max)), -3).
  const std::vector<float> L = {0.0f, -0.5f, -0.25f, -1.0f, -1.01f, -5.0f, -inf, nan};
  std::vector<std::int8_t> bins(8);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), 8, 1, 1, params(8, 2, 2.0f, 3), bins.data()),
            lynx::status::success);
  EXPECT_EQ(bins, (std::vector<std::int8_t>{0, -1, 0, -2, -2, -3, -3, -3}));
}

TEST(AffinityBin, NoClampSaturatesAtDocumentedDepth) {
  const std::vector<float> L = {0.0f, -5.0f, -inf, -40.0f};
  std::vector<std::int8_t> bins(4);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), 4, 1, 1, params(4, 1, 2.0f, 0), bins.data()),
            lynx::status::success);
  EXPECT_EQ(bins, (std::vector<std::int8_t>{0, -10, -lynx::max_bin_depth, -lynx::max_bin_depth}));
  EXPECT_GE(lynx::max_bin_depth, 15);  // SPEC §2
}

TEST(AffinityBin, Fp32RoundingOfTheDifferenceDecidesTheEdge) {
  // Exactly, 2^-25 - 1 > -1 (bin 0), but fp32(2^-25 - 1) is a tie that rounds to -1.0 (bin -1).
  const std::vector<float> L = {1.0f, std::ldexp(1.0f, -25)};
  std::vector<std::int8_t> bins(2);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), 2, 1, 1, params(2, 1, 1.0f, 4), bins.data()),
            lynx::status::success);
  EXPECT_EQ(bins[1], -1);
}

TEST(AffinityBin, PlusInfinityIsTheLargestFiniteFloat) {
  // +inf becomes FLT_MAX: it is the top-1 (bin 0); everything finite is ~FLT_MAX below it.
  const std::vector<float> L = {1.0f, inf, nan, 0.0f};
  std::vector<std::int8_t> bins(4);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), 4, 1, 1, params(4, 1, 1.0f, 2), bins.data()),
            lynx::status::success);
  EXPECT_EQ(bins, (std::vector<std::int8_t>{-2, 0, -2, -2}));
}

TEST(AffinityBin, PaddingAndDeadRowsDoNotVote) {
  const std::vector<float> L = {0.0f, 1.0f, nan, -inf, 2.0f, 0.0f};  // row 1 dead, row 2 padding
  std::vector<std::int8_t> bins(6, 7);
  ASSERT_EQ(lynx::host::affinity_bin(L.data(), 2, 3, 2, params(2, 1, 1.0f, 2), bins.data()),
            lynx::status::success);
  EXPECT_EQ(bins, (std::vector<std::int8_t>{-1, 0, lynx::no_vote, lynx::no_vote, lynx::no_vote,
                                            lynx::no_vote}));
}

TEST(AffinityBin, HalfAndBf16MatchTheirFloatValues) {
  const std::vector<float> L = {0.5f, -0.75f, 1.25f, -3.0f, 0.0f, 2.5f, -1.5f, 1.0f};
  std::vector<__half> h;
  std::vector<__nv_bfloat16> bf;
  for (float x : L) {
    h.push_back(__float2half(x));
    bf.push_back(__float2bfloat16(x));
  }
  std::vector<std::int8_t> a(8), b(8), c(8);
  const auto p = params(8, 2, 3.0f, 4);
  lynx::host::affinity_bin(L.data(), 8, 1, 1, p, a.data());
  lynx::host::affinity_bin(h.data(), 8, 1, 1, p, b.data());
  lynx::host::affinity_bin(bf.data(), 8, 1, 1, p, c.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

TEST(AffinityBin, BadArgumentsReturnAnErrorAndWriteNothing) {
  const std::vector<float> L(16, 0.0f);
  std::vector<std::int8_t> bins(16, 42);
  using lynx::status;
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 2, params(8, 2, 0.0f, 1), bins.data()),
            status::invalid_alpha);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 2, params(8, 2, nan, 1), bins.data()),
            status::invalid_alpha);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 2, params(8, 2, 1.0f, -1), bins.data()),
            status::invalid_beta);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 2, params(8, 2, 1.0f, 32), bins.data()),
            status::invalid_beta);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 7, 2, 2, params(8, 2, 1.0f, 1), bins.data()),
            status::invalid_row_stride);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 3, params(8, 2, 1.0f, 1), bins.data()),
            status::invalid_token_count);
  EXPECT_EQ(lynx::host::affinity_bin<float>(nullptr, 8, 2, 2, params(8, 2, 1.0f, 1), bins.data()),
            status::null_pointer);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 2, params(8, 9, 1.0f, 1), bins.data()),
            status::invalid_top_k);
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 1, 2, 2, params(1, 1, 1.0f, 1), bins.data()),
            status::invalid_num_experts);
  for (std::int8_t b : bins) EXPECT_EQ(b, 42);
  // B = 0: nothing to do, success, nothing written.
  EXPECT_EQ(lynx::host::affinity_bin(L.data(), 8, 2, 0, params(8, 2, 1.0f, 1), bins.data()),
            status::success);
  for (std::int8_t b : bins) EXPECT_EQ(b, 42);
}

}  // namespace affinity_bin_tests
