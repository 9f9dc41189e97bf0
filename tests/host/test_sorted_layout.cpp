// The expert-sorted layout on the host (lynx::host::sorted_layout and the route / topk_route
// overloads that write it), against a reference written here from the definition in
// sorted_layout.hpp and vLLM's moe_align_block_size rules: a stable sort of the taking-part
// slots by local expert, then each expert's run padded to the block size with rows * k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "../support/layout_buffers.hpp"
#include "../support/params.hpp"
#include "../support/random_logits.hpp"

namespace sorted_layout_tests {

using lynx_test::layout_buffers;

/// The reference, from the definition: independent of the library's counting sort.
template <class IdT>
layout_buffers reference(const std::vector<IdT>& ids, int rows, int k, int n, int block_size,
                         const std::int32_t* map = nullptr, bool pad_sorted = false) {
  layout_buffers r(rows, k, n, block_size, map, pad_sorted);
  const int slots = rows * k;
  std::vector<int> local(slots, -1), order;
  for (int s = 0; s < slots; ++s) {
    const long long id = static_cast<long long>(ids[s]);
    if (id < 0 || id >= n) continue;
    const int e = map ? map[id] : static_cast<int>(id);
    if (e >= 0 && e < n) local[s] = e, order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return local[a] < local[b]; });
  std::fill(r.slot_pos.begin(), r.slot_pos.end(), -1);
  std::fill(r.pos_slot.begin(), r.pos_slot.end(), -1);
  for (std::size_t i = 0; i < order.size(); ++i) r.slot_pos[order[i]] = static_cast<int>(i), r.pos_slot[i] = order[i];
  std::fill(r.active.begin(), r.active.end(), -1);
  std::fill(r.counts.begin(), r.counts.end(), 0);
  std::fill(r.offsets.begin(), r.offsets.end(), static_cast<int>(order.size()));
  int a = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (i == 0 || local[order[i]] != local[order[i - 1]]) {
      r.active[a] = local[order[i]], r.offsets[a] = static_cast<int>(i);
      r.counts[a] = static_cast<int>(std::count(local.begin(), local.end(), local[order[i]]));
      ++a;
    }
  r.num_active[0] = a;
  if (block_size > 0) {  // vLLM: each expert's run, then sentinels up to a multiple of block_size
    std::vector<int> sorted, blocks;
    for (int j = 0; j < a; ++j) {
      for (int i = 0; i < r.counts[j]; ++i) sorted.push_back(order[r.offsets[j] + i]);
      while (sorted.size() % block_size) sorted.push_back(slots);
      while (static_cast<int>(blocks.size()) * block_size < static_cast<int>(sorted.size())) blocks.push_back(r.active[j]);
    }
    r.post[0] = static_cast<int>(sorted.size());
    EXPECT_LE(sorted.size(), r.sorted.size()) << "vLLM's capacity holds every padded run";
    std::fill(r.sorted.begin(), r.sorted.end(), slots);
    std::copy(sorted.begin(), sorted.end(), r.sorted.begin());
    std::fill(r.blocks.begin(), r.blocks.end(), -1);
    std::copy(blocks.begin(), blocks.end(), r.blocks.begin());
  }
  return r;
}

template <class IdT>
layout_buffers library(const std::vector<IdT>& ids, int rows, int k, int n, int block_size,
                       const std::int32_t* map = nullptr, bool pad_sorted = false) {
  layout_buffers b(rows, k, n, block_size, map, pad_sorted);
  EXPECT_EQ(lynx::host::sorted_layout(ids.data(), rows, k, n, b.ref), lynx::status::success);
  return b;
}

void expect_same(const layout_buffers& got, const layout_buffers& want) {
  EXPECT_EQ(got.num_active, want.num_active);
  EXPECT_EQ(got.active, want.active);
  EXPECT_EQ(got.counts, want.counts);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.slot_pos, want.slot_pos);
  EXPECT_EQ(got.pos_slot, want.pos_slot);
  EXPECT_EQ(got.sorted, want.sorted);
  EXPECT_EQ(got.blocks, want.blocks);
  EXPECT_EQ(got.post, want.post);
}

