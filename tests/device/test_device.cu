// The device launchers against the host path (SPEC §5: ids bitwise, weights to 2e-6),
// for every logits type, id type and expert tier, including CUDA graph capture and replay
// with a changed device-side token count. Skips when no CUDA device is present; the graph
// test skips where the runtime has no graph API (a simulator). A failed call fails its test
// only: helpers assert, and their callers stop on a fatal failure (ASSERT_NO_FATAL_FAILURE).
#include <gtest/gtest.h>

#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <utility>
#include <cstring>
#include <vector>

#include <lynx/lynx.cuh>

#include "../support/params.hpp"
#include "../support/device.hpp"
#include "../support/device_vectors.hpp"
#include "../support/random_logits.hpp"
#include "../support/reference.hpp"

namespace {

using lynx_test::params;

template <class T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> out;
  for (float x : v) {
    if constexpr (std::is_same_v<T, float>) out.push_back(x);
    else if constexpr (std::is_same_v<T, __half>) out.push_back(__float2half(x));
    else out.push_back(__float2bfloat16(x));
  }
  return out;
}

using lynx_test::to_device;
using lynx_test::to_host;

void expect_weights_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6f * std::fabs(want[i]) + 1e-37f) << what << " at " << i;
}

/// lynx::route on the device for host data: upload, workspace, launch, sync, download.
/// `pinned`, if set, must already point to device memory. Call it inside
/// ASSERT_NO_FATAL_FAILURE: on a failed call, ids and weights are left empty.
/// With decode_choice::grid the call takes the grid path (lynx::detail::route_with), whatever
/// LYNX_GRID_ROUTE says; where it cannot (the device holds too few blocks at once) the test skips.
/// decode_choice::fused forces the one-block path.
template <class T, class IdT>
void device_route(const std::vector<T>& L, int rows, int b, const lynx::route_params& p, std::vector<IdT>& ids,
                  std::vector<float>& weights, const std::uint8_t* pinned = nullptr,
                  lynx::detail::decode_choice choice = lynx::detail::decode_choice::automatic) {
  auto d_L = to_device(L);
  thrust::device_vector<IdT> d_ids(static_cast<std::size_t>(rows) * p.top_k, IdT(-5));
  thrust::device_vector<float> d_w(d_ids.size(), -5.0f);
  std::size_t bytes = 0;
  const cudaError_t query = lynx::route<T, IdT>(nullptr, bytes, nullptr, p.num_experts, rows, b, p, nullptr, nullptr);
  ASSERT_EQ(query, cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  const lynx::batch_ref<T, IdT> batch{thrust::raw_pointer_cast(d_L.data()), p.num_experts, rows, b,
                                      thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data()),
                                      pinned};
  const cudaError_t e = lynx::detail::route_with(choice, thrust::raw_pointer_cast(ws.data()), bytes, batch, p,
                                                 lynx::sorted_layout_ref{}, cudaStream_t{});
  if (e == cudaErrorNotSupported && choice == lynx::detail::decode_choice::grid)
    GTEST_SKIP() << "this device cannot hold the grid path's " << lynx::detail::warp_row_blocks(rows)
                 << " blocks at once";
  ASSERT_EQ(e, cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ids = to_host(d_ids);
  weights = to_host(d_w);
}

using lynx_test::entry;

/// ws_fill >= 0: the workspace is filled with that byte before the call (a launcher must not
/// rely on what an earlier call, or the caller, left there).
template <class T, class IdT>
void compare_with_host(entry which, const std::vector<float>& Lf, int rows, int b, const lynx::route_params& p,
                       int ws_fill = -1) {
  const std::vector<T> L = convert<T>(Lf);
  const int k = p.top_k;
  std::vector<IdT> want_ids(static_cast<std::size_t>(rows) * k, IdT(-5));
  std::vector<float> want_w(static_cast<std::size_t>(rows) * k, -5.0f);
  const lynx::batch_ref<T, IdT> host_batch{L.data(), p.num_experts, rows, b, want_ids.data(), want_w.data()};
  ASSERT_EQ(which == entry::route ? lynx::host::route(host_batch, p) : lynx::host::topk_route(host_batch, p),
            lynx::status::success);

  auto d_L = to_device(L);
  thrust::device_vector<IdT> d_ids(want_ids.size(), IdT(-5));
  thrust::device_vector<float> d_w(want_w.size(), -5.0f);
  const auto dev_call = [which](void* ws, std::size_t& bytes, const lynx::batch_ref<T, IdT>& batch,
                                const lynx::route_params& q) {
    return which == entry::route ? lynx::route(ws, bytes, batch, q) : lynx::topk_route(ws, bytes, batch, q);
  };
  std::size_t bytes = 0;
  ASSERT_EQ(dev_call(nullptr, bytes, lynx::batch_ref<T, IdT>{nullptr, p.num_experts, rows, b}, p), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  if (ws_fill >= 0) ASSERT_EQ(cudaMemset(thrust::raw_pointer_cast(ws.data()), ws_fill, bytes), cudaSuccess);
  ASSERT_EQ(dev_call(thrust::raw_pointer_cast(ws.data()), bytes,
                     lynx::batch_ref<T, IdT>{thrust::raw_pointer_cast(d_L.data()), p.num_experts, rows, b,
                                             thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())},
                     p),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(to_host(d_ids), want_ids) << "N " << p.num_experts << " k " << k << " B " << b;
  expect_weights_close(to_host(d_w), want_w, "weights");
}

struct shape {
  int n, k, b, rows;
  float alpha;
  int beta;
  lynx::scoring s;
  bool renorm;
};

const shape shapes[] = {
    {8, 2, 16, 16, 0.7f, 1, lynx::scoring::softmax, true},
    {16, 1, 64, 70, 1.0f, 0, lynx::scoring::sigmoid, false},
    {60, 4, 16, 16, 2.0f, 3, lynx::scoring::softmax, false},
    {64, 8, 64, 64, 3.0f, 4, lynx::scoring::softmax, false},
    {128, 8, 256, 260, 3.0f, 2, lynx::scoring::softmax, true},
    {160, 6, 16, 20, 1.0f, 2, lynx::scoring::softmax, true},
    {384, 8, 32, 32, 1.0f, 1, lynx::scoring::sigmoid, true},
    {512, 10, 256, 256, 3.0f, 0, lynx::scoring::softmax, true},
    {1024, 16, 5, 7, 1.0f, 2, lynx::scoring::softmax, false},
    {128, 8, 20, 64, 2.0f, 2, lynx::scoring::softmax, true},   // padding past a warp's rows: B <= warps < T
    {256, 8, 1, 40, 1.0f, 1, lynx::scoring::sigmoid, false},   // one valid row, 39 padding rows
};

template <class T, class IdT>
void all_shapes(entry which) {
  std::uint32_t seed = 1;
  for (const shape& s : shapes) {
    auto L = lynx_test::random_logits(s.rows, s.n, seed++, 1.5f, seed % 2 ? 0.25f : 0.0f);
    L[s.n + 3] = NAN;  // a NaN and an infinity in row 1, and a dead row 2
    L[s.n + 5] = INFINITY;
    if (s.b > 2)
      for (int e = 0; e < s.n; ++e) L[2 * s.n + e] = -INFINITY;
    compare_with_host<T, IdT>(which, L, s.rows, s.b, params(s.n, s.k, s.alpha, s.beta, s.s, s.renorm));
  }
}

TEST(Device, RouteMatchesHostFloatInt32) { SKIP_WITHOUT_DEVICE(); all_shapes<float, std::int32_t>(entry::route); }
TEST(Device, RouteMatchesHostHalfInt64) { SKIP_WITHOUT_DEVICE(); all_shapes<__half, std::int64_t>(entry::route); }
TEST(Device, RouteMatchesHostBf16Int32) { SKIP_WITHOUT_DEVICE(); all_shapes<__nv_bfloat16, std::int32_t>(entry::route); }
TEST(Device, TopkRouteMatchesHostFloatInt64) { SKIP_WITHOUT_DEVICE(); all_shapes<float, std::int64_t>(entry::topk); }
TEST(Device, TopkRouteMatchesHostBf16Int32) { SKIP_WITHOUT_DEVICE(); all_shapes<__nv_bfloat16, std::int32_t>(entry::topk); }

TEST(Device, TopkRouteIsOneKernelUpToEightRows) {
  // A captured topk_route call is one kernel node up to 8 rows (one block: no memset), and a
  // memset and a kernel above.
  SKIP_WITHOUT_DEVICE();
  const int n = 128, k = 8;
  const auto p = params(n, k);
  for (const int rows : {1, 8, 9}) {
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    const auto L = lynx_test::random_logits(rows, n, 5);
    auto d_L = to_device(L);
    thrust::device_vector<std::int32_t> d_ids(static_cast<std::size_t>(rows) * k);
    thrust::device_vector<float> d_w(d_ids.size());
    const lynx::batch_ref<float, std::int32_t> batch{thrust::raw_pointer_cast(d_L.data()), n, rows, rows,
                                                     thrust::raw_pointer_cast(d_ids.data()),
                                                     thrust::raw_pointer_cast(d_w.data())};
    std::size_t bytes = 0;
    ASSERT_EQ(lynx::topk_route(nullptr, bytes, batch, p), cudaSuccess);
    thrust::device_vector<char> ws(bytes);
    const auto graph = lynx_test::capture_call([&](cudaStream_t stream) {
      return lynx::topk_route(thrust::raw_pointer_cast(ws.data()), bytes, batch, p, stream);
    });
    if (!graph.supported) GTEST_SKIP() << "this CUDA runtime cannot capture graphs";
    ASSERT_EQ(graph.called, cudaSuccess);
    ASSERT_EQ(graph.ended, cudaSuccess);
    const auto count = [&](cudaGraphNodeType type) {
      return static_cast<int>(std::count(graph.nodes.begin(), graph.nodes.end(), type));
    };
    EXPECT_EQ(count(cudaGraphNodeTypeKernel), 1);
    EXPECT_EQ(count(cudaGraphNodeTypeMemset), rows > 8 ? 1 : 0);
    EXPECT_EQ(static_cast<int>(graph.nodes.size()), count(cudaGraphNodeTypeKernel) + count(cudaGraphNodeTypeMemset));
  }
}

TEST(Device, TopkRouteIgnoresAStaleWorkspace) {
  // Up to 8 rows (one block) topk_route sets no memset: its kernel must not read the workspace's
  // plain set or block counter. With every workspace byte 0xFF, a kernel that did would pad with
  // experts no row chose, or no block would think it the last and pad nothing. Above 8 rows
  // the memset clears them. Rows with padding (b < rows) and a dead row, where pads are written.
  SKIP_WITHOUT_DEVICE();
  struct stale_case {
    int n, k, b, rows;
  };
  const stale_case cases[] = {{128, 8, 2, 3}, {128, 8, 1, 3}, {256, 8, 5, 8}, {64, 6, 8, 8}, {128, 8, 7, 9}, {160, 6, 12, 16}};
  std::uint32_t seed = 40;
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " k " << c.k << " b " << c.b << " rows " << c.rows);
    auto L = lynx_test::random_logits(c.rows, c.n, seed++, 1.5f);
    if (c.b > 2)
      for (int e = 0; e < c.n; ++e) L[static_cast<std::size_t>(c.n) + e] = -INFINITY;  // row 1 does not vote
    const auto p = params(c.n, c.k, 1.0f, 2, lynx::scoring::softmax, true);
    ASSERT_NO_FATAL_FAILURE((compare_with_host<float, std::int32_t>(entry::topk, L, c.rows, c.b, p, 0xFF)));
  }
}

