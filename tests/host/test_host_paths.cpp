// The host path's shortcuts (detail/host/) against the definitions they shortcut, and
// its two instantiations (AVX2 + FMA and portable, detail/host/simd.hpp) against each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <lynx/host.hpp>

#include "../support/params.hpp"
#include "../support/random_logits.hpp"
#include "../support/reference.hpp"

namespace host_paths_tests {

namespace d = lynx::detail;
constexpr float inf = std::numeric_limits<float>::infinity();

struct routed {
  std::vector<int> ids;
  std::vector<std::uint32_t> weight_bits;
  bool operator==(const routed& o) const { return ids == o.ids && weight_bits == o.weight_bits; }
};

template <class F>
routed run(int rows, int k, F&& call) {
  std::vector<int> ids(static_cast<std::size_t>(rows) * k, -7);
  std::vector<float> w(ids.size(), -7.0f);
  EXPECT_EQ(call(ids.data(), w.data()), lynx::status::success);
  routed r{ids, std::vector<std::uint32_t>(w.size())};
  std::memcpy(r.weight_bits.data(), w.data(), w.size() * sizeof(float));
  return r;
}

// Rows that take every branch of the top-k: plain random, coarse (many ties), rows with few
// finite logits, a row of equal logits, a NaN row, huge logits.
std::vector<float> adversarial_rows(int rows, int n, std::uint32_t seed) {
  std::vector<float> l = lynx_test::random_logits(rows, n, seed, 1.0f + static_cast<float>(seed % 3));
  std::mt19937 rng(seed);
  for (int t = 0; t < rows; ++t) {
    float* row = l.data() + static_cast<std::size_t>(t) * n;
    switch (t % 6) {
      case 1:
        for (int e = 0; e < n; ++e) row[e] = std::round(row[e] * 2.0f) / 2.0f;
        break;
      case 2:
        for (int e = 0; e < n; ++e)
          if (rng() % 8 != 0) row[e] = -inf;
        break;
      case 3:
        if (t % 12 == 3)
          for (int e = 0; e < n; ++e) row[e] = 0.25f;
        break;
      case 4:
        if (t % 12 == 4)
          for (int e = 0; e < n; ++e) row[e] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 5:
        row[rng() % n] = inf;
        row[rng() % n] = 3e38f;
        break;
      default:
        break;
    }
  }
  return l;
}

TEST(HostPaths, PlainTopkMatchesTheReferenceOnAdversarialRows) {
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{8, 2}, {64, 6}, {128, 8}, {300, 7}, {512, 32}}) {
    const int rows = 48;
    const auto l = adversarial_rows(rows, n, static_cast<std::uint32_t>(n + k));
    const auto p = lynx_test::params(n, k);
    const routed r = run(rows, k, [&](int* ids, float* w) { return lynx::host::topk_route(l.data(), n, rows, rows, p, ids, w); });
    for (int t = 0; t < rows; ++t) {
      const std::vector<float> row(l.begin() + static_cast<std::ptrdiff_t>(t) * n, l.begin() + static_cast<std::ptrdiff_t>(t + 1) * n);
      std::vector<float> clean(n);
      bool votes = false;
      for (int e = 0; e < n; ++e) {
        clean[e] = lynx_test::ref_sanitize(row[e]);
        votes = votes || clean[e] != -inf;
      }
      if (!votes) continue;
      std::vector<int> want = lynx_test::ref_topk(n, k, clean, std::vector<char>(n, 1), [](int) { return 0; });
      std::vector<int> got(r.ids.begin() + static_cast<std::ptrdiff_t>(t) * k, r.ids.begin() + static_cast<std::ptrdiff_t>(t + 1) * k);
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "n " << n << " k " << k << " row " << t;
    }
  }
}