TEST(SortedLayout, VllmDocstringExample) {
  // moe_align_block_size's own example: ids [[2,3,4],[1,2,4],[1,3,4],[1,2,3]], block_size 4.
  const std::vector<int> ids = {2, 3, 4, 1, 2, 4, 1, 3, 4, 1, 2, 3};
  const auto b = library(ids, 4, 3, 5, 4);
  EXPECT_EQ(b.sorted.size(), 12u + 5 * 3);  // numel + E (block_size - 1)
  EXPECT_EQ(b.blocks.size(), 7u);
  const std::vector<int> head = {3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12};
  EXPECT_TRUE(std::equal(head.begin(), head.end(), b.sorted.begin()));
  EXPECT_TRUE(std::all_of(b.sorted.begin() + 16, b.sorted.end(), [](int v) { return v == 12; }));
  EXPECT_EQ(b.blocks, (std::vector<int>{1, 2, 3, 4, -1, -1, -1}));
  EXPECT_EQ(b.post[0], 16);
  EXPECT_EQ(b.num_active[0], 4);
  EXPECT_EQ(b.active, (std::vector<int>{1, 2, 3, 4, -1}));
  EXPECT_EQ(b.counts, (std::vector<int>{3, 3, 3, 3, 0}));
  EXPECT_EQ(b.offsets, (std::vector<int>{0, 3, 6, 9, 12, 12}));
  EXPECT_EQ(b.pos_slot, (std::vector<int>{3, 6, 9, 0, 4, 10, 1, 7, 11, 2, 5, 8}));
  EXPECT_EQ(b.slot_pos, (std::vector<int>{3, 6, 9, 0, 4, 10, 1, 7, 11, 2, 5, 8}));  // its own inverse here
  expect_same(b, reference(ids, 4, 3, 5, 4));
}

TEST(SortedLayout, VllmCapacities) {
  EXPECT_EQ(lynx::vllm_sorted_capacity(128, 128, 16), 128 + 128 * 15);
  EXPECT_EQ(lynx::vllm_sorted_capacity(128, 128, 16, true), (128 + 128 * 15 + 15) / 16 * 16);
  EXPECT_EQ(lynx::vllm_sorted_capacity(8, 128, 16), 8 * 16);  // fewer slots than experts: slots * block_size
  EXPECT_EQ(lynx::vllm_block_capacity(8, 128, 16), 8);
  EXPECT_EQ(lynx::vllm_block_capacity(512, 256, 64), (512 + 256 * 63 + 63) / 64);
  EXPECT_EQ(lynx::vllm_sorted_capacity(0, 64, 16), 0);
}

TEST(SortedLayout, MatchesTheReferenceOnRandomIds) {
  // Any ids: duplicates inside a row, ids outside [0, n) (sentinels), int32 and int64, every
  // block size class, with and without an expert map (remote experts -1, a permutation).
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 300)(rng), k = std::uniform_int_distribution<int>(1, 10)(rng);
    const int rows = std::uniform_int_distribution<int>(0, 70)(rng);
    const int bs = std::vector<int>{0, 1, 4, 16, 64}[trial % 5];
    std::vector<std::int64_t> ids64(static_cast<std::size_t>(rows) * k);
    for (auto& id : ids64) id = std::uniform_int_distribution<int>(-2, n + 1)(rng);
    std::vector<int> ids32(ids64.begin(), ids64.end());
    std::vector<std::int32_t> map(n);
    std::iota(map.begin(), map.end(), 0);
    std::shuffle(map.begin(), map.end(), rng);
    for (auto& m : map)
      if (rng() % 3 == 0) m = -1;
    const std::int32_t* m = trial % 3 ? map.data() : nullptr;
    const bool pad = trial % 7 == 0 && bs > 0;
    SCOPED_TRACE(testing::Message() << "trial " << trial << " n " << n << " k " << k << " rows " << rows << " bs " << bs);
    const auto want = reference(ids32, rows, k, n, bs, m, pad);
    expect_same(library(ids32, rows, k, n, bs, m, pad), want);
    expect_same(library(ids64, rows, k, n, bs, m, pad), want);
  }
}

