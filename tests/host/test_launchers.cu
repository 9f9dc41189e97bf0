// Everything of the device launchers that runs on the host, checked without a GPU: workspace
// size queries with null data pointers (CUB's rule), the validation of every argument, the
// workspace carving, the expert tier dispatch and lynx::route's path choice. Nothing here
// launches a kernel, so it runs (in the host test binary) on any machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <lynx/lynx.cuh>

#include "../support/params.hpp"

namespace {

using lynx_test::params;
namespace d = lynx::detail;

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

lynx::route_params policy_params(int n, int k, lynx::policy kind) {
  auto p = lynx::default_params(n, k);
  p.kind = kind;
  p.keep_k = 1;
  return p;
}

const lynx::policy all_policies[] = {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget};

/// [start, start + bytes) of a carved region, for the overlap check.
struct region {
  std::uintptr_t start;
  std::size_t bytes;
};

template <class T>
region of(const T* p, std::size_t count) {
  return {reinterpret_cast<std::uintptr_t>(p), count * sizeof(T)};
}

/// Every nonempty region lies inside [base, base + bytes), starts 256-aligned, and overlaps
/// no other.
void expect_disjoint_and_aligned(std::vector<region> regions, const char* base, std::size_t bytes) {
  regions.erase(std::remove_if(regions.begin(), regions.end(), [](const region& r) { return r.bytes == 0; }),
                regions.end());
  std::sort(regions.begin(), regions.end(), [](const region& a, const region& b) { return a.start < b.start; });
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].start % d::workspace_alignment, 0u) << "region " << i;
    EXPECT_GE(regions[i].start, lo);
    EXPECT_LE(regions[i].start + regions[i].bytes, lo + bytes) << "region " << i;
    if (i > 0) EXPECT_GE(regions[i].start, regions[i - 1].start + regions[i - 1].bytes) << "region " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Size queries: null workspace and null data pointers, as the README shows.

TEST(Launchers, SizeQueriesNeedNoDataPointers) {
  for (const int n : {8, 64, 128, 160, 512, 1024})
    for (const int rows : {1, 16, 64, 512, 600})
      for (const auto kind : all_policies)
        for (const bool device_count : {false, true}) {
          const auto p = policy_params(n, std::min(8, n), kind);
          static const int fake_count = 0;  // never read by a size query
          const lynx::token_count valid = device_count ? lynx::token_count(&fake_count) : lynx::token_count(rows);
          std::size_t route_bytes = 0, topk_bytes = 0, remap_bytes = 0;
          ASSERT_EQ((lynx::route<float, int>(nullptr, route_bytes, nullptr, n, rows, valid, p, nullptr, nullptr)),
                    cudaSuccess)
              << "N " << n << " rows " << rows;
          ASSERT_EQ((lynx::topk_route<float, int>(nullptr, topk_bytes, nullptr, n, rows, valid, p,
                                                                   nullptr, nullptr)),
                    cudaSuccess);
          ASSERT_EQ((lynx::remap_topk<float, int>(nullptr, remap_bytes, nullptr, n, rows, valid, nullptr, nullptr, p,
                                                   nullptr, nullptr)),
                    cudaSuccess);
          // The sizes are the carved layouts plus the alignment slack.
          d::workspace_carver route_c(nullptr), topk_c(nullptr), remap_c(nullptr);
          d::route_workspace(route_c, rows, p);
          d::topk_workspace(topk_c, rows);
          d::remap_workspace(remap_c, rows, n, p.top_k, kind == lynx::policy::budget);
          EXPECT_EQ(route_bytes, route_c.used + d::workspace_alignment - 1);
          EXPECT_EQ(topk_bytes, topk_c.used + d::workspace_alignment - 1);
          EXPECT_EQ(remap_bytes, remap_c.used + d::workspace_alignment - 1);
          EXPECT_GE(route_bytes, remap_bytes);  // route's holds remap_topk's
        }
}

TEST(Launchers, TopOneRoutesAsPiggyback) {
  // With k = 1, route runs the default (budget, mass mode) and the anchored lynx policy as
  // piggyback with keep_k 1 (params.hpp, effective_params): its workspace is piggyback's (no bins,
  // counts or budget scratch; the grid state, without counts), and its decode path may be the
  // grid path, which the budget policy never takes. The unanchored lynx policy keeps its own.
  auto piggy = policy_params(128, 1, lynx::policy::piggyback);
  piggy.keep_k = 1;
  auto anchored = policy_params(128, 1, lynx::policy::lynx), unanchored = anchored;
  anchored.anchor_top1 = true;
  unanchored.anchor_top1 = false;
  const auto carved = [](const lynx::route_params& p, int rows) {
    d::workspace_carver c(nullptr);
    d::route_workspace(c, rows, p.num_experts, p.top_k, p.kind == lynx::policy::lynx, p.kind == lynx::policy::budget,
                       d::grid_route_tier(p) ? d::grid_state::size_words(p.num_experts, p.kind == lynx::policy::lynx
                                                                                        ? lynx::histogram_bins(p)
                                                                                        : 0)
                                             : 0);
    return c.required_bytes();
  };
  for (const int rows : {1, 16, 48, 512, 600}) {
    for (const auto& p : {lynx::default_params(128, 1), anchored, unanchored}) {
      std::size_t bytes = 0;
      ASSERT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 128, rows, rows, p, nullptr, nullptr)), cudaSuccess);
      const bool runs_as_piggyback = p.kind == lynx::policy::budget || p.anchor_top1;
      EXPECT_EQ(bytes, carved(runs_as_piggyback ? piggy : p, rows)) << "rows " << rows << " policy " << static_cast<int>(p.kind);
      EXPECT_NE(carved(piggy, rows), carved(p, rows)) << "rows " << rows;  // so the query tells them apart
      EXPECT_EQ(d::route_workspace::grid_bins(p), runs_as_piggyback ? 0 : lynx::histogram_bins(p));
    }
  }
  const auto p = lynx::effective_params(lynx::default_params(128, 1));
  EXPECT_TRUE(d::grid_route_wanted(p, 48, 128));
  EXPECT_FALSE(d::grid_route_wanted(lynx::default_params(128, 2), 48, 128));
}