/// A policy and its settings, for the policy tests at several tiers.
struct policy_case {
  lynx::policy kind;
  bool anchor;
  int keep_k;         // piggyback: clamped to [1, k]
  int extra_experts;  // budget by count: k + this, at most N (0: not by count)
  float budget_fraction, budget_mass;

  lynx::route_params params(int n, int k) const {
    auto p = lynx::default_params(n, k);
    p.kind = kind;
    p.anchor_top1 = anchor;
    p.keep_k = std::max(1, std::min(keep_k, k));
    p.budget_experts = extra_experts ? std::min(n, k + extra_experts) : 0;
    p.budget_fraction = budget_fraction;
    p.budget_mass = budget_mass;
    return p;
  }
};

TEST(Device, PoliciesMatchHost) {
  // Every policy, with and without the anchor and pinned rows (a device-side mask), at
  // several tiers: ids and weights bitwise equal to the host path.
  SKIP_WITHOUT_DEVICE();
  const policy_case cases[] = {
      {lynx::policy::lynx, true, 0, 0, 0, 0},          {lynx::policy::piggyback, false, 2, 0, 0, 0},
      {lynx::policy::piggyback, true, 1, 0, 0, 0},     {lynx::policy::budget, true, 0, 16, 0, 0},
      {lynx::policy::budget, true, 0, 0, 0.7f, 0},     {lynx::policy::budget, true, 0, 0, 0, 0.94f},
  };
  const int dims[][3] = {{64, 6, 16}, {128, 8, 64}, {512, 10, 33}, {8, 2, 16}};
  std::uint32_t seed = 100;
  for (const auto& d : dims)
    for (const policy_case& c : cases)
      for (const bool with_pinned : {false, true}) {
        const int n = d[0], k = d[1], rows = d[2];
        auto p = c.params(n, k);
        p.renormalize = seed % 2;
        const auto L = lynx_test::random_logits(rows, n, seed++, 1.0f);
        std::vector<std::uint8_t> pinned(rows, 0);
        if (with_pinned)
          for (int t = 0; t < rows; t += 3) pinned[t] = 1;
        std::vector<int> want(rows * k);
        std::vector<float> want_w(rows * k);
        ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{L.data(), n, rows, rows, want.data(), want_w.data(),
                                                                with_pinned ? pinned.data() : nullptr},
                                    p),
                  lynx::status::success);
        auto d_pinned = to_device(pinned);
        // route's own choice (the grid path for the lynx and piggyback policies once the rows
        // outnumber the block's warps), and the one-block path forced.
        for (const auto choice : {lynx::detail::decode_choice::automatic, lynx::detail::decode_choice::fused}) {
          std::vector<int> got;
          std::vector<float> got_w;
          ASSERT_NO_FATAL_FAILURE(device_route(L, rows, rows, p, got, got_w,
                                               with_pinned ? thrust::raw_pointer_cast(d_pinned.data()) : nullptr, choice));
          EXPECT_EQ(got, want) << "N " << n << " policy " << static_cast<int>(c.kind) << " pinned " << with_pinned
                               << " fused " << (choice == lynx::detail::decode_choice::fused);
          expect_weights_close(got_w, want_w, "policy weights");
        }
      }
}