TEST(SortedLayout, InvariantsOfARoutedBatch) {
  // A real batch: every slot appears once, runs ascend by expert then token, counts and offsets
  // agree with the ids, |K| is the number of distinct ids.
  const int n = 128, k = 8, rows = 64;
  const auto logits = lynx_test::random_logits(rows, n, 3);
  std::vector<int> ids(rows * k);
  std::vector<float> w(rows * k);
  for (const auto kind : {lynx::policy::lynx, lynx::policy::budget}) {
    auto p = lynx_test::params(n, k);
    p.kind = kind;
    if (kind == lynx::policy::budget) p.budget_fraction = 0.5f;
    layout_buffers b(rows, k, n, 16);
    ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{logits.data(), n, rows, rows, ids.data(), w.data()}, p, b.ref),
              lynx::status::success);
    std::vector<int> seen(rows * k, 0);
    for (int i = 0; i < rows * k; ++i) {
      const int s = b.pos_slot[i];
      ASSERT_GE(s, 0);
      ++seen[s];
      EXPECT_EQ(b.slot_pos[s], i);
      if (i > 0) {
        const int prev = b.pos_slot[i - 1];
        EXPECT_TRUE(ids[prev] < ids[s] || (ids[prev] == ids[s] && prev < s)) << i;
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    std::vector<int> distinct(ids);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_EQ(b.num_active[0], static_cast<int>(distinct.size()));
    for (int j = 0; j < b.num_active[0]; ++j) {
      EXPECT_EQ(b.active[j], distinct[j]);
      EXPECT_EQ(b.counts[j], std::count(ids.begin(), ids.end(), distinct[j]));
      EXPECT_EQ(b.offsets[j + 1] - b.offsets[j], b.counts[j]);
    }
    expect_same(b, reference(ids, rows, k, n, 16));
  }
}

TEST(SortedLayout, PaddingRowsAreLeftOutWithTheSentinelAndKeptOtherwise) {
  // Rows >= B and a row with no finite logit do not vote (SPEC §5): with pad_with_sentinel their
  // slots take no part; otherwise their weight-0 pad ids (experts the batch loads) do.
  const int n = 64, k = 4, rows = 12, valid = 9;
  auto logits = lynx_test::random_logits(rows, n, 11);
  std::fill(logits.begin() + 2 * n, logits.begin() + 3 * n, -INFINITY);  // row 2 votes for nothing
  std::vector<int> ids(rows * k);
  std::vector<float> w(rows * k);
  for (const bool sentinel : {true, false}) {
    auto p = lynx_test::params(n, k);
    p.pad_with_sentinel = sentinel, p.sentinel_id = -1;
    for (const bool plain : {false, true}) {
      layout_buffers b(rows, k, n, 8);
      const lynx::batch_ref<float, int> batch{logits.data(), n, rows, valid, ids.data(), w.data()};
      ASSERT_EQ(plain ? lynx::host::topk_route(batch, p, b.ref) : lynx::host::route(batch, p, b.ref),
                lynx::status::success);
      const int left_out = sentinel ? (rows - valid + 1) * k : 0;
      EXPECT_EQ(std::count(b.slot_pos.begin(), b.slot_pos.end(), -1), left_out);
      for (int t : {2, 9, 10, 11})
        for (int j = 0; j < k; ++j) EXPECT_EQ(b.slot_pos[t * k + j] < 0, sentinel) << t;
      EXPECT_EQ(b.offsets[b.num_active[0]], rows * k - left_out);
      expect_same(b, reference(ids, rows, k, n, 8));
    }
  }
}

TEST(SortedLayout, ExpertMapDropsExactlyTheRemoteSlots) {
  const int n = 32, k = 4, rows = 20;
  const auto logits = lynx_test::random_logits(rows, n, 5);
  std::vector<int> ids(rows * k);
  std::vector<float> w(rows * k);
  std::vector<std::int32_t> map(n, -1);
  for (int e = 8; e < 16; ++e) map[e] = e - 8;  // this rank holds experts 8..15 as 0..7
  layout_buffers b(rows, k, n, 4, map.data());
  ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{logits.data(), n, rows, rows, ids.data(), w.data()},
                              lynx_test::params(n, k), b.ref),
            lynx::status::success);
  int local = 0;
  for (int s = 0; s < rows * k; ++s) {
    const bool here = ids[s] >= 8 && ids[s] < 16;
    local += here;
    EXPECT_EQ(b.slot_pos[s] >= 0, here) << s;
  }
  EXPECT_EQ(b.offsets[b.num_active[0]], local);
  for (int j = 0; j < b.num_active[0]; ++j) EXPECT_LT(b.active[j], 8);
  for (int i = 0; i < b.post[0] / 4; ++i) EXPECT_TRUE(b.blocks[i] >= 0 && b.blocks[i] < 8);
  expect_same(b, reference(ids, rows, k, n, 4, map.data()));
}