TEST(Launchers, StageRemapTopOneRunsAsPiggyback) {
  // The stage launcher remap_topk runs effective_params too: at k = 1 the default policy
  // needs no budget scratch (its size query is piggyback's). A count limit of one expert can
  // drop a token's top-1, so that budget runs as given and carves its shares, top and kth.
  auto limited = lynx::default_params(128, 1);
  limited.budget_mass = 0.0f;
  limited.budget_experts = 1;
  ASSERT_EQ(lynx::check(limited, 16, 128, 16), lynx::status::success);
  for (const int rows : {1, 16, 600}) {
    const auto remap_bytes = [rows](const lynx::route_params& p) {
      std::size_t bytes = 0;
      EXPECT_EQ((lynx::remap_topk<float, int>(nullptr, bytes, nullptr, 128, rows, rows, nullptr, nullptr, p, nullptr,
                                              nullptr)),
                cudaSuccess);
      return bytes;
    };
    const auto carved = [rows](int k, bool budget) {
      d::workspace_carver c(nullptr);
      d::remap_workspace(c, rows, 128, k, budget);
      return c.required_bytes();
    };
    EXPECT_EQ(remap_bytes(lynx::default_params(128, 1)), carved(1, false)) << "rows " << rows;
    EXPECT_EQ(remap_bytes(limited), carved(1, true)) << "rows " << rows;
    EXPECT_NE(carved(1, false), carved(1, true));
    EXPECT_EQ(remap_bytes(lynx::default_params(128, 2)), carved(2, true)) << "rows " << rows;  // k = 2: as given
  }
}

TEST(Launchers, SizeQueriesStillCheckTheParameters) {
  std::size_t bytes = 12345;
  EXPECT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 8, 4, 4, params(8, 9), nullptr, nullptr)),
            cudaErrorInvalidValue);
  EXPECT_EQ((lynx::topk_route<float, int>(nullptr, bytes, nullptr, 7, 4, 4, params(8, 2), nullptr, nullptr)),
            cudaErrorInvalidValue);
  EXPECT_EQ((lynx::remap_topk<float, int>(nullptr, bytes, nullptr, 8, 4, 5, nullptr, nullptr, params(8, 2), nullptr,
                                          nullptr)),
            cudaErrorInvalidValue);
  EXPECT_EQ(bytes, 12345u);  // a rejected query reports nothing
}

// ---------------------------------------------------------------------------------------------
// Validation: every status is an error code, whatever the entry point; nothing is launched.

struct bad_case {
  const char* what;
  lynx::route_params p;
  std::int64_t stride;
  int rows, valid;
};

std::vector<bad_case> bad_cases() {
  const int n = 8;
  std::vector<bad_case> cases = {
      {"k > N", params(n, 9), n, 4, 4},
      {"k < 1", params(n, 0), n, 4, 4},
      {"k > max_top_k", params(64, 33), 64, 4, 4},
      {"N < 2", params(1, 1), 1, 4, 4},
      {"N > max_experts", params(lynx::max_experts + 1, 2), lynx::max_experts + 1, 4, 4},
      {"alpha <= 0", params(n, 2, 0.0f), n, 4, 4},
      {"alpha NaN", params(n, 2, std::numeric_limits<float>::quiet_NaN()), n, 4, 4},
      {"beta < 0", params(n, 2, 1.0f, -1), n, 4, 4},
      {"beta > max", params(n, 2, 1.0f, lynx::max_bin_depth + 1), n, 4, 4},
      {"stride < N", params(n, 2), n - 1, 4, 4},
      {"rows < 0", params(n, 2), n, -1, 0},
      {"rows > max_num_rows", params(n, 2), n, lynx::max_num_rows + 1, lynx::max_num_rows + 1},
      {"valid > rows", params(n, 2), n, 4, 5},
      {"valid < 0", params(n, 2), n, 4, -1},
  };
  auto sentinel = params(n, 2);
  sentinel.pad_with_sentinel = true;
  sentinel.sentinel_id = 3;
  cases.push_back({"sentinel inside [0, N)", sentinel, n, 4, 4});
  auto keep = params(n, 2);
  keep.kind = lynx::policy::piggyback;
  keep.keep_k = 3;
  cases.push_back({"keep_k > k", keep, n, 4, 4});
  auto budget = params(n, 2);
  budget.kind = lynx::policy::budget;
  cases.push_back({"budget without a limit", budget, n, 4, 4});
  budget.budget_experts = 1;
  cases.push_back({"budget below k", budget, n, 4, 4});
  budget.budget_mass = 0.9f;
  cases.push_back({"two budget limits", budget, n, 4, 4});
  for (const int score : {2, -1}) {  // an enum value out of range: the host and device would differ
    auto bad_score = params(n, 2);
    bad_score.score = static_cast<lynx::scoring>(score);
    cases.push_back({"score out of range", bad_score, n, 4, 4});
  }
  return cases;
}