// The z top-k by its definition (the kernels' packed keys over all N experts) and the final
// top-k with the active bit, then the library's own weights: remap_topk for the lynx policy on
// any bins and ranks.
routed remap_by_definition(const std::vector<float>& l, int rows, const std::vector<std::int8_t>& q,
                           const std::vector<std::int32_t>& rank, const lynx::route_params& p) {
  const int n = p.num_experts, k = p.top_k;
  std::vector<char> active(n, 0), plain_set(n, 0), final_set(n, 0);
  std::vector<std::uint64_t> plain(static_cast<std::size_t>(rows) * k);
  std::vector<float> m(rows);
  std::uint64_t best[lynx::max_top_k];
  for (int t = 0; t < rows; ++t) {
    const float* row = l.data() + static_cast<std::size_t>(t) * n;
    m[t] = d::row_max(row, n);
    d::plain_topk(row, n, k, plain.data() + static_cast<std::size_t>(t) * k);
    for (int i = 0; i < k; ++i) plain_set[d::key_expert(plain[static_cast<std::size_t>(t) * k + i])] = 1;
    d::topk_clear(best, k);
    for (int e = 0; e < n; ++e)
      d::topk_push(best, k, d::z_key(q[static_cast<std::size_t>(t) * n + e], rank[e], d::load_logit(row, e), e));
    for (int i = 0; i < k; ++i) active[d::key_expert(best[i])] = 1;
  }
  routed r{std::vector<int>(static_cast<std::size_t>(rows) * k), {}};
  std::vector<float> w(r.ids.size());
  std::vector<std::uint64_t> chosen(static_cast<std::size_t>(rows) * k);
  for (int t = 0; t < rows; ++t) {
    const float* row = l.data() + static_cast<std::size_t>(t) * n;
    d::topk_clear(best, k);
    for (int e = 0; e < n; ++e) d::topk_push(best, k, d::logit_key(d::load_logit(row, e), e) | d::active_bit(active[e] != 0));
    for (int i = 0; i < k; ++i) {
      chosen[static_cast<std::size_t>(t) * k + i] = best[i];
      final_set[d::key_expert(best[i])] = 1;
    }
  }
  const bool fallback = std::count(final_set.begin(), final_set.end(), 1) > std::count(plain_set.begin(), plain_set.end(), 1);
  for (int t = 0; t < rows; ++t) {
    const float* row = l.data() + static_cast<std::size_t>(t) * n;
    const std::uint64_t* c = (fallback ? plain.data() : chosen.data()) + static_cast<std::size_t>(t) * k;
    d::emit_row(row, c, k, p.score, true, 1.0f, r.ids.data() + static_cast<std::size_t>(t) * k,
                w.data() + static_cast<std::size_t>(t) * k);
  }
  r.weight_bits.resize(w.size());
  std::memcpy(r.weight_bits.data(), w.data(), w.size() * sizeof(float));
  return r;
}

TEST(HostPaths, ZTopkShortcutMatchesTheDefinition) {
  // Real bins (the monotone shortcut) and bins from another alpha or at random (the fallback).
  for (std::uint32_t seed = 0; seed < 30; ++seed) {
    // One row now and then: every expert's rank then ties with its bin's, so z breaks the
    // ties by logit inside rank runs.
    const int n = seed % 2 ? 128 : 37, k = 1 + static_cast<int>(seed % 8), rows = seed % 4 == 0 ? 1 : 24;
    const auto p = lynx_test::params(n, k, 1.5f, 2);
    const auto l = lynx_test::random_logits(rows, n, seed, 1.5f, seed % 3 == 0 ? 0.25f : 0.0f);
    std::vector<std::int8_t> q(static_cast<std::size_t>(rows) * n);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(lynx::histogram_bins(p)) * n), rank(n);
    auto pb = p;
    if (seed % 3 == 1) pb.alpha = 0.7f;
    ASSERT_EQ(lynx::host::affinity_bin(l.data(), n, rows, rows, pb, q.data()), lynx::status::success);
    if (seed % 3 == 2) {
      std::mt19937 rng(seed);
      for (auto& v : q) v = static_cast<std::int8_t>(-static_cast<int>(rng() % 3));
    }
    ASSERT_EQ(lynx::host::score_experts(q.data(), rows, p, counts.data(), rank.data()), lynx::status::success);
    const routed got = run(rows, k, [&](int* ids, float* w) {
      return lynx::host::remap_topk(l.data(), n, rows, rows, q.data(), rank.data(), p, ids, w);
    });
    const routed want = remap_by_definition(l, rows, q, rank, p);
    EXPECT_EQ(got, want) << "seed " << seed;
    if (seed % 3 == 0) {  // route's own bins: the trusted walk and the sparse-bin selection
      const routed fused = run(rows, k, [&](int* ids, float* w) { return lynx::host::route(l.data(), n, rows, rows, p, ids, w); });
      EXPECT_EQ(fused, want) << "route, seed " << seed;
    }
  }
}