TEST(Device, TopOneMatchesTheFullPolicy) {
  // k = 1 with the default (budget) and the anchored lynx policy: route runs them as
  // piggyback (params.hpp, effective_params), on the grid path too once the rows outnumber the
  // block's warps. Ids equal, weights within 2e-6 of the host's staged path (affinity_bin,
  // score_experts, remap_topk), which computes each policy in full: padding, a dead row, NaN
  // and +inf, pinned rows, ties. The stage launcher remap_topk too.
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 700;
  for (const int n : {16, 128})
    for (const int rows : {16, 48})
      for (const bool anchored_lynx : {false, true}) {
        auto p = lynx::default_params(n, 1);
        if (anchored_lynx) p.kind = lynx::policy::lynx;
        p.renormalize = seed % 2;
        p.score = seed % 3 ? lynx::scoring::softmax : lynx::scoring::sigmoid;
        const int b = rows - 3;
        auto L = lynx_test::random_logits(rows, n, seed++, 1.5f, seed % 2 ? 0.25f : 0.0f);
        L[n + 3] = NAN, L[n + 5] = INFINITY;
        for (int e = 0; e < n; ++e) L[2 * n + e] = -INFINITY;
        std::vector<std::uint8_t> pinned(rows, 0);
        for (int t = 0; t < rows; t += 5) pinned[t] = 1;
        std::vector<int> want(rows), got;
        std::vector<float> want_w(rows), got_w;
        std::vector<std::int8_t> bins(static_cast<std::size_t>(rows) * n);
        std::vector<std::int32_t> counts(static_cast<std::size_t>(lynx::histogram_bins(p)) * n), ranks(n);
        ASSERT_EQ(lynx::host::affinity_bin(L.data(), n, rows, b, p, bins.data()), lynx::status::success);
        ASSERT_EQ(lynx::host::score_experts(bins.data(), rows, p, counts.data(), ranks.data()), lynx::status::success);
        ASSERT_EQ(lynx::host::remap_topk(
                      lynx::batch_ref<float, int>{L.data(), n, rows, b, want.data(), want_w.data(), pinned.data()},
                      bins.data(), ranks.data(), p),
                  lynx::status::success);
        auto d_pinned = to_device(pinned);
        for (const auto choice : {lynx::detail::decode_choice::automatic, lynx::detail::decode_choice::fused}) {
          ASSERT_NO_FATAL_FAILURE(
              device_route(L, rows, b, p, got, got_w, thrust::raw_pointer_cast(d_pinned.data()), choice));
          EXPECT_EQ(got, want) << "N " << n << " rows " << rows << " lynx " << anchored_lynx;
          expect_weights_close(got_w, want_w, "top-1 weights");
        }
        // The stage launcher remap_topk runs them as piggyback too, so it needs no bins or
        // ranks (null here: the anchored lynx policy as given would be rejected without them).
        auto d_L = to_device(L);
        thrust::device_vector<int> d_ids(rows);
        thrust::device_vector<float> d_w(rows);
        const lynx::batch_ref<float, int> db{thrust::raw_pointer_cast(d_L.data()), n, rows, b,
                                             thrust::raw_pointer_cast(d_ids.data()),
                                             thrust::raw_pointer_cast(d_w.data()),
                                             thrust::raw_pointer_cast(d_pinned.data())};
        std::size_t bytes = 0;
        ASSERT_EQ(lynx::remap_topk(nullptr, bytes, db, nullptr, nullptr, p), cudaSuccess);
        thrust::device_vector<char> ws(bytes);
        ASSERT_EQ(lynx::remap_topk(thrust::raw_pointer_cast(ws.data()), bytes, db, nullptr, nullptr, p), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(to_host(d_ids), want) << "stage launcher, N " << n << " rows " << rows << " lynx " << anchored_lynx;
        expect_weights_close(to_host(d_w), want_w, "stage launcher top-1 weights");
      }
}

TEST(Device, NeverWorseFallbackAcrossBlocks) {
  // Batches whose remapped choices would touch more experts than plain top-k (SPEC §3.3 step
  // 5), over several blocks of rows (8 a block on the grid path) and with two padding rows:
  // the last block to finish must rewrite every block's rows to plain top-k and pad from the
  // plain set. Seeds found with the reference (top-1 of 5 on a coarse grid, alpha 0.5).
  SKIP_WITHOUT_DEVICE();
  const int n = 5, k = 1;
  const std::pair<int, std::uint32_t> batches[] = {{12, 217}, {12, 1667}, {17, 24829}, {24, 24283}};
  for (const auto& [b, seed] : batches) {
    const int rows = b + 2;
    auto L = lynx_test::random_logits(b, n, seed, 1.5f, 1.0f);
    ASSERT_TRUE((lynx_test::ref_route(L, b, b, {n, k, 0.5f, 2, false, true}).fell_back)) << "seed " << seed;
    L.resize(static_cast<std::size_t>(rows) * n, 0.0f);
    const auto p = params(n, k, 0.5f, 2);
    std::vector<int> want(rows * k), plain(rows * k);
    std::vector<float> want_w(rows * k), plain_w(rows * k);
    ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{L.data(), n, rows, b, want.data(), want_w.data()}, p),
              lynx::status::success);
    ASSERT_EQ(lynx::host::topk_route(lynx::batch_ref<float, int>{L.data(), n, rows, b, plain.data(), plain_w.data()}, p),
              lynx::status::success);
    ASSERT_TRUE(std::equal(want.begin(), want.begin() + b * k, plain.begin())) << "the host fell back, seed " << seed;
    for (const auto choice : {lynx::detail::decode_choice::automatic, lynx::detail::decode_choice::grid,
                              lynx::detail::decode_choice::fused}) {
      std::vector<int> got;
      std::vector<float> got_w;
      ASSERT_NO_FATAL_FAILURE(device_route(L, rows, b, p, got, got_w, nullptr, choice));
      if (got.empty()) continue;  // the grid path does not fit this device (device_route skipped it)
      EXPECT_EQ(got, want) << "b " << b << " seed " << seed << " choice " << static_cast<int>(choice);
      expect_weights_close(got_w, want_w, "fallback weights");
    }
  }
}