TEST(Launchers, EveryInvalidArgumentIsRejectedBeforeAnyLaunch) {
  // Host buffers stand in for device memory: a rejected call never touches them.
  std::vector<float> logits(4 * 2048, 0.5f), weights(4 * 64, 42.0f);
  std::vector<int> ids(4 * 64, 42);
  std::vector<std::int8_t> bins(4 * 2048, 0);
  std::vector<std::int32_t> counts(32 * 2048), ranks(2048);
  std::vector<char> ws(1 << 22);
  for (const bad_case& c : bad_cases()) {
    EXPECT_NE(lynx::check(c.p, c.rows, c.stride, c.valid), lynx::status::success) << c.what;
    std::size_t bytes = ws.size();
    EXPECT_EQ(lynx::route(ws.data(), bytes, logits.data(), c.stride, c.rows, c.valid, c.p, ids.data(), weights.data()),
              cudaErrorInvalidValue)
        << c.what;
    EXPECT_EQ(lynx::topk_route(ws.data(), bytes, logits.data(), c.stride, c.rows, c.valid, c.p, ids.data(),
                               weights.data()),
              cudaErrorInvalidValue)
        << c.what;
    EXPECT_EQ(lynx::remap_topk(ws.data(), bytes, logits.data(), c.stride, c.rows, c.valid, bins.data(), ranks.data(),
                               c.p, ids.data(), weights.data()),
              cudaErrorInvalidValue)
        << c.what;
    EXPECT_EQ(lynx::affinity_bin(logits.data(), c.stride, c.rows, c.valid, c.p, bins.data()), cudaErrorInvalidValue)
        << c.what;
    if (c.stride == c.p.num_experts && c.valid == c.rows)  // score_experts has no stride or count
      EXPECT_EQ(lynx::score_experts(bins.data(), c.rows, c.p, counts.data(), ranks.data()), cudaErrorInvalidValue)
          << c.what;
  }
  for (const int x : ids) EXPECT_EQ(x, 42);
  for (const float x : weights) EXPECT_EQ(x, 42.0f);
}