TEST(HostPaths, HistogramCountsPastTheByteCarry) {
  // 700 rows: the byte counters carry into the counts twice (one cell reaches 700); beta 0
  // counts by scatter.
  for (const int beta : {2, 0}) {
    const int n = 40, rows = 700;
    const auto p = lynx_test::params(n, 3, 2.0f, beta);
    auto l = lynx_test::random_logits(rows, n, 11, 2.0f);
    for (int t = 0; t < rows; ++t) l[static_cast<std::size_t>(t) * n + 5] = 50.0f;  // 700 in one cell
    std::vector<std::int8_t> q(static_cast<std::size_t>(rows) * n);
    ASSERT_EQ(lynx::host::affinity_bin(l.data(), n, rows, rows, p, q.data()), lynx::status::success);
    const int nbins = lynx::histogram_bins(p);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(nbins) * n), rank(n), want(counts.size(), 0);
    ASSERT_EQ(lynx::host::score_experts(q.data(), rows, p, counts.data(), rank.data()), lynx::status::success);
    for (int t = 0; t < rows; ++t)
      for (int e = 0; e < n; ++e) ++want[static_cast<std::size_t>(-q[static_cast<std::size_t>(t) * n + e]) * n + e];
    EXPECT_EQ(counts, want) << "beta " << beta;
    for (int e = 0; e < n; ++e) EXPECT_EQ(rank[e], d::histogram_rank(counts.data(), n, nbins, e));
  }
}

TEST(HostPaths, Avx2AndPortableCodeAgreeBitwise) {
  if (!lynx::host::use_simd()) GTEST_SKIP() << "this CPU runs only the portable code";
  for (std::uint32_t seed = 0; seed < 12; ++seed) {
    const int n = std::vector<int>{8, 64, 128, 160, 300, 512}[seed % 6], k = std::min(n / 2, 2 + static_cast<int>(seed % 9));
    const int rows = 40;
    const auto l = adversarial_rows(rows, n, seed);
    for (const auto kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
      auto p = lynx::default_params(n, k);
      p.kind = kind;
      p.score = seed % 2 ? lynx::scoring::sigmoid : lynx::scoring::softmax;
      p.renormalize = seed % 4 < 2;
      routed both[2], plain[2];
      for (const bool simd : {true, false}) {
        lynx::host::use_simd() = simd;
        both[simd] = run(rows, k, [&](int* ids, float* w) { return lynx::host::route(l.data(), n, rows, rows - 3, p, ids, w); });
        plain[simd] = run(rows, k, [&](int* ids, float* w) { return lynx::host::topk_route(l.data(), n, rows, rows - 3, p, ids, w); });
      }
      lynx::host::use_simd() = true;
      EXPECT_EQ(both[0], both[1]) << "seed " << seed << " policy " << static_cast<int>(kind);
      EXPECT_EQ(plain[0], plain[1]) << "seed " << seed;
    }
  }
}

TEST(HostPaths, ExpIsMonotoneAcrossReductionSteps) {
  // budget_greedy takes each token's best shares inside K0 as the shares of its best logits;
  // that needs exp_f32 monotone. Checked over every float once (2.2e9 of them, offline); here
  // every float around each step of the range reduction, where a polynomial would break it,
  // the subnormal steps (n < -126) included.
  for (int n = -150; n <= 127; ++n) {
    const float edge = (static_cast<float>(n) - 0.5f) * 0.693147180559945f;
    float x = edge;
    for (int i = 0; i < 2000; ++i) x = std::nextafter(x, -inf);
    float prev = d::exp_f32(x);
    for (int i = 0; i < 4000; ++i) {
      x = std::nextafter(x, inf);
      const float v = d::exp_f32(x);
      ASSERT_GE(v, prev) << "at " << x;
      prev = v;
    }
  }
}

}  // namespace host_paths_tests