template <class T, class IdT>
void grid_matches_host(std::uint32_t seed) {
  // The grid path (a warp per row across blocks, grid barriers) against the host path, for
  // the policies it takes, at every decode tier: garbage rows (NaN, +inf, a dead row),
  // padding, pinned rows, one block and many; and batches where every row votes (no pad ids).
  struct grid_case {
    int n, k, rows, b;
    lynx::policy kind;
    bool anchor, pinned;
    lynx::scoring s;
    bool garbage = true;  // rows 1 and 2 get NaN, +inf and a dead row (with more than 2 rows)
  };
  const grid_case cases[] = {
      {5, 1, 1, 1, lynx::policy::lynx, false, false, lynx::scoring::softmax},       // (128, 1)
      {8, 2, 16, 14, lynx::policy::lynx, true, true, lynx::scoring::softmax},        // (128, 2)
      {60, 4, 9, 9, lynx::policy::piggyback, false, false, lynx::scoring::sigmoid},  // (128, 4)
      {64, 6, 64, 61, lynx::policy::lynx, false, true, lynx::scoring::softmax},      // (128, 8)
      {128, 8, 33, 33, lynx::policy::piggyback, true, true, lynx::scoring::softmax}, // (128, 8)
      {160, 6, 40, 37, lynx::policy::lynx, true, false, lynx::scoring::sigmoid},     // (256, 8)
      {256, 8, 128, 128, lynx::policy::lynx, false, false, lynx::scoring::softmax},  // (256, 8)
      {384, 8, 24, 20, lynx::policy::piggyback, false, true, lynx::scoring::softmax},// (512, 8)
      {512, 10, 72, 72, lynx::policy::lynx, true, true, lynx::scoring::softmax},     // (512, 16)
      {128, 8, 48, 48, lynx::policy::lynx, false, false, lynx::scoring::softmax, false},   // every row votes
      {256, 8, 64, 64, lynx::policy::piggyback, true, false, lynx::scoring::softmax, false},
  };
  for (const grid_case& c : cases) {
    SCOPED_TRACE(testing::Message() << "N " << c.n << " k " << c.k << " rows " << c.rows << " b " << c.b);
    auto p = params(c.n, c.k, 2.0f, 2, c.s, seed % 2 == 0);
    p.kind = c.kind;
    p.anchor_top1 = c.anchor;
    p.keep_k = 1;
    const float quantum = seed % 3 ? 0.25f : 0.0f;  // ties in some cases
    auto Lf = lynx_test::random_logits(c.rows, c.n, seed++, 1.5f, quantum);
    if (c.garbage && c.rows > 2) {
      Lf[c.n + 1] = NAN;
      Lf[c.n + 2] = INFINITY;
      for (int e = 0; e < c.n; ++e) Lf[2 * c.n + e] = -INFINITY;
    }
    const bool tiny_row = c.s == lynx::scoring::sigmoid && c.rows > 3;  // row 3's mass: detail::tiny_mass_logit
    if (tiny_row)
      for (int e = 0; e < c.n; ++e) Lf[3 * c.n + e] -= 100.0f;
    const std::vector<T> L = convert<T>(Lf);
    std::vector<std::uint8_t> pinned(c.rows, 0);
    if (c.pinned)
      for (int t = 1; t < c.rows; t += 4) pinned[t] = 1;
    std::vector<IdT> want(static_cast<std::size_t>(c.rows) * c.k);
    std::vector<float> want_w(want.size());
    ASSERT_EQ(lynx::host::route(lynx::batch_ref<T, IdT>{L.data(), c.n, c.rows, c.b, want.data(), want_w.data(),
                                                        c.pinned ? pinned.data() : nullptr},
                                p),
              lynx::status::success);
    auto d_pinned = to_device(pinned);
    std::vector<IdT> got;
    std::vector<float> got_w;
    ASSERT_NO_FATAL_FAILURE(device_route(L, c.rows, c.b, p, got, got_w,
                                         c.pinned ? thrust::raw_pointer_cast(d_pinned.data()) : nullptr,
                                         lynx::detail::decode_choice::grid));
    if (got.empty()) return;  // skipped: the device holds too few blocks
    EXPECT_EQ(got, want);
    expect_weights_close(got_w, want_w, "grid weights");
    if (tiny_row)  // subnormal without renormalize: closer than expect_weights_close's 1e-37
      EXPECT_EQ(0, std::memcmp(got_w.data() + 3 * c.k, want_w.data() + 3 * c.k, c.k * sizeof(float)));
  }
}

