// The expert-sorted layout on the device against the host path, every array bitwise: written by
// lynx::route (the fused kernel, in its one launch, and the per-stage path), by lynx::topk_route's
// last block, and by lynx::sorted_layout from any ids; B = 0; the device-side token count under
// graph replay.
// Skips without a CUDA device (the graph test also where the runtime has no graph API).
#include <gtest/gtest.h>

#include <thrust/device_vector.h>

#include <cstdint>
#include <random>
#include <vector>

#include <lynx/lynx.cuh>

#include "../support/device.hpp"
#include "../support/device_vectors.hpp"
#include "../support/layout_buffers.hpp"
#include "../support/params.hpp"
#include "../support/random_logits.hpp"

namespace {

using lynx_test::layout_buffers;

using lynx_test::to_device;
using lynx_test::to_host;

/// The device twin of a layout_buffers (same canaries, same arrays asked for).
struct device_layout {
  thrust::device_vector<std::int32_t> num_active, active, counts, offsets, slot_pos, pos_slot, sorted, blocks, post, map;
  lynx::sorted_layout_ref ref;
  explicit device_layout(const layout_buffers& h, const std::vector<std::int32_t>& expert_map = {})
      : num_active(to_device(h.num_active)), active(to_device(h.active)), counts(to_device(h.counts)),
        offsets(to_device(h.offsets)), slot_pos(to_device(h.slot_pos)), pos_slot(to_device(h.pos_slot)),
        sorted(to_device(h.sorted)), blocks(to_device(h.blocks)), post(to_device(h.post)), map(to_device(expert_map)) {
    const auto at = [](thrust::device_vector<std::int32_t>& v, const void* wanted) {
      return wanted ? thrust::raw_pointer_cast(v.data()) : nullptr;
    };
    ref = h.ref;
    ref.expert_map = expert_map.empty() ? nullptr : thrust::raw_pointer_cast(map.data());
    ref.num_active = at(num_active, h.ref.num_active), ref.active_experts = at(active, h.ref.active_experts);
    ref.expert_counts = at(counts, h.ref.expert_counts), ref.expert_offsets = at(offsets, h.ref.expert_offsets);
    ref.slot_position = at(slot_pos, h.ref.slot_position), ref.position_slot = at(pos_slot, h.ref.position_slot);
    ref.sorted_token_ids = at(sorted, h.ref.sorted_token_ids), ref.expert_ids = at(blocks, h.ref.expert_ids);
    ref.num_tokens_post_padded = at(post, h.ref.num_tokens_post_padded);
  }
  void download(layout_buffers& h) const {
    h.num_active = to_host(num_active), h.active = to_host(active), h.counts = to_host(counts);
    h.offsets = to_host(offsets), h.slot_pos = to_host(slot_pos), h.pos_slot = to_host(pos_slot);
    h.sorted = to_host(sorted), h.blocks = to_host(blocks), h.post = to_host(post);
  }
};

void expect_same(const layout_buffers& got, const layout_buffers& want, const char* what) {
  EXPECT_EQ(got.num_active, want.num_active) << what;
  EXPECT_EQ(got.active, want.active) << what;
  EXPECT_EQ(got.counts, want.counts) << what;
  EXPECT_EQ(got.offsets, want.offsets) << what;
  EXPECT_EQ(got.slot_pos, want.slot_pos) << what;
  EXPECT_EQ(got.pos_slot, want.pos_slot) << what;
  EXPECT_EQ(got.sorted, want.sorted) << what;
  EXPECT_EQ(got.blocks, want.blocks) << what;
  EXPECT_EQ(got.post, want.post) << what;
}

using lynx_test::entry;

struct layout_case {
  int n, k, rows, valid, block_size;
  lynx::policy kind;
  bool with_map, sentinel;
};

/// One call on the device and on the host with the same layout arrays; ids and layout bitwise.
template <class IdT>
void check_call(entry which, const layout_case& c, std::uint32_t seed,
                lynx::detail::decode_choice choice = lynx::detail::decode_choice::automatic) {
  auto p = lynx_test::params(c.n, c.k, 3.0f, 2);
  p.kind = c.kind;
  if (c.kind == lynx::policy::budget) p.budget_fraction = 0.6f;
  p.pad_with_sentinel = c.sentinel, p.sentinel_id = c.n;
  const auto L = lynx_test::random_logits(c.rows, c.n, seed, 1.0f, seed % 2 ? 0.25f : 0.0f);
  std::vector<std::int32_t> map;
  if (c.with_map) {  // a rank holding every other expert
    map.assign(c.n, -1);
    for (int e = 0; e < c.n; e += 2) map[e] = e / 2;
  }
  const std::size_t slots = static_cast<std::size_t>(c.rows) * c.k;
  layout_buffers want(c.rows, c.k, c.n, c.block_size, map.empty() ? nullptr : map.data()), got = want;
  std::vector<IdT> ids(slots), d_ids_host;
  std::vector<float> w(slots);
  const lynx::batch_ref<float, IdT> hb{L.data(), c.n, c.rows, c.valid, ids.data(), w.data()};
  ASSERT_EQ(which == entry::route ? lynx::host::route(hb, p, want.ref) : lynx::host::topk_route(hb, p, want.ref),
            lynx::status::success);

  device_layout dl(got, map);
  auto d_L = to_device(L);
  thrust::device_vector<IdT> d_ids(slots, IdT(-5));
  thrust::device_vector<float> d_w(slots);
  const lynx::batch_ref<float, IdT> db{thrust::raw_pointer_cast(d_L.data()), c.n, c.rows, c.valid,
                                       thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())};
  std::size_t bytes = 0;
  const lynx::batch_ref<float, IdT> query{nullptr, c.n, c.rows, c.valid, nullptr, nullptr};
  ASSERT_EQ(which == entry::route ? lynx::route(nullptr, bytes, query, p, dl.ref) : lynx::topk_route(nullptr, bytes, query, p, dl.ref),
            cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  void* w_ptr = thrust::raw_pointer_cast(ws.data());
  // topk_route's one-block call sets no memset: a stale workspace must not matter.
  if (which == entry::topk) ASSERT_EQ(cudaMemset(w_ptr, 0xFF, bytes), cudaSuccess);
  const cudaError_t e = which == entry::route ? lynx::detail::route_with(choice, w_ptr, bytes, db, p, dl.ref, cudaStream_t{})
                                              : lynx::topk_route(w_ptr, bytes, db, p, dl.ref);
  if (e == cudaErrorNotSupported && choice == lynx::detail::decode_choice::grid)
    GTEST_SKIP() << "this device cannot hold the grid path's blocks at once";
  ASSERT_EQ(e, cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d_ids_host = to_host(d_ids);
  if (c.valid > 0) EXPECT_EQ(d_ids_host, ids) << "ids";
  dl.download(got);
  expect_same(got, want, which == entry::route ? "route" : "topk_route");
}

const layout_case route_cases[] = {
    // n, k, rows, valid, block, policy, map, sentinel
    {128, 8, 16, 16, 16, lynx::policy::lynx, false, false},
    {128, 8, 64, 50, 16, lynx::policy::budget, false, true},
    {256, 8, 64, 64, 64, lynx::policy::lynx, true, false},
    {160, 6, 33, 30, 1, lynx::policy::piggyback, false, false},
    {64, 6, 1, 1, 16, lynx::policy::lynx, false, false},
    {512, 10, 40, 40, 32, lynx::policy::lynx, true, true},
    {128, 8, 600, 590, 16, lynx::policy::lynx, false, true},  // the per-stage path: one more launch
};

TEST(DeviceLayout, RouteWritesTheHostLayout) {
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 1;
  for (const auto& c : route_cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " k " << c.k << " rows " << c.rows << " valid " << c.valid);
    ASSERT_NO_FATAL_FAILURE(check_call<std::int32_t>(entry::route, c, seed++));
  }
  ASSERT_NO_FATAL_FAILURE(check_call<std::int64_t>(entry::route, route_cases[1], 99));
}

TEST(DeviceLayout, FusedPathRoutesAndLaysOutInOneLaunch) {
  // On the fused path the layout is the routing kernel's last phase at every tier (the MaxN 128
  // tiers' 1024-thread kernels included): a captured call is one kernel node and nothing else.
  SKIP_WITHOUT_DEVICE();
  const layout_case cases[] = {
      // n, k, rows, valid, block, policy (at most a row per warp, or the budget: the fused path)
      {128, 8, 16, 16, 16, lynx::policy::lynx, false, false},
      {128, 8, 64, 50, 16, lynx::policy::budget, false, false},
      {64, 6, 1, 1, 16, lynx::policy::lynx, false, false},
      {256, 8, 16, 12, 16, lynx::policy::piggyback, false, false},
      {512, 10, 16, 16, 32, lynx::policy::budget, false, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " k " << c.k << " rows " << c.rows);
    auto p = lynx_test::params(c.n, c.k, 3.0f, 2);
    p.kind = c.kind;
    if (c.kind == lynx::policy::budget) p.budget_fraction = 0.6f;  // a budget policy needs a budget
    const auto L = lynx_test::random_logits(c.rows, c.n, 7);
    layout_buffers h(c.rows, c.k, c.n, c.block_size);
    device_layout dl(h);
    auto d_L = to_device(L);
    thrust::device_vector<std::int32_t> d_ids(static_cast<std::size_t>(c.rows) * c.k);
    thrust::device_vector<float> d_w(d_ids.size());
    const lynx::batch_ref<float, std::int32_t> batch{thrust::raw_pointer_cast(d_L.data()), c.n, c.rows, c.valid,
                                                     thrust::raw_pointer_cast(d_ids.data()),
                                                     thrust::raw_pointer_cast(d_w.data())};
    ASSERT_EQ(lynx::detail::choose_route_path(c.rows, c.n, c.k), lynx::detail::route_path::fused);
    std::size_t bytes = 0;
    ASSERT_EQ(lynx::route(nullptr, bytes, batch, p, dl.ref), cudaSuccess);
    thrust::device_vector<char> ws(bytes);
    const auto graph = lynx_test::capture_call([&](cudaStream_t stream) {
      return lynx::route(thrust::raw_pointer_cast(ws.data()), bytes, batch, p, dl.ref, stream);
    });
    if (!graph.supported) GTEST_SKIP() << "this CUDA runtime cannot capture graphs";
    ASSERT_EQ(graph.called, cudaSuccess);
    ASSERT_EQ(graph.ended, cudaSuccess);
    ASSERT_EQ(graph.nodes.size(), 1u);
    EXPECT_EQ(graph.nodes[0], cudaGraphNodeTypeKernel);
  }
}

TEST(DeviceLayout, GridPathWritesTheHostLayout) {
  // The grid path's last block writes the layout (lynx::detail::route_with forces the path).
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 40;
  for (const auto& c : route_cases) {
    if (c.kind == lynx::policy::budget || c.rows > 512) continue;
    SCOPED_TRACE(testing::Message() << "n " << c.n << " k " << c.k << " rows " << c.rows << " valid " << c.valid);
    ASSERT_NO_FATAL_FAILURE(check_call<std::int32_t>(entry::route, c, seed++, lynx::detail::decode_choice::grid));
  }
  ASSERT_NO_FATAL_FAILURE(
      check_call<std::int64_t>(entry::route, route_cases[2], 77, lynx::detail::decode_choice::grid));
}

TEST(DeviceLayout, TopkRouteWritesTheHostLayout) {
  SKIP_WITHOUT_DEVICE();
  const layout_case cases[] = {
      {128, 8, 16, 16, 16, lynx::policy::lynx, false, false},
      {256, 8, 64, 60, 64, lynx::policy::lynx, true, true},
      {128, 4, 300, 300, 16, lynx::policy::lynx, false, false},  // 38 blocks: the last one lays out all
      {128, 8, 6, 4, 16, lynx::policy::lynx, false, false},      // one block (no memset): pads, then the layout
      {64, 4, 8, 6, 8, lynx::policy::lynx, true, true},          // one block, sentinel pads
  };
  std::uint32_t seed = 20;
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " k " << c.k << " rows " << c.rows);
    ASSERT_NO_FATAL_FAILURE(check_call<std::int32_t>(entry::topk, c, seed++));
  }
  ASSERT_NO_FATAL_FAILURE(check_call<std::int64_t>(entry::topk, cases[0], 31));
}