TEST(Launchers, NullDataPointersAreRejectedWhenThereAreRows) {
  const int n = 16, rows = 4;
  const auto p = params(n, 2);
  std::vector<float> logits(rows * n), weights(rows * 2);
  std::vector<int> ids(rows * 2);
  std::vector<std::int8_t> bins(rows * n);
  std::vector<std::int32_t> counts(32 * n), ranks(n);
  std::vector<char> ws(1 << 20);
  std::size_t bytes = ws.size();
  const float* L = logits.data();
  const float* no_logits = nullptr;  // typed nulls, so that the templates deduce
  int* no_ids = nullptr;
  float* no_w = nullptr;
  const std::int8_t* no_bins = nullptr;
  const std::int32_t* no_ranks = nullptr;
  EXPECT_EQ(lynx::route(ws.data(), bytes, no_logits, n, rows, rows, p, ids.data(), weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::route(ws.data(), bytes, L, n, rows, rows, p, no_ids, weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::route(ws.data(), bytes, L, n, rows, rows, p, ids.data(), no_w),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::topk_route(ws.data(), bytes, L, n, rows, rows, p, no_ids, weights.data()),
            cudaErrorInvalidValue);
  // remap_topk needs bins and ranks for the lynx policy only.
  EXPECT_EQ(lynx::remap_topk(ws.data(), bytes, L, n, rows, rows, no_bins, ranks.data(), p, ids.data(),
                                         weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::remap_topk(ws.data(), bytes, L, n, rows, rows, bins.data(), no_ranks, p, ids.data(),
                                         weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::affinity_bin(no_logits, n, rows, rows, p, bins.data()), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::affinity_bin(L, n, rows, rows, p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::score_experts(nullptr, rows, p, counts.data(), ranks.data()), cudaErrorInvalidValue);
  // score_experts' outputs are per expert: required even without rows.
  EXPECT_EQ(lynx::score_experts(bins.data(), 0, p, nullptr, ranks.data()), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::score_experts(bins.data(), 0, p, counts.data(), nullptr), cudaErrorInvalidValue);
  // A device-side count may be anything, so the data pointers are required with it.
  static const int fake_count = 0;
  EXPECT_EQ(lynx::route(ws.data(), bytes, no_logits, n, rows, &fake_count, p, ids.data(), weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::topk_route(ws.data(), bytes, no_logits, n, rows, &fake_count, p, ids.data(), weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::topk_route(ws.data(), bytes, L, n, rows, &fake_count, p, ids.data(), no_w), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::remap_topk(ws.data(), bytes, L, n, rows, &fake_count, no_bins, ranks.data(), p, ids.data(),
                             weights.data()),
            cudaErrorInvalidValue);
  EXPECT_EQ(lynx::affinity_bin(no_logits, n, rows, &fake_count, p, bins.data()), cudaErrorInvalidValue);
}

TEST(Launchers, NullTokenCountPointerIsRejectedWhenThereAreRows) {
  // A count given by a null pointer is not B = 0: an engine whose count buffer was never set
  // would keep stale ids in every replay. Rejected in any call with rows, before any write;
  // a size query (no data pointer looked at) and a call without rows take it.
  const int n = 16, k = 2, rows = 4;
  std::vector<float> logits(rows * n, 0.5f), weights(rows * k, 42.0f);
  std::vector<int> ids(rows * k, 42);
  std::vector<std::int8_t> bins(rows * n, 7);
  std::vector<std::int32_t> ranks(n);
  std::vector<char> ws(1 << 20, 'x');
  std::int32_t word = 42;
  lynx::sorted_layout_ref layout;
  layout.num_active = &word;
  const lynx::token_count no_count(static_cast<const int*>(nullptr));
  EXPECT_TRUE(no_count.by_pointer);
  for (const auto kind : all_policies) {
    const auto p = policy_params(n, k, kind);
    EXPECT_EQ(lynx::check(p, rows, n, no_count), lynx::status::success) << "the shapes alone are fine";
    EXPECT_EQ(lynx::check(p, rows, n, no_count, {logits.data()}), lynx::status::null_pointer);
    std::size_t bytes = 0;
    ASSERT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, n, rows, no_count, p, nullptr, nullptr)), cudaSuccess);
    ASSERT_LE(bytes, ws.size());
    const lynx::batch_ref<float, int> b{logits.data(), n, rows, no_count, ids.data(), weights.data()};
    EXPECT_EQ(lynx::route(ws.data(), bytes, b, p), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::route(ws.data(), bytes, b, p, layout), cudaErrorInvalidValue);
    bytes = ws.size();
    EXPECT_EQ(lynx::topk_route(ws.data(), bytes, b, p), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::topk_route(ws.data(), bytes, b, p, layout), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::remap_topk(ws.data(), bytes, b, bins.data(), ranks.data(), p), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::affinity_bin(logits.data(), n, rows, no_count, p, bins.data()), cudaErrorInvalidValue);
    // Without rows there is nothing to read: success, nothing launched.
    const lynx::batch_ref<float, int> none{logits.data(), n, 0, no_count, ids.data(), weights.data()};
    EXPECT_EQ(lynx::route(ws.data(), bytes, none, p), cudaSuccess);
    EXPECT_EQ(lynx::topk_route(ws.data(), bytes, none, p), cudaSuccess);
  }
  for (const int x : ids) EXPECT_EQ(x, 42);
  for (const float x : weights) EXPECT_EQ(x, 42.0f);
  for (const std::int8_t x : bins) EXPECT_EQ(x, 7);
  EXPECT_EQ(word, 42);
  EXPECT_EQ(std::count(ws.begin(), ws.end(), 'x'), static_cast<std::ptrdiff_t>(ws.size()));
}

TEST(Launchers, WorkspaceQueriedForMoreRowsHoldsFewer) {
  // The README queries at max_tokens and calls with T <= max_tokens: every launcher's size
  // grows with the rows. (route's grid state was reserved only up to fused_max_rows rows, so a
  // query at 513 rows was 1 KB to 66 KB smaller than a call at 512 needs.)
  std::vector<lynx::route_params> cases;
  for (const auto& pr : lynx::presets)
    for (const auto kind : all_policies) {
      auto p = lynx::params_from(pr, false);
      p.kind = kind;
      p.keep_k = 1;
      if (kind == lynx::policy::budget) p.budget_mass = 0.94f;
      cases.push_back(p);
    }
  for (const int n : {8, 160, 512, 1024})
    for (const int beta : {0, 2})
      for (const auto kind : all_policies) {
        auto p = policy_params(n, std::min(8, n), kind);
        p.beta = beta;
        cases.push_back(p);
      }
  const auto route_bytes = [](const lynx::route_params& p, int rows) {
    std::size_t b = 0;
    EXPECT_EQ((lynx::route<float, int>(nullptr, b, nullptr, p.num_experts, rows, rows, p, nullptr, nullptr)),
              cudaSuccess);
    return b;
  };
  for (const auto& p : cases) {
    ASSERT_EQ(lynx::check(p), lynx::status::success);
    std::size_t route_last = 0, topk_last = 0, remap_last = 0;
    for (int rows = 0; rows <= 1100; ++rows) {
      const int n = p.num_experts;
      std::size_t topk = 0, remap = 0;
      const std::size_t route = route_bytes(p, rows);
      ASSERT_EQ((lynx::topk_route<float, int>(nullptr, topk, nullptr, n, rows, rows, p, nullptr, nullptr)),
                cudaSuccess);
      ASSERT_EQ((lynx::remap_topk<float, int>(nullptr, remap, nullptr, n, rows, rows, nullptr, nullptr, p, nullptr,
                                              nullptr)),
                cudaSuccess);
      ASSERT_GE(route, route_last) << "N " << n << " k " << p.top_k << " policy " << static_cast<int>(p.kind)
                                   << " beta " << p.beta << " rows " << rows;
      ASSERT_GE(topk, topk_last) << rows;
      ASSERT_GE(remap, remap_last) << rows;
      route_last = route, topk_last = topk, remap_last = remap;
    }
    // The README's case as the launcher checks it: the carve of a smaller call fits the larger
    // query at any alignment.
    const std::size_t query = route_bytes(p, 513);
    std::vector<char> buffer(query);
    for (const int rows : {512, 100, 1})
      for (const std::size_t offset : {0, 1, 255}) {
        d::workspace_carver c(buffer.data() + offset);
        d::route_workspace(c, rows, p);
        EXPECT_TRUE(c.fits(query - offset)) << "rows " << rows << " offset " << offset;
      }
  }
}

TEST(Launchers, TooSmallWorkspaceIsRejected) {
  const int n = 64, rows = 16;
  std::vector<float> logits(rows * n), weights(rows * 6);
  std::vector<int> ids(rows * 6);
  for (const auto kind : all_policies) {
    const auto p = policy_params(n, 6, kind);
    std::size_t need = 0;
    ASSERT_EQ((lynx::route<float, int>(nullptr, need, nullptr, n, rows, rows, p, nullptr, nullptr)), cudaSuccess);
    // Whatever the buffer's alignment, the reported size is enough.
    std::vector<char> ws(need + 300);
    for (std::size_t offset = 0; offset < 300; ++offset) {
      d::workspace_carver c(ws.data() + offset);
      d::route_workspace(c, rows, p);
      ASSERT_TRUE(c.fits(need)) << "offset " << offset;
      ASSERT_FALSE(c.fits(c.skip + c.used - 1)) << "offset " << offset;
    }
    std::size_t small = 16;
    EXPECT_EQ(lynx::route(ws.data(), small, logits.data(), n, rows, rows, p, ids.data(), weights.data()),
              cudaErrorInvalidValue);
    small = 16;
    EXPECT_EQ(lynx::topk_route(ws.data(), small, logits.data(), n, rows, rows, p, ids.data(), weights.data()),
              cudaErrorInvalidValue);
    EXPECT_EQ((lynx::remap_topk<float, int>(ws.data(), small, logits.data(), n, rows, rows, nullptr, nullptr, p,
                                            ids.data(), weights.data())),
              cudaErrorInvalidValue);
  }
}

TEST(Launchers, ZeroRowsOrZeroValidTokensSucceedWithoutLaunching) {
  // No launch is attempted: on a machine without a GPU any launch would return an error.
  const int n = 16;
  const auto p = params(n, 2);
  std::vector<char> ws(1 << 16);
  for (const auto& [rows, valid] : {std::pair{0, 0}, std::pair{4, 0}}) {
    std::size_t bytes = ws.size();
    EXPECT_EQ((lynx::route<float, int>(ws.data(), bytes, nullptr, n, rows, valid, p, nullptr, nullptr)), cudaSuccess);
    EXPECT_EQ((lynx::topk_route<float, int>(ws.data(), bytes, nullptr, n, rows, valid, p, nullptr, nullptr)),
              cudaSuccess);
    EXPECT_EQ((lynx::remap_topk<float, int>(ws.data(), bytes, nullptr, n, rows, valid, nullptr, nullptr, p, nullptr,
                                            nullptr)),
              cudaSuccess);
    EXPECT_EQ(lynx::affinity_bin<float>(nullptr, n, rows, valid, p, nullptr), cudaSuccess);
  }
}

TEST(Launchers, ValidCallsGetPastTheHostChecks) {
  // Without a GPU, a valid call reaches the CUDA runtime, which then fails: not with
  // cudaErrorInvalidValue (the launchers' own rejection) and not with success.
  if (has_device()) GTEST_SKIP() << "a device is present: the device tests run these calls for real";
  const int n = 64, rows = 16;
  std::vector<float> logits(rows * n), weights(rows * 6);
  std::vector<int> ids(rows * 6);
  std::vector<std::int8_t> bins(rows * n);
  std::vector<std::int32_t> counts(32 * n), ranks(n);
  std::vector<char> ws(1 << 20);
  for (const auto kind : all_policies) {
    const auto p = policy_params(n, 6, kind);
    for (const int r : {rows, 600}) {
      std::vector<float> big(static_cast<std::size_t>(r) * n);
      std::vector<int> big_ids(static_cast<std::size_t>(r) * 6);
      std::vector<float> big_w(big_ids.size());
      std::size_t bytes = ws.size();
      const cudaError_t e = lynx::route(ws.data(), bytes, big.data(), n, r, r, p, big_ids.data(), big_w.data());
      EXPECT_NE(e, cudaSuccess);
      EXPECT_NE(e, cudaErrorInvalidValue) << cudaGetErrorString(e);
    }
  }
  std::size_t bytes = ws.size();
  const auto p = params(n, 6);
  for (const cudaError_t e :
       {lynx::topk_route(ws.data(), bytes, logits.data(), n, rows, rows, p, ids.data(), weights.data()),
        lynx::remap_topk(ws.data(), bytes, logits.data(), n, rows, rows, bins.data(), ranks.data(), p, ids.data(),
                         weights.data()),
        lynx::affinity_bin(logits.data(), n, rows, rows, p, bins.data()),
        lynx::score_experts(bins.data(), rows, p, counts.data(), ranks.data())}) {
    EXPECT_NE(e, cudaSuccess);
    EXPECT_NE(e, cudaErrorInvalidValue) << cudaGetErrorString(e);
  }
  cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// The sorted layout's host side: validation, the size query, and which calls launch.

TEST(Launchers, SortedLayoutIsCheckedBeforeAnyLaunch) {
  const int n = 64, k = 6, rows = 16;
  const auto p = params(n, k);
  std::int32_t word = 0;
  lynx::sorted_layout_ref good;
  good.block_size = 16, good.sorted_token_ids = &word, good.num_active = &word;
  lynx::sorted_layout_ref no_block = good;
  no_block.block_size = 0;
  const lynx::batch_ref<float, int> query{nullptr, n, rows, rows, nullptr, nullptr};
  std::size_t plain_bytes = 0, bytes = 0;
  ASSERT_EQ(lynx::route(nullptr, plain_bytes, query, p), cudaSuccess);
  EXPECT_EQ(lynx::route(nullptr, bytes, query, p, good), cudaSuccess);
  EXPECT_EQ(bytes, plain_bytes) << "the layout needs no workspace";
  EXPECT_EQ(lynx::topk_route(nullptr, bytes, query, p, good), cudaSuccess);
  for (const auto& bad : {no_block}) {
    EXPECT_EQ(lynx::route(nullptr, bytes, query, p, bad), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::topk_route(nullptr, bytes, query, p, bad), cudaErrorInvalidValue);
    EXPECT_EQ(lynx::sorted_layout(&word, rows, k, n, bad), cudaErrorInvalidValue);
  }
  auto huge = good;
  huge.block_size = 1 << 21;
  EXPECT_EQ(lynx::sorted_layout(&word, rows, k, n, huge), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(&word, 1 << 28, 16, n, good), cudaErrorInvalidValue) << "slots past int32";
  EXPECT_EQ(lynx::sorted_layout(&word, rows, k, 0, good), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(&word, rows, k, lynx::max_experts + 1, good), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(&word, rows, 0, n, good), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(&word, rows, lynx::max_top_k + 1, n, good), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(&word, -1, k, n, good), cudaErrorInvalidValue);
  EXPECT_EQ(lynx::sorted_layout(static_cast<const int*>(nullptr), rows, k, n, good), cudaErrorInvalidValue);
  // Nothing asked for: nothing to launch, on any machine.
  EXPECT_EQ(lynx::sorted_layout(&word, rows, k, n, lynx::sorted_layout_ref{}), cudaSuccess);
  EXPECT_EQ(word, 0) << "nothing was written";
}

TEST(Launchers, EveryLauncherTakesAModelRouterButStagedLynxBins) {
  auto p = params(64, 4);
  p.router.num_groups = 8, p.router.top_groups = 2, p.router.scaling = 2.5f;
  const auto plain = params(64, 4);
  // route and topk_route take the router with every policy; their workspace is the plain one's.
  for (const lynx::policy kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
    auto q = p, r = plain;
    q.kind = r.kind = kind;
    q.keep_k = r.keep_k = 2;
    q.budget_mass = r.budget_mass = kind == lynx::policy::budget ? 0.9f : 0.0f;
    q.router.relaxed_groups = kind == lynx::policy::piggyback;
    for (const int rows : {1, 64, 700}) {  // the fused path and the per-stage path
      std::size_t bytes = 0, plain_bytes = 0;
      EXPECT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 64, rows, rows, q, nullptr, nullptr)), cudaSuccess)
          << int(kind) << " rows " << rows;
      EXPECT_EQ((lynx::route<float, int>(nullptr, plain_bytes, nullptr, 64, rows, rows, r, nullptr, nullptr)),
                cudaSuccess);
      EXPECT_EQ(bytes, plain_bytes) << int(kind) << " rows " << rows;
      EXPECT_GT(bytes, 0u);
    }
    // remap_topk's lynx policy reads affinity_bin's bins (of the logits): it refuses a router.
    std::size_t bytes = 0;
    EXPECT_EQ((lynx::remap_topk<float, int>(nullptr, bytes, nullptr, 64, 4, 4, nullptr, nullptr, q, nullptr, nullptr)),
              kind == lynx::policy::lynx ? cudaErrorInvalidValue : cudaSuccess)
        << int(kind);
  }
  std::size_t bytes = 0;
  EXPECT_EQ((lynx::topk_route<float, int>(nullptr, bytes, nullptr, 64, 4, 4, p, nullptr, nullptr)), cudaSuccess);
  // A bad router: every launcher refuses it.
  p.router.num_groups = 6;  // does not divide 64
  EXPECT_EQ((lynx::topk_route<float, int>(nullptr, bytes, nullptr, 64, 4, 4, p, nullptr, nullptr)), cudaErrorInvalidValue);
  EXPECT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 64, 4, 4, p, nullptr, nullptr)), cudaErrorInvalidValue);
  p.router.num_groups = 8, p.router.top_groups = 1;  // one group of 8 holds at least k = 4
  EXPECT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 64, 4, 4, p, nullptr, nullptr)), cudaSuccess);
  p.router.num_groups = 32;  // groups of 2: one group cannot hold k = 4
  EXPECT_EQ((lynx::route<float, int>(nullptr, bytes, nullptr, 64, 4, 4, p, nullptr, nullptr)), cudaErrorInvalidValue);
}