TEST(Device, GridPathMatchesHostFloatInt32) { SKIP_WITHOUT_DEVICE(); grid_matches_host<float, std::int32_t>(300); }
TEST(Device, GridPathMatchesHostHalfInt64) { SKIP_WITHOUT_DEVICE(); grid_matches_host<__half, std::int64_t>(400); }
TEST(Device, GridPathMatchesHostBf16Int32) { SKIP_WITHOUT_DEVICE(); grid_matches_host<__nv_bfloat16, std::int32_t>(500); }

TEST(Device, GridPathRefusesWhatItDoesNotTake) {
  // The budget policy, a model router and more rows than decode sizes stay off the grid path:
  // forcing it answers cudaErrorNotSupported and writes nothing.
  SKIP_WITHOUT_DEVICE();
  const int n = 64, k = 6, rows = 16;
  const auto L = lynx_test::random_logits(rows, n, 7, 1.0f);
  auto d_L = to_device(L);
  thrust::device_vector<int> d_ids(rows * k, -5);
  thrust::device_vector<float> d_w(rows * k, -5.0f);
  const lynx::batch_ref<float, int> batch{thrust::raw_pointer_cast(d_L.data()), n, rows, rows,
                                          thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())};
  const auto budget = lynx::default_params(n, k);
  ASSERT_EQ(budget.kind, lynx::policy::budget);
  std::size_t bytes = 0;
  ASSERT_EQ(lynx::route(nullptr, bytes, batch, budget), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  EXPECT_EQ(lynx::detail::route_with(lynx::detail::decode_choice::grid, thrust::raw_pointer_cast(ws.data()), bytes,
                                     batch, budget, lynx::sorted_layout_ref{}, cudaStream_t{}),
            cudaErrorNotSupported);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(d_ids), std::vector<int>(rows * k, -5));
}

struct budget_case {
  int n, k, rows;
  lynx::scoring score;
  float quantum;  // logits on this grid (tied gains), 0: none
  int budget_experts;
  float budget_mass;
  std::uint32_t seed;  // of the logits
};

/// The default (budget) policy with the case's limit, on the fused path: ids and weights against
/// the host's lazy greedy.
void budget_cases(const budget_case* cases, int count) {
  for (int i = 0; i < count; ++i) {
    const budget_case& c = cases[i];
    auto p = lynx::default_params(c.n, c.k);
    ASSERT_EQ(p.kind, lynx::policy::budget);
    p.score = c.score;
    if (c.budget_experts || c.budget_mass > 0.0f) {
      p.budget_experts = c.budget_experts;
      p.budget_fraction = 0.0f;
      p.budget_mass = c.budget_mass;
    }
    SCOPED_TRACE(testing::Message() << "N " << c.n << " k " << c.k << " rows " << c.rows);
    compare_with_host<float, int>(entry::route, lynx_test::random_logits(c.rows, c.n, c.seed, 1.5f, c.quantum), c.rows,
                                  c.rows, p);
  }
}

TEST(Device, BudgetResidentStepsMatchHost) {
  // Up to 64 rows (the steps with gains and the tokens' k best shares in registers, one named
  // barrier a step) and one row (its warp alone): the host's K with tied gains (quantized
  // logits: the lower id must win), sigmoid scores, the mass mode, the anchors' phase (a limit
  // below the anchors, with one and two token slots a lane), N 512 and k 32.
  SKIP_WITHOUT_DEVICE();
  const budget_case cases[] = {
      {32, 4, 1, lynx::scoring::softmax, 0.0f, 0, 0.0f, 900},       {160, 6, 40, lynx::scoring::softmax, 0.5f, 0, 0.0f, 901},
      {160, 6, 40, lynx::scoring::sigmoid, 0.25f, 0, 0.0f, 902},     {256, 8, 64, lynx::scoring::sigmoid, 0.0f, 0, 0.9f, 903},
      {64, 6, 48, lynx::scoring::softmax, 0.0f, 10, 0.0f, 905},      {512, 10, 64, lynx::scoring::softmax, 1.0f, 0, 0.0f, 910},
      {256, 8, 33, lynx::scoring::softmax, 0.25f, 12, 0.0f, 911},    {128, 8, 16, lynx::scoring::softmax, 0.0f, 0, 0.0f, 912},
      {96, 32, 64, lynx::scoring::softmax, 0.0f, 0, 0.0f, 913},      {512, 10, 16, lynx::scoring::sigmoid, 0.5f, 0, 0.97f, 914},
  };
  budget_cases(cases, static_cast<int>(sizeof(cases) / sizeof(cases[0])));
}

TEST(Device, BudgetGreedyMatchesHost) {
  // Above 64 rows (a thread per candidate, only the moved tokens' terms replaced per step): the
  // host's K with tied gains, the mass mode, shares in global memory (300 and 700 rows on the
  // fused path) and the stage path (1100 rows).
  SKIP_WITHOUT_DEVICE();
  const budget_case cases[] = {
      {256, 8, 300, lynx::scoring::softmax, 0.0f, 0, 0.0f, 904},
      {128, 8, 700, lynx::scoring::softmax, 0.25f, 0, 0.97f, 906},
      {64, 6, 1100, lynx::scoring::softmax, 0.0f, 0, 0.0f, 907},
  };
  budget_cases(cases, static_cast<int>(sizeof(cases) / sizeof(cases[0])));
  // More voting rows than 16 bits count (the per-stage path takes any number), in mass mode,
  // whose target counts them: expert 0 leads every row by 0.1, so K0 is {0} alone and the
  // target decides how many experts the greedy adds (a count of 64 would stop it at 2).
  const int n = 16, k = 2, rows = 65600;
  auto L = lynx_test::random_logits(rows, n, 77, 1.0f);
  for (int t = 0; t < rows; ++t) {
    float* row = L.data() + static_cast<std::size_t>(t) * n;
    row[0] = *std::max_element(row + 1, row + n) + 0.1f;
  }
  auto p = lynx::default_params(n, k);
  p.budget_experts = 0, p.budget_fraction = 0.0f, p.budget_mass = 0.9f;
  SCOPED_TRACE("65,600 voting rows");
  compare_with_host<float, int>(entry::route, L, rows, rows, p);
}