TEST(SortedLayout, NoTokensGiveTheEmptyLayout) {
  // B = 0 routes nothing (no ids written): the layout is written, and empty.
  const int n = 16, k = 2, rows = 5;
  const auto logits = lynx_test::random_logits(rows, n, 1);
  std::vector<int> ids(rows * k, 3);
  std::vector<float> w(rows * k);
  layout_buffers b(rows, k, n, 4);
  ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{logits.data(), n, rows, 0, ids.data(), w.data()},
                              lynx_test::params(n, k), b.ref),
            lynx::status::success);
  EXPECT_EQ(b.num_active[0], 0);
  EXPECT_EQ(b.post[0], 0);
  EXPECT_TRUE(std::all_of(b.slot_pos.begin(), b.slot_pos.end(), [](int v) { return v == -1; }));
  EXPECT_TRUE(std::all_of(b.sorted.begin(), b.sorted.end(), [&](int v) { return v == rows * k; }));
  EXPECT_TRUE(std::all_of(b.blocks.begin(), b.blocks.end(), [](int v) { return v == -1; }));
  expect_same(b, reference(std::vector<int>(rows * k, -1), rows, k, n, 4));
}

TEST(SortedLayout, PointerCountOfZeroLaysOutThePaddingRows) {
  // A pointer count that reads 0 routes every row as padding (as a kernel in a graph replay
  // does), so the layout holds the pad ids' slots; with the sentinel, none, as for a host 0.
  const int n = 16, k = 2, rows = 5, zero = 0;
  const auto logits = lynx_test::random_logits(rows, n, 1);
  for (const bool sentinel : {false, true}) {
    auto p = lynx_test::params(n, k);
    p.pad_with_sentinel = sentinel, p.sentinel_id = -1;
    std::vector<int> ids(rows * k, 3);
    std::vector<float> w(rows * k);
    layout_buffers b(rows, k, n, 4);
    ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, int>{logits.data(), n, rows, lynx::token_count(&zero),
                                                            ids.data(), w.data()},
                                p, b.ref),
              lynx::status::success);
    std::vector<int> pad(rows * k);
    for (int i = 0; i < rows * k; ++i) pad[i] = sentinel ? -1 : i % k;
    EXPECT_EQ(ids, pad);
    EXPECT_EQ(b.num_active[0], sentinel ? 0 : k);
    expect_same(b, reference(pad, rows, k, n, 4));
  }
}

TEST(SortedLayout, BadLayoutsAreRejectedAndWriteNothing) {
  const int n = 16, k = 2, rows = 4;
  const std::vector<int> ids(rows * k, 1);
  layout_buffers b(rows, k, n, 4);
  b.ref.block_size = 0;  // vLLM arrays without a block size
  const layout_buffers before = b;
  EXPECT_EQ(lynx::host::sorted_layout(ids.data(), rows, k, n, b.ref), lynx::status::invalid_layout);
  const auto logits = lynx_test::random_logits(rows, n, 2);
  std::vector<int> out(rows * k, -5);
  std::vector<float> w(rows * k, -5.0f);
  EXPECT_EQ(lynx::host::route(lynx::batch_ref<float, int>{logits.data(), n, rows, rows, out.data(), w.data()},
                              lynx_test::params(n, k), b.ref),
            lynx::status::invalid_layout);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](int v) { return v == -5; })) << "no ids written either";
  EXPECT_EQ(lynx::host::sorted_layout(ids.data(), rows, k, 0, b.ref), lynx::status::invalid_num_experts);
  EXPECT_EQ(lynx::host::sorted_layout(ids.data(), -1, k, n, b.ref), lynx::status::invalid_num_rows);
  EXPECT_TRUE(b == before);
  EXPECT_NE(std::string(lynx::status_string(lynx::status::invalid_layout)), "unknown status");
}

}  // namespace sorted_layout_tests