TEST(Launchers, SortedLayoutCallsLaunchEvenWithoutTokens) {
  // B = 0 routes nothing but still writes the (empty) layout: that takes a launch, which fails
  // without a GPU with the runtime's error, not the launchers' own rejection.
  if (has_device()) GTEST_SKIP() << "a device is present: the device tests run these calls for real";
  const int n = 64, k = 6, rows = 16;
  const auto p = params(n, k);
  std::int32_t word = 0;
  lynx::sorted_layout_ref layout;
  layout.num_active = &word;
  std::vector<char> ws(1 << 20);
  std::size_t bytes = ws.size();
  const lynx::batch_ref<float, int> empty{nullptr, n, rows, 0, nullptr, nullptr};
  for (const cudaError_t e : {lynx::route(ws.data(), bytes, empty, p, layout),
                              lynx::topk_route(ws.data(), bytes, empty, p, layout),
                              lynx::sorted_layout(&word, rows, k, n, layout)}) {
    EXPECT_NE(e, cudaSuccess);
    EXPECT_NE(e, cudaErrorInvalidValue) << cudaGetErrorString(e);
  }
  cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Workspace carving, tiers and the path choice.

TEST(Launchers, WorkspaceRegionsAreAlignedDisjointAndLargeEnough) {
  for (const int n : {8, 64, 160, 1024})
    for (const int rows : {1, 33, 700})
      for (const auto kind : all_policies)
        for (const std::size_t misalign : {0, 1, 100}) {
          const int k = std::min(8, n);
          const bool lynx_policy = kind == lynx::policy::lynx, budget = kind == lynx::policy::budget;
          const auto p = policy_params(n, k, kind);
          d::workspace_carver measure(nullptr);
          d::route_workspace(measure, rows, p);
          std::vector<char> buffer(measure.required_bytes() + misalign);
          char* base = buffer.data() + misalign;
          d::workspace_carver c(base);
          const d::route_workspace ws(c, rows, p);
          ASSERT_TRUE(c.fits(measure.required_bytes()));
          const std::size_t rn = static_cast<std::size_t>(rows) * n, rk = static_cast<std::size_t>(rows) * k;
          // What the kernels index in each region (detail/device/kernels.cuh, the launchers).
          std::vector<region> regions = {of(ws.remap.sets, 4 * d::set_words), of(ws.remap.votes, rows),
                                         of(ws.remap.row_mass, rows), of(ws.remap.plain, rk)};
          if (lynx_policy) {
            regions.push_back(of(ws.bins, rn));
            regions.push_back(of(ws.counts, static_cast<std::size_t>(lynx::max_bins) * n));
            regions.push_back(of(ws.ranks, n));
          }
          if (budget) {
            regions.push_back(of(ws.remap.share, rn));
            regions.push_back(of(ws.remap.top, rk));
            regions.push_back(of(ws.remap.kth, rows));
          }
          // The grid path's state: where the policy and tier allow it at some row count (any router
          // and any rows: the workspace depends on neither, so a larger query holds a smaller
          // call), and only there.
          const bool grid = d::grid_route_tier(p);
          EXPECT_EQ(grid, !budget && n <= d::fused_max_experts);
          EXPECT_EQ(ws.grid.words != nullptr, grid);
          if (grid) {
            const std::size_t words = d::grid_state::size_words(n, lynx_policy ? d::bin_depth(p.beta) + 1 : 0);
            regions.push_back(of(ws.grid.words, words));
            EXPECT_EQ(reinterpret_cast<std::uint32_t*>(ws.grid.counts() + (lynx_policy ? (d::bin_depth(p.beta) + 1) * n : 0)),
                      ws.grid.words + words);
          }
          expect_disjoint_and_aligned(regions, base, measure.required_bytes());
          EXPECT_EQ(ws.remap.plain_set(), ws.remap.sets + d::set_words);
          EXPECT_EQ(ws.remap.anchors(), ws.remap.sets + 3 * d::set_words);
          d::workspace_carver tc(base);
          const d::topk_workspace tws(tc, rows);
          expect_disjoint_and_aligned({of(tws.state, d::set_words + 1), of(tws.votes, rows)}, base,
                                      measure.required_bytes());
        }
}

TEST(Launchers, TierDispatch) {
  // Every tier holds its shapes; the cheapest one that does is chosen; dispatch_tier reaches it.
  const auto bounds_of = [](int i) {
    return d::dispatch_tier(i, [](auto n, auto k) { return std::pair{decltype(n)::value, decltype(k)::value}; });
  };
  for (int i = 0; i < d::num_tiers; ++i) {
    EXPECT_EQ(bounds_of(i), (std::pair{d::tiers[i].max_n, d::tiers[i].max_k})) << "tier " << i;
    if (d::tiers[i].max_n <= d::fused_max_experts) {
      const auto fused = d::dispatch_tier<d::fused_max_experts>(
          i, [](auto n, auto k) { return std::pair{decltype(n)::value, decltype(k)::value}; });
      EXPECT_EQ(fused, bounds_of(i)) << "tier " << i;
    } else {  // not instantiated there: f is not called, the refusal comes back
      bool called = false;
      const auto refused = d::dispatch_tier<d::fused_max_experts>(
          i, [&](auto, auto) { called = true; return cudaSuccess; }, cudaErrorInvalidValue);
      EXPECT_EQ(refused, cudaErrorInvalidValue) << "tier " << i;
      EXPECT_FALSE(called) << "tier " << i;
    }
  }
  for (int n = 2; n <= lynx::max_experts; n += (n < 160 ? 1 : 29))
    for (int k = 1; k <= std::min(n, lynx::max_top_k); ++k) {
      const int i = d::choose_tier(n, k);
      ASSERT_GE(d::tiers[i].max_n, n) << "N " << n << " k " << k;
      ASSERT_GE(d::tiers[i].max_k, k) << "N " << n << " k " << k;
      for (int j = 0; j < i; ++j)  // no cheaper tier holds it
        ASSERT_FALSE(d::tiers[j].max_n >= n && d::tiers[j].max_k >= k) << "N " << n << " k " << k;
    }
  // The model shapes of bench/bench_shapes.hpp and the SPEC families get a tier of their own
  // size, not the generic one (which may use the stack).
  const std::pair<int, int> shapes[] = {{8, 2},    {64, 8},  {64, 6},  {128, 8}, {128, 4}, {160, 6},
                                        {256, 8},  {512, 10}, {16, 1}, {128, 1}, {384, 8}, {160, 8}, {60, 4}};
  for (const auto& [n, k] : shapes) EXPECT_NE(d::choose_tier(n, k), d::generic_tier) << "N " << n << " k " << k;
  EXPECT_EQ(d::tiers[d::choose_tier(64, 6)].max_k, 8);
  EXPECT_EQ(d::tiers[d::choose_tier(160, 6)].max_n, 256);
  EXPECT_EQ(d::choose_tier(1024, 8), d::generic_tier);
  EXPECT_EQ(d::choose_tier(128, 17), d::generic_tier);
}

TEST(Launchers, RoutePathChoice) {
  using d::route_path;
  EXPECT_EQ(d::choose_route_path(1, 8, 2), route_path::fused);
  EXPECT_EQ(d::choose_route_path(512, 512, 16), route_path::fused);
  EXPECT_EQ(d::choose_route_path(513, 64, 8), route_path::stages);
  EXPECT_EQ(d::choose_route_path(64, 513, 8), route_path::stages);
  EXPECT_EQ(d::choose_route_path(64, 1024, 8), route_path::stages);
  EXPECT_EQ(d::choose_route_path(64, 128, 17), route_path::stages);  // only the generic tier holds k > 16
  EXPECT_EQ(d::fused_threads(128), 1024);
  EXPECT_EQ(d::fused_threads(256), 512);
  EXPECT_EQ(d::fused_threads(512), 512);
  EXPECT_EQ(d::fused_threads(128, true), 512);  // a model router's calls: its row beside the logits
  EXPECT_EQ(d::fused_threads(256, true), 512);
  EXPECT_EQ(d::fused_threads(512, true), 256);
  EXPECT_EQ(d::warp_row_blocks(1), 1);
  EXPECT_EQ(d::warp_row_blocks(8), 1);
  EXPECT_EQ(d::warp_row_blocks(9), 2);
  EXPECT_EQ(d::warp_row_blocks(700), 88);
}

TEST(Launchers, TopkRouteZeroesItsStateOnlyAboveOneBlock) {
  // Up to 8 rows topk_route is one launch: its kernel keeps the plain set in shared memory and
  // counts no blocks, so no memset comes first (an engine's own top-k is one kernel too).
  for (const int rows : {1, 2, 7, 8}) EXPECT_FALSE(d::topk_route_zeroes_state(rows)) << "rows " << rows;
  for (const int rows : {9, 16, 64, 100000}) EXPECT_TRUE(d::topk_route_zeroes_state(rows)) << "rows " << rows;
  EXPECT_EQ(d::warp_row_blocks(8), 1);
  EXPECT_EQ(d::warp_row_blocks(9), 2);
}

TEST(Launchers, DecodePathChoice) {
  // The grid path: the lynx and piggyback policies on a plain router, at decode sizes, when
  // every block (8 rows each) fits on the device at once; else the fused one-block path.
  using d::route_path;
  for (const auto kind : all_policies)
    for (const int rows : {1, 8, 9, 64, 512}) {
      const auto p = policy_params(128, 8, kind);
      const bool policy_ok = kind != lynx::policy::budget;
      const int blocks = d::warp_row_blocks(rows);
      EXPECT_EQ(d::choose_decode_path(p, rows, blocks), policy_ok ? route_path::grid : route_path::fused)
          << "rows " << rows;
      EXPECT_EQ(d::choose_decode_path(p, rows, blocks - 1), route_path::fused) << "rows " << rows;
      EXPECT_EQ(d::choose_decode_path(p, rows, 0), route_path::fused);  // the device could not be asked
    }
  auto p = policy_params(128, 8, lynx::policy::lynx);
  EXPECT_EQ(d::choose_decode_path(p, 513, 1000), route_path::fused);  // not decode sizes
  EXPECT_EQ(d::choose_decode_path(policy_params(1024, 8, lynx::policy::lynx), 16, 1000), route_path::fused);
  EXPECT_EQ(d::choose_decode_path(policy_params(512, 16, lynx::policy::lynx), 16, 1000), route_path::grid);
  p.router.num_groups = 8;  // a model router stays on the fused path
  p.router.top_groups = 4;
  ASSERT_FALSE(p.router.plain());
  EXPECT_EQ(d::choose_decode_path(p, 16, 1000), route_path::fused);
  // Without a device, route's occupancy query says 0: the fused path, whose launch reports the
  // missing device.
  if (!has_device()) {
    EXPECT_EQ((d::grid_route_resident_blocks<128, 8>()), 0);
    EXPECT_EQ((d::grid_route_resident_blocks<128, 8>()), 0);  // a failed query is not kept as an answer
  }
}

TEST(Launchers, GridPathWanted) {
  // route's own choice: LYNX_GRID_ROUTE 0 never, 1 wherever the policy allows it, unset (-1)
  // once the rows outnumber the fused block's warps (32 up to 128 experts, 16 above): the
  // crossover measured on an H200.
  EXPECT_EQ(d::grid_route_mode, -1);  // this build leaves it unset
  for (const auto kind : all_policies)
    for (const int n : {8, 128, 160, 256, 512}) {
      const auto p = policy_params(n, 8, kind);
      const int max_n = d::tiers[d::choose_tier(n, 8)].max_n, warps = d::fused_threads(max_n) / 32;
      const bool policy_ok = kind != lynx::policy::budget;
      EXPECT_EQ(warps, n <= 128 ? 32 : 16);
      for (const int rows : {1, warps, warps + 1, 64, 512}) {
        EXPECT_FALSE(d::grid_route_wanted(p, rows, max_n, 0));
        EXPECT_EQ(d::grid_route_wanted(p, rows, max_n, 1), policy_ok) << "n " << n << " rows " << rows;
        EXPECT_EQ(d::grid_route_wanted(p, rows, max_n), policy_ok && rows > warps) << "n " << n << " rows " << rows;
      }
      EXPECT_FALSE(d::grid_route_wanted(p, 513, max_n, 1));  // beyond decode sizes: the stage path
    }
  auto p = policy_params(128, 8, lynx::policy::lynx);
  p.router.num_groups = 8;  // a model router stays on the fused path
  p.router.top_groups = 4;
  EXPECT_FALSE(d::grid_route_wanted(p, 64, 128, 1));
  EXPECT_FALSE(d::grid_route_wanted(p, 64, 128));
}

TEST(Launchers, DecodeRowsAreTheValidRowsTheHostKnows) {
  // A host count B decides route's own choice (padding past B is no warp's work on the fused
  // path: 64 rows with 1 or 20 valid stay on it at 128 experts); a device count cannot be read
  // here, so all the rows decide.
  EXPECT_EQ(d::decode_rows(64, 1), 1);
  EXPECT_EQ(d::decode_rows(64, 20), 20);
  EXPECT_EQ(d::decode_rows(64, 100), 64);
  EXPECT_EQ(d::decode_rows(64, -3), 0);
  const int* not_read = reinterpret_cast<const int*>(16);  // never dereferenced on the host
  EXPECT_EQ(d::decode_rows(64, lynx::token_count(not_read)), 64);
  const auto p = policy_params(128, 8, lynx::policy::lynx);
  EXPECT_FALSE(d::grid_route_wanted(p, d::decode_rows(64, 20), 128));
  EXPECT_TRUE(d::grid_route_wanted(p, d::decode_rows(64, 33), 128));
  EXPECT_TRUE(d::grid_route_wanted(p, d::decode_rows(64, lynx::token_count(not_read)), 128));
}

TEST(Launchers, GridStateLayout) {
  // Two counters, then the three sets, then nbins x n counts: one memset zeroes them all.
  std::vector<std::uint32_t> words(d::grid_state::size_words(160, 3));
  const d::grid_state g{words.data()};
  EXPECT_EQ(words.size(), 2u + 3u * d::set_words + 3u * 160u);
  EXPECT_EQ(g.arrived(), words.data());
  EXPECT_EQ(g.done(), words.data() + 1);
  EXPECT_EQ(g.active(), words.data() + 2);
  EXPECT_EQ(g.plain_set(), g.active() + d::set_words);
  EXPECT_EQ(g.final_set(), g.plain_set() + d::set_words);
  EXPECT_EQ(reinterpret_cast<std::uint32_t*>(g.counts()), g.final_set() + d::set_words);
  EXPECT_EQ(d::route_workspace::grid_bins(policy_params(64, 8, lynx::policy::piggyback)), 0);
}

}  // namespace