/// One valid row (B = 1) on the one-block path, which routes it by its warp alone
/// (block_route::run_one_row): ids and weights against the host path's full algorithm.
template <class T, class IdT>
void one_row_case(const std::vector<float>& Lf, int n, int rows, const lynx::route_params& p, bool pinned,
                  bool device_count) {
  const std::vector<T> L = convert<T>(Lf);
  const int k = p.top_k;
  std::vector<std::uint8_t> mask(rows, 0);
  mask[0] = pinned;
  std::vector<IdT> want(static_cast<std::size_t>(rows) * k, IdT(-5));
  std::vector<float> want_w(want.size(), -5.0f);
  ASSERT_EQ(lynx::host::route(lynx::batch_ref<T, IdT>{L.data(), n, rows, 1, want.data(), want_w.data(),
                                                      pinned ? mask.data() : nullptr},
                              p),
            lynx::status::success);
  auto d_L = to_device(L);
  auto d_mask = to_device(mask);
  thrust::device_vector<int> d_count(1, 1);
  thrust::device_vector<IdT> d_ids(want.size(), IdT(-5));
  thrust::device_vector<float> d_w(want.size(), -5.0f);
  const lynx::token_count valid = device_count ? lynx::token_count(thrust::raw_pointer_cast(d_count.data()))
                                               : lynx::token_count(1);
  const lynx::batch_ref<T, IdT> batch{thrust::raw_pointer_cast(d_L.data()), n, rows, valid,
                                      thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data()),
                                      pinned ? thrust::raw_pointer_cast(d_mask.data()) : nullptr};
  std::size_t bytes = 0;
  ASSERT_EQ(lynx::route(nullptr, bytes, lynx::batch_ref<T, IdT>{nullptr, n, rows, valid}, p), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  ASSERT_EQ(lynx::detail::route_with(lynx::detail::decode_choice::fused, thrust::raw_pointer_cast(ws.data()), bytes,
                                     batch, p, lynx::sorted_layout_ref{}, cudaStream_t{}),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(d_ids), want);
  expect_weights_close(to_host(d_w), want_w, "one-row weights");
}

TEST(Device, OneValidRowMatchesHost) {
  // Every policy (the budget in its three limit modes) at every tier, for rows that stress the
  // single-row greedy: ties in the logits, shares that vanish on the gain grid (K filled from
  // the plain top-k), shares that tie only after truncation to the grid (the greedy then takes
  // the lower id, not the larger logit), a row with no finite logit, NaN and +inf; pinned or
  // not, with padding rows behind it, B on the host or on the device, three logit types. The
  // settings past the tier, the row kind and the policy are drawn independently by a fixed
  // generator, so that none follows another (nor the policy).
  SKIP_WITHOUT_DEVICE();
  const policy_case cases[] = {
      {lynx::policy::lynx, true, 0, 0, 0, 0},        {lynx::policy::piggyback, false, 2, 0, 0, 0},
      {lynx::policy::budget, true, 0, 0, 0, 0.94f},  {lynx::policy::budget, true, 0, 3, 0, 0},
      {lynx::policy::budget, true, 0, 0, 0.7f, 0},
  };
  const int dims[][2] = {{8, 2}, {16, 1}, {64, 6}, {128, 8}, {256, 8}, {512, 16}, {1000, 20}};
  std::uint32_t seed = 2000;
  lynx_test::picker pick(3);
  int index = 0;
  for (const auto& d : dims)
    for (int kind = 0; kind < 6; ++kind)
      for (const policy_case& c : cases) {
        const int n = d[0], k = d[1], rows = pick(2) ? 6 : 1;
        const bool pinned = pick(3) == 0, device_count = pick(3) == 0;
        auto p = c.params(n, k);
        p.score = pick(3) == 0 ? lynx::scoring::sigmoid : lynx::scoring::softmax;
        p.renormalize = pick(2) == 0;
        auto L = lynx_test::random_logits(rows, n, seed++, 1.5f, kind == 1 ? 0.5f : 0.0f);
        if (kind == 2) L[n / 2] = 60.0f;  // every other share underflows the gain grid
        if (kind == 3)
          for (int e = 0; e < n; ++e) L[e] = -INFINITY;
        if (kind == 4) L[1] = NAN, L[n - 1] = INFINITY;
        if (kind == 5)  // shares near 2^-32 x a few: equal on the grid, distinct as floats
          for (int e = 1; e < n; ++e) L[e] = -19.0f - 1e-5f * static_cast<float>((e * 7) % 13);
        SCOPED_TRACE(testing::Message() << "N " << n << " k " << k << " row kind " << kind << " policy "
                                        << static_cast<int>(c.kind) << " rows " << rows << " pinned " << pinned
                                        << " device B " << device_count << " case " << index);
        const int type = kind == 5 ? 0 : pick(3);  // kind 5's logits differ below bf16's and half's precision
        ++index;
        switch (type) {
          case 0: ASSERT_NO_FATAL_FAILURE((one_row_case<float, std::int32_t>(L, n, rows, p, pinned, device_count))); break;
          case 1: ASSERT_NO_FATAL_FAILURE((one_row_case<__nv_bfloat16, std::int64_t>(L, n, rows, p, pinned, device_count))); break;
          default: ASSERT_NO_FATAL_FAILURE((one_row_case<__half, std::int32_t>(L, n, rows, p, pinned, device_count))); break;
        }
      }
}

