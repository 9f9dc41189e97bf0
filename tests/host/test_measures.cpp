// SPEC §6 measures (lynx::measure_batch) on hand-computed batches, and the .npy round trip the
// examples use for traces and dumps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include <lynx/measures.hpp>

#include "../../examples/common/npy.hpp"
#include "../support/params.hpp"

namespace measures_tests {

TEST(Measures, HandComputedBatch) {
  // 2 tokens, N 4, k 2. Plain top-2: token 0 {0, 1}, token 1 {3, 2}: 4 unique experts.
  // The given routing: token 0 {0, 1} (unchanged), token 1 {3, 1}: 3 unique experts.
  const std::vector<float> L = {2.0f, 1.0f, 0.0f, -1.0f,  //
                                -1.0f, 0.5f, 1.0f, 2.0f};
  const std::vector<int> ids = {0, 1, 3, 1};
  const auto m = lynx::measure_batch(L.data(), 4, 2, lynx_test::params(4, 2), ids.data());
  EXPECT_EQ(m.voting_tokens, 2);
  EXPECT_EQ(m.unique_before, 4);
  EXPECT_EQ(m.unique_after, 3);
  // Token 1 keeps e3 (its top-1) and trades e2 for e1: retained (e^2 + e^0.5) / (e^2 + e^1).
  const double r1 = (std::exp(2.0) + std::exp(0.5)) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(m.retained_mass, (1.0 + r1) / 2, 1e-6);
  EXPECT_EQ(m.top1_kept, 1.0);
  const std::vector<int> lost = {1, 2, 3, 1};  // token 0 loses its top-1, token 1 keeps e3
  EXPECT_EQ(lynx::measure_batch(L.data(), 4, 2, lynx_test::params(4, 2), lost.data()).top1_kept, 0.5);
}

TEST(Measures, DeadRowsDoNotCount) {
  const std::vector<float> L = {1.0f, 0.0f, NAN, NAN};
  const std::vector<int> ids = {0, 1, 0, 1};
  const auto m = lynx::measure_batch(L.data(), 2, 2, lynx_test::params(2, 1), ids.data());
  EXPECT_EQ(m.voting_tokens, 1);
  EXPECT_EQ(m.unique_before, 1);
}

TEST(Npy, RoundTripsFloatAndIntArrays) {
  const std::string dir = ::testing::TempDir();
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.5f};
  const std::vector<std::int32_t> i = {1, -2, 3, 4, 5, 6};
  npy::save(dir + "/f.npy", f, {1, 2, 3});
  npy::save(dir + "/i.npy", i, {6});
  const npy::array a = npy::load(dir + "/f.npy"), b = npy::load(dir + "/i.npy");
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(a.as<float>(), f);
  EXPECT_EQ(b.descr, "<i4");
  EXPECT_EQ(b.shape, (std::vector<std::int64_t>{6}));
  EXPECT_EQ(b.as<std::int32_t>(), i);
  EXPECT_THROW(npy::load(dir + "/missing.npy"), std::runtime_error);
}

}  // namespace measures_tests