TEST(Launchers, ForcedGridPathRefusesBeforeAnyLaunch) {
  // route_with(grid) refuses on the host, before any launch or memset, what the grid path does
  // not take: the budget policy, a model router, more rows than decode sizes.
  const int n = 64, k = 4;
  auto router = policy_params(n, k, lynx::policy::lynx);
  router.router.num_groups = 8, router.router.top_groups = 2;
  const struct {
    lynx::route_params p;
    int rows;
  } refused[] = {{policy_params(n, k, lynx::policy::budget), 16}, {router, 16},
                 {policy_params(n, k, lynx::policy::lynx), d::fused_max_rows + 1}};
  for (const auto& c : refused) {
    std::vector<float> logits(static_cast<std::size_t>(c.rows) * n), weights(static_cast<std::size_t>(c.rows) * k);
    std::vector<int> ids(weights.size());
    const lynx::batch_ref<float, int> batch{logits.data(), n, c.rows, c.rows, ids.data(), weights.data()};
    std::size_t bytes = 0;
    ASSERT_EQ(d::route_with(d::decode_choice::grid, nullptr, bytes, batch, c.p, lynx::sorted_layout_ref{}, cudaStream_t{}),
              cudaSuccess);  // the size query still answers
    std::vector<char> ws(bytes);
    EXPECT_EQ(d::route_with(d::decode_choice::grid, ws.data(), bytes, batch, c.p, lynx::sorted_layout_ref{}, cudaStream_t{}),
              cudaErrorNotSupported)
        << "kind " << int(c.p.kind) << " rows " << c.rows;
  }
}