TEST(Device, StageByStagePathMatchesHost) {
  // route() fuses decode sizes into one kernel; the stage launchers (and route above 512 rows
  // or experts) run one kernel per stage. Both must equal the host path.
  SKIP_WITHOUT_DEVICE();
  const int dims[][3] = {{64, 6, 16}, {128, 8, 64}, {160, 6, 33}, {512, 10, 256}};
  for (const auto& d : dims)
    for (const auto kind : {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget}) {
      const int n = d[0], k = d[1], rows = d[2];
      auto p = lynx::default_params(n, k);
      p.kind = kind;
      p.keep_k = 2;
      const auto L = lynx_test::random_logits(rows, n, 31 + n + static_cast<int>(kind), 1.0f);
      std::vector<int> want(rows * k);
      std::vector<float> want_w(rows * k);
      ASSERT_EQ(lynx::host::route(L.data(), n, rows, rows, p, want.data(), want_w.data()), lynx::status::success);
      auto d_L = to_device(L);
      thrust::device_vector<std::int8_t> d_bins(static_cast<std::size_t>(rows) * n);
      thrust::device_vector<std::int32_t> d_counts(static_cast<std::size_t>(lynx::max_bins) * n), d_ranks(n);
      thrust::device_vector<int> d_ids(rows * k);
      thrust::device_vector<float> d_w(rows * k);
      const float* x = thrust::raw_pointer_cast(d_L.data());
      ASSERT_EQ(lynx::affinity_bin(x, n, rows, rows, p, thrust::raw_pointer_cast(d_bins.data())), cudaSuccess);
      ASSERT_EQ(lynx::score_experts(thrust::raw_pointer_cast(d_bins.data()), rows, p, thrust::raw_pointer_cast(d_counts.data()),
                                    thrust::raw_pointer_cast(d_ranks.data())),
                cudaSuccess);
      std::size_t bytes = 0;
      const cudaError_t query = lynx::remap_topk<float, int>(nullptr, bytes, nullptr, n, rows, rows, nullptr, nullptr, p,
                                                             nullptr, nullptr);
      ASSERT_EQ(query, cudaSuccess);
      thrust::device_vector<char> ws(bytes);
      ASSERT_EQ(lynx::remap_topk(thrust::raw_pointer_cast(ws.data()), bytes, x, n, rows, rows,
                                 thrust::raw_pointer_cast(d_bins.data()), thrust::raw_pointer_cast(d_ranks.data()), p,
                                 thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(to_host(d_ids), want) << "N " << n << " policy " << static_cast<int>(kind);
      expect_weights_close(to_host(d_w), want_w, "stage-by-stage weights");
    }
  // More rows than the fused path takes: route runs the stage kernels.
  compare_with_host<__nv_bfloat16, int>(entry::route, lynx_test::random_logits(700, 64, 5, 1.0f), 700, 650,
                                        lynx::default_params(64, 6));
  auto lynx_policy = lynx::default_params(128, 8);
  lynx_policy.kind = lynx::policy::lynx;
  compare_with_host<float, std::int64_t>(entry::route, lynx_test::random_logits(600, 128, 6, 1.0f), 600, 600, lynx_policy);
}

TEST(Device, StagesMatchHostBitwise) {
  SKIP_WITHOUT_DEVICE();
  for (const shape& s : shapes) {
    const auto p = params(s.n, s.k, s.alpha, s.beta, s.s, s.renorm);
    const auto L = lynx_test::random_logits(s.rows, s.n, 77 + s.n, 1.0f, 0.25f);
    const int nb = lynx::histogram_bins(p);
    std::vector<std::int8_t> bins(static_cast<std::size_t>(s.rows) * s.n);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(nb) * s.n), ranks(s.n);
    lynx::host::affinity_bin(L.data(), s.n, s.rows, s.b, p, bins.data());
    lynx::host::score_experts(bins.data(), s.rows, p, counts.data(), ranks.data());

    auto d_L = to_device(L);
    thrust::device_vector<std::int8_t> d_bins(bins.size());
    thrust::device_vector<std::int32_t> d_counts(static_cast<std::size_t>(lynx::max_bins) * s.n), d_ranks(s.n);
    ASSERT_EQ(lynx::affinity_bin(thrust::raw_pointer_cast(d_L.data()), s.n, s.rows, s.b, p,
                                 thrust::raw_pointer_cast(d_bins.data())), cudaSuccess);
    ASSERT_EQ(lynx::score_experts(thrust::raw_pointer_cast(d_bins.data()), s.rows, p,
                                  thrust::raw_pointer_cast(d_counts.data()), thrust::raw_pointer_cast(d_ranks.data())),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(to_host(d_bins), bins) << "N " << s.n;
    auto got_counts = to_host(d_counts);
    got_counts.resize(counts.size());
    EXPECT_EQ(got_counts, counts) << "N " << s.n;
    EXPECT_EQ(to_host(d_ranks), ranks) << "N " << s.n;
  }
}

TEST(Device, GraphReplayWithChangedDeviceTokenCount) {
  SKIP_WITHOUT_DEVICE();
  const int n = 128, k = 8, rows = 64;
  const auto p = params(n, k, 3.0f, 2);
  const auto L = lynx_test::random_logits(rows, n, 5, 1.0f);
  auto d_L = to_device(L);
  thrust::device_vector<int> d_count(1, rows);
  thrust::device_vector<std::int32_t> d_ids(rows * k);
  thrust::device_vector<float> d_w(rows * k);
  const lynx::token_count valid(thrust::raw_pointer_cast(d_count.data()));
  std::size_t bytes = 0;
  const cudaError_t query = lynx::route<float, std::int32_t>(nullptr, bytes, nullptr, n, rows, valid, p, nullptr, nullptr);
  ASSERT_EQ(query, cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  if (const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal); e != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream);
    GTEST_SKIP() << "this CUDA runtime cannot capture graphs (" << cudaGetErrorString(e) << ")";
  }
  ASSERT_EQ(lynx::route(thrust::raw_pointer_cast(ws.data()), bytes, thrust::raw_pointer_cast(d_L.data()), n, rows,
                        valid, p, thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data()), stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int b : {64, 16, 1, 33, 0}) {
    cudaMemcpyAsync(thrust::raw_pointer_cast(d_count.data()), &b, sizeof b, cudaMemcpyHostToDevice, stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<std::int32_t> want(rows * k);
    std::vector<float> want_w(rows * k);
    if (b > 0) {
      lynx::host::route(L.data(), n, rows, b, p, want.data(), want_w.data());
    } else {  // every row is padding: the lowest ids, weight 0
      for (int t = 0; t < rows; ++t)
        for (int i = 0; i < k; ++i) want[t * k + i] = i, want_w[t * k + i] = 0.0f;
    }
    EXPECT_EQ(to_host(d_ids), want) << "B " << b;
    expect_weights_close(to_host(d_w), want_w, "graph weights");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Device, WeightsAreBitwiseEqualToHost) {
  // Stronger than SPEC's 2e-6: exp_f32 and the weight sums are fixed IEEE operation sequences.
  SKIP_WITHOUT_DEVICE();
  // With sigmoid scores, rows 0-7 lie below -88.7, where a sigmoid is exp(x) (a subnormal
  // weight without renormalize: detail::sigmoid), on both sides, and rows 8-11 below -150.
  // Without renormalize their masses take detail::tiny_mass_logit's form, which a router's
  // scaling of 2^100 brings back to normal weights. Rows 12-19 spread their logits 22 apart,
  // so chosen ratios lie below e^-80 (detail::tiny_ratio_arg), which that scaling also brings
  // back to normal weights.
  const int n = 128, k = 8, rows = 64;
  struct weighting {
    lynx::scoring score;
    bool renorm;
    float scaling;
  };
  for (const auto [score, renorm, scaling] :
       {weighting{lynx::scoring::softmax, true, 1.0f}, weighting{lynx::scoring::softmax, false, 1.0f},
        weighting{lynx::scoring::sigmoid, true, 1.0f}, weighting{lynx::scoring::sigmoid, false, 1.0f},
        weighting{lynx::scoring::sigmoid, false, lynx::max_router_scaling}, weighting{lynx::scoring::sigmoid, false, 2.5f},
        weighting{lynx::scoring::softmax, false, lynx::max_router_scaling},
        weighting{lynx::scoring::sigmoid, true, lynx::max_router_scaling}}) {
    auto p = params(n, k, 3.0f, 2, score, renorm);
    p.router.scaling = scaling;
    auto L = lynx_test::random_logits(rows, n, 17, 2.0f);
    if (score == lynx::scoring::sigmoid)
      for (int i = 0; i < 12 * n; ++i) L[i] -= i < 8 * n ? 95.0f : 155.0f;
    for (int t = 12; t < 20; ++t)
      for (int e = 0; e < n; ++e) L[t * n + e] = -22.0f * static_cast<float>((e * 37 + t * 11) % n);
    std::vector<int> ids(rows * k);
    std::vector<float> w(rows * k);
    ASSERT_EQ(lynx::host::route(L.data(), n, rows, rows, p, ids.data(), w.data()), lynx::status::success);
    if (score == lynx::scoring::sigmoid)  // subnormal without renormalize, normal with the scaling
      for (int i = 0; i < 8 * k; ++i) ASSERT_GT(w[i], scaling == lynx::max_router_scaling ? FLT_MIN : 0.0f) << i;
    if (scaling == lynx::max_router_scaling) {  // normal weights below 2^-126 times their row's largest
      int far = 0;
      for (int i = 12 * k; i < 20 * k; ++i) far += w[i] >= FLT_MIN && w[i] < w[i / k * k] * 0x1p-126f;
      EXPECT_GT(far, 8) << static_cast<int>(score) << " " << renorm;
    }
    std::vector<int> got_ids;
    std::vector<float> got;
    ASSERT_NO_FATAL_FAILURE(device_route(L, rows, rows, p, got_ids, got));
    EXPECT_EQ(got_ids, ids);
    ASSERT_EQ(got.size(), w.size());
    EXPECT_EQ(0, std::memcmp(got.data(), w.data(), w.size() * sizeof(float)))
        << "scoring " << static_cast<int>(score) << " renormalize " << renorm << " scaling " << scaling;
  }
}

TEST(Device, RepeatedRunsAreBitwiseEqual) {
  SKIP_WITHOUT_DEVICE();
  const int n = 256, k = 8, rows = 64;
  const auto p = params(n, k, 1.0f, 1, lynx::scoring::softmax, false);
  auto d_L = to_device(convert<__nv_bfloat16>(lynx_test::random_logits(rows, n, 9, 1.0f)));
  std::size_t bytes = 0;
  const cudaError_t query = lynx::route<__nv_bfloat16, int>(nullptr, bytes, nullptr, n, rows, rows, p, nullptr, nullptr);
  ASSERT_EQ(query, cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  std::vector<float> first;
  for (int rep = 0; rep < 5; ++rep) {
    thrust::device_vector<int> d_ids(rows * k);
    thrust::device_vector<float> d_w(rows * k);
    ASSERT_EQ(lynx::route(thrust::raw_pointer_cast(ws.data()), bytes, thrust::raw_pointer_cast(d_L.data()), n, rows,
                          rows, p, thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())),
              cudaSuccess);
    const auto w = to_host(d_w);
    if (rep == 0) first = w;
    ASSERT_EQ(first.size(), w.size());
    ASSERT_EQ(0, std::memcmp(first.data(), w.data(), w.size() * sizeof(float)));
  }
}

constexpr int bad_n = 8, bad_rows = 4;

TEST(Device, BadArgumentsReturnInvalidValueAndWriteNothing) {
  SKIP_WITHOUT_DEVICE();
  constexpr int n = bad_n, rows = bad_rows;
  auto d_L = to_device(std::vector<float>(rows * n, 0.5f));
  thrust::device_vector<int> d_ids(rows * 2, 42);
  thrust::device_vector<float> d_w(rows * 2, 42.0f);
  thrust::device_vector<char> ws(1 << 20);
  std::size_t bytes = ws.size();
  const auto call = [&](const lynx::route_params& p, int stride = bad_n, int b = bad_rows) {
    return lynx::route(thrust::raw_pointer_cast(ws.data()), bytes, thrust::raw_pointer_cast(d_L.data()), stride,
                       rows, b, p, thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data()));
  };
  EXPECT_EQ(call(params(n, 9, 1.0f, 1)), cudaErrorInvalidValue);
  EXPECT_EQ(call(params(n, 2, 0.0f, 1)), cudaErrorInvalidValue);
  EXPECT_EQ(call(params(n, 2, 1.0f, 1), 7), cudaErrorInvalidValue);
  EXPECT_EQ(call(params(n, 2, 1.0f, 1), n, 5), cudaErrorInvalidValue);
  EXPECT_EQ(call(params(n, 2, 1.0f, 1), n, 0), cudaSuccess);
  std::size_t small = 16;
  EXPECT_EQ(lynx::route(thrust::raw_pointer_cast(ws.data()), small, thrust::raw_pointer_cast(d_L.data()), n, rows,
                        rows, params(n, 2, 1.0f, 1), thrust::raw_pointer_cast(d_ids.data()),
                        thrust::raw_pointer_cast(d_w.data())),
            cudaErrorInvalidValue);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int x : to_host(d_ids)) EXPECT_EQ(x, 42);
  for (float x : to_host(d_w)) EXPECT_EQ(x, 42.0f);
}

}  // namespace