template <class IdT>
void check_standalone(int n, int k, int rows, int block_size, bool with_map, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<IdT> ids(static_cast<std::size_t>(rows) * k);
  for (auto& id : ids) id = std::uniform_int_distribution<int>(-1, n)(rng);  // duplicates and outsiders too
  std::vector<std::int32_t> map;
  if (with_map) {
    map.resize(n);
    for (int e = 0; e < n; ++e) map[e] = (e * 7) % 3 ? (n - 1 - e) : -1;
  }
  layout_buffers want(rows, k, n, block_size, map.empty() ? nullptr : map.data()), got = want;
  ASSERT_EQ(lynx::host::sorted_layout(ids.data(), rows, k, n, want.ref), lynx::status::success);
  device_layout dl(got, map);
  auto d_ids = to_device(ids);
  ASSERT_EQ(lynx::sorted_layout(thrust::raw_pointer_cast(d_ids.data()), rows, k, n, dl.ref), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dl.download(got);
  expect_same(got, want, "sorted_layout");
}

TEST(DeviceLayout, StandaloneLayoutOfAnyIds) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_NO_FATAL_FAILURE(check_standalone<std::int32_t>(128, 8, 100, 16, false, 1));  // 800 slots: two passes
  ASSERT_NO_FATAL_FAILURE(check_standalone<std::int64_t>(1000, 8, 70, 64, true, 2));   // the 1024 tier
  ASSERT_NO_FATAL_FAILURE(check_standalone<std::int32_t>(300, 3, 0, 8, false, 3));     // no rows
}

TEST(DeviceLayout, NoTokensWriteTheEmptyLayout) {
  SKIP_WITHOUT_DEVICE();
  const layout_case c{128, 8, 12, 0, 16, lynx::policy::lynx, false, false};
  ASSERT_NO_FATAL_FAILURE(check_call<std::int32_t>(entry::route, c, 5));
  ASSERT_NO_FATAL_FAILURE(check_call<std::int32_t>(entry::topk, c, 6));
}

TEST(DeviceLayout, GraphReplayWithChangedDeviceTokenCount) {
  SKIP_WITHOUT_DEVICE();
  const int n = 128, k = 8, rows = 64, bs = 16;
  auto p = lynx_test::params(n, k, 3.0f, 2);
  p.pad_with_sentinel = true, p.sentinel_id = -1;  // padding takes no part, so B = 0 is the empty layout
  const auto L = lynx_test::random_logits(rows, n, 8);
  auto d_L = to_device(L);
  thrust::device_vector<int> d_count(1, rows);
  thrust::device_vector<std::int32_t> d_ids(rows * k);
  thrust::device_vector<float> d_w(rows * k);
  layout_buffers got(rows, k, n, bs);
  device_layout dl(got);
  const lynx::batch_ref<float, std::int32_t> batch{thrust::raw_pointer_cast(d_L.data()), n, rows,
                                                   lynx::token_count(thrust::raw_pointer_cast(d_count.data())),
                                                   thrust::raw_pointer_cast(d_ids.data()),
                                                   thrust::raw_pointer_cast(d_w.data())};
  std::size_t bytes = 0;
  ASSERT_EQ(lynx::route(nullptr, bytes, batch, p, dl.ref), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  if (const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal); e != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream);
    GTEST_SKIP() << "this CUDA runtime cannot capture graphs (" << cudaGetErrorString(e) << ")";
  }
  ASSERT_EQ(lynx::route(thrust::raw_pointer_cast(ws.data()), bytes, batch, p, dl.ref, stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int b : {64, 16, 1, 33, 0}) {
    cudaMemcpyAsync(thrust::raw_pointer_cast(d_count.data()), &b, sizeof b, cudaMemcpyHostToDevice, stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    layout_buffers want(rows, k, n, bs);
    std::vector<std::int32_t> ids(rows * k);
    std::vector<float> w(rows * k);
    ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, std::int32_t>{L.data(), n, rows, b, ids.data(), w.data()}, p,
                                want.ref),
              lynx::status::success);
    dl.download(got);
    SCOPED_TRACE(testing::Message() << "B " << b);
    expect_same(got, want, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
