#pragma once
// The library's kernels, each a thin composition of the public warp- and block-level
// functions (warp/, block/): the fused decode step (one block), the baseline router, and one
// kernel per stage for any size. Rows are a warp's work; batch-wide state is bit sets and
// integer counts, so results do not depend on which warp finishes first, and ids and weights
// are bitwise the host path's.

#include <cub/block/block_histogram.cuh>

#include <cstdint>
#include <type_traits>

#include "../../batch.hpp"
#include "../../half.hpp"
#include "../../block/active_set.cuh"
#include "../../block/route.cuh"
#include "../../block/budget.cuh"
#include "../../block/score_experts.cuh"
#include "../../block/sorted_layout.cuh"
#include "../../params.hpp"
#include "../../sorted_layout.hpp"
#include "../../warp/affinity_bin.cuh"
#include "../../warp/remap_topk.cuh"
#include "../../warp/router.cuh"
#include "../../warp/row.cuh"
#include "../../warp/topk.cuh"
#include "../histogram_rank.hpp"
#include "dispatch.hpp"
#include "batch_rows.cuh"
#include "warp_ops.cuh"
#include "workspace.hpp"

namespace lynx {
namespace detail {

// ---------------------------------------------------------------------------------------------
// The fused path: the whole step in one block (block_route), for num_rows <= 512 and N <= 512.

/// The sorted layout of the batch's ids, block-collective, for the library's type-erased ids.
template <class Layout>
__device__ __forceinline__ void any_batch_layout(typename Layout::TempStorage& temp, const void* ids, bool ids64,
                                                 int num_rows, int k, int n, const sorted_layout_ref& out) {
  if (ids64)
    Layout(temp).run(static_cast<const std::int64_t*>(ids), num_rows, k, n, out);
  else
    Layout(temp).run(static_cast<const std::int32_t*>(ids), num_rows, k, n, out);
}

/// With a layout asked for, the block lays out the ids it has just written,
/// in the shared memory the routing used. Router: instantiated for a model router's calls
/// (block_route::run_router) or for plain ones (run_plain), each with the registers it needs.
template <int MaxN, int K, bool Router>
__global__ void __launch_bounds__(fused_threads(MaxN, Router), 1)
    fused_route_kernel(any_batch batch, route_params p, remap_workspace ws, sorted_layout_ref layout) {
  constexpr int threads = fused_threads(MaxN, Router);
  using route_t = block_route<MaxN, K, threads>;
  using layout_t = block_sorted_layout<MaxN, threads>;
  union shared_t {
    typename route_t::TempStorage route;
    typename layout_t::TempStorage layout;
  };
  __shared__ shared_t temp;
  const route_scratch scratch{ws.plain, budget_scratch{ws.share, ws.top, ws.kth}};
  if constexpr (Router)
    route_t(temp.route).run_router(batch, p, scratch);
  else
    route_t(temp.route).run_plain(batch, p, scratch);
  if (!layout.wanted()) return;
  __syncthreads();
  any_batch_layout<layout_t>(temp.layout, batch.ids, batch.ids64, batch.num_rows, p.top_k, p.num_experts, layout);
}

// ---------------------------------------------------------------------------------------------
// topk_route: every row's plain top-k and weights, a warp per row across blocks; the last block
// to finish (a counter, after a fence: CUDA's threadFenceReduction pattern) pads the rows that
// do not vote from the union of the plain top-k. A grid of one block (up to 8 rows: decode)
// keeps that union in shared memory and needs no counter, so its launcher sets no memset: one
// launch, as an engine's own top-k kernel.

/// With a layout asked for, the last block also lays out every block's ids, in dynamic shared
/// memory (topk_layout_bytes) that a call without a layout does not reserve.
template <int MaxN>
using topk_layout_t = block_sorted_layout<MaxN, warp_block_threads>;
template <int MaxN>
constexpr std::size_t topk_layout_bytes = sizeof(typename topk_layout_t<MaxN>::TempStorage);

template <int MaxN, int K>
__global__ void __launch_bounds__(warp_block_threads, 1)
    topk_route_kernel(any_batch batch, route_params p, topk_workspace ws, sorted_layout_ref layout) {
  constexpr int warps = warp_block_threads / 32;
  __shared__ typename block_decide<warp_block_threads>::TempStorage decide_temp;
  __shared__ std::uint32_t plain_s[set_words];
  __shared__ bool last;
  const int n = p.num_experts, k = p.top_k, lane = lane_id();
  const int rows = batch.num_rows, t = blockIdx.x * warps + static_cast<int>(threadIdx.x) / 32;
  const bool alone = gridDim.x == 1;  // the union in plain_s; ws.state is not zeroed (topk_route_zeroes_state)
  if (alone) {
    for (int i = threadIdx.x; i < set_words; i += warp_block_threads) plain_s[i] = 0;
    __syncthreads();
  }
  if (t < rows) {
    warp_row<MaxN> row;
    batch_load(batch, row, t, n, t < batch.valid.rows(rows));
    if (lane == 0) ws.votes[t] = row.votes();
    if (row.votes()) {
      const std::uint64_t plain =
          p.router.custom_choice() ? warp_router_topk<K>(row, n, k, p.router) : warp_topk<K>(row.key, k);
      mark_topk(alone ? plain_s : ws.plain_set(), plain, k);
      batch_emit_scaled<K>(batch, t, plain, k, p, warp_row_mass<K>(row, plain, k, p.score, p.renormalize));
    }
  }
  __syncthreads();
  if (!alone) {
    if (threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(ws.blocks_done(), 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int i = threadIdx.x; i < set_words; i += warp_block_threads) plain_s[i] = __ldcg(ws.plain_set() + i);
    __syncthreads();
  }
  // Most batches have no row to pad: then neither the pad ids nor a pass over the rows.
  bool pads = false;
  for (int r = static_cast<int>(threadIdx.x); r < rows; r += warp_block_threads) pads |= !__ldcg(ws.votes + r);
  if (__syncthreads_or(pads)) {
    const block_decide<warp_block_threads> decision(decide_temp, plain_s, plain_s, n, k);  // no fallback: pads only
    for (int r = static_cast<int>(threadIdx.x) / 32; r < rows; r += warps)
      if (!__ldcg(ws.votes + r)) batch_emit_pad(batch, r, decision.pad_ids(), k, p);
  }
  if (!layout.wanted()) return;
  __syncthreads();
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  any_batch_layout<topk_layout_t<MaxN>>(*reinterpret_cast<typename topk_layout_t<MaxN>::TempStorage*>(dynamic_smem),
                                        batch.ids, batch.ids64, rows, k, n, layout);
}

// ---------------------------------------------------------------------------------------------
// The sorted layout in a launch of its own (lynx::sorted_layout, the per-stage path, B = 0):
// one block.

inline constexpr int layout_threads = 512;
template <int MaxN, class IdT>
__global__ void __launch_bounds__(layout_threads, 1)
    sorted_layout_kernel(const IdT* ids, int num_rows, int k, int n, sorted_layout_ref out) {
  using layout_t = block_sorted_layout<MaxN, layout_threads>;
  __shared__ typename layout_t::TempStorage temp;
  layout_t(temp).run(ids, num_rows, k, n, out);
}

/// One launch of sorted_layout_kernel for n experts (ids == null: no slot takes part).
template <class IdT>
cudaError_t launch_sorted_layout(const IdT* ids, int num_rows, int k, int n, const sorted_layout_ref& out,
                                 cudaStream_t stream) {
  const auto go = [&](auto max_n) {
    sorted_layout_kernel<decltype(max_n)::value, IdT><<<1, layout_threads, 0, stream>>>(ids, num_rows, k, n, out);
    return cudaPeekAtLastError();
  };
  if (n <= 128) return go(std::integral_constant<int, 128>{});
  if (n <= 256) return go(std::integral_constant<int, 256>{});
  if (n <= 512) return go(std::integral_constant<int, 512>{});
  return go(std::integral_constant<int, max_experts>{});
}
inline cudaError_t launch_sorted_layout(const any_batch& batch, bool routed, int k, int n, const sorted_layout_ref& out,
                                        cudaStream_t stream) {
  if (batch.ids64)
    return launch_sorted_layout(routed ? static_cast<const std::int64_t*>(batch.ids) : nullptr, batch.num_rows, k, n,
                                out, stream);
  return launch_sorted_layout(routed ? static_cast<const std::int32_t*>(batch.ids) : nullptr, batch.num_rows, k, n, out,
                              stream);
}

// ---------------------------------------------------------------------------------------------
// One kernel per stage (any size). State between them lives in the workspace's bit sets and
// per-row arrays.

template <int MaxN>
__global__ void __launch_bounds__(warp_block_threads, 1)
    affinity_bin_kernel(any_batch batch, int n, float alpha, int depth, std::int8_t* bins) {
  const int t = blockIdx.x * (warp_block_threads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (t >= batch.num_rows) return;
  warp_row<MaxN> row;
  batch_load(batch, row, t, n, t < batch.valid.rows(batch.num_rows));
  std::int8_t q[MaxN / 32];
  warp_affinity_bin(row, alpha, depth, q);
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    if (e < n) bins[static_cast<std::int64_t>(t) * n + e] = q[i];
  }
}

/// The lynx policy's bins for a model router (docs/ROUTERS.md): of each row's choice scores
/// against its first choice, the deepest bin outside its kept groups (warp_router_bins), for
/// lynx::route's per-stage path.
template <int MaxN>
__global__ void __launch_bounds__(warp_block_threads, 1)
    router_bin_kernel(any_batch batch, route_params p, std::int8_t* bins) {
  const int t = blockIdx.x * (warp_block_threads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (t >= batch.num_rows) return;
  const int n = p.num_experts;
  warp_row<MaxN> row;
  batch_load(batch, row, t, n, t < batch.valid.rows(batch.num_rows));
  std::int8_t q[MaxN / 32];
  if (row.votes()) {
    warp_row<MaxN> choice;
    warp_router_choice(row, n, p.router, choice);
    std::uint64_t local = 0;  // the first choice: the largest choice key
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) local = choice.key[i] > local ? choice.key[i] : local;
    choice.max = key_logit(warp_max_key(local));
    warp_router_bins(choice, n, p.alpha, bin_depth(p.beta), q);
  } else {
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) q[i] = no_vote;
  }
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const int e = warp_row<MaxN>::expert(i);
    if (e < n) bins[static_cast<std::int64_t>(t) * n + e] = q[i];
  }
}

/// SPEC §3.2, a block per expert: cub::BlockHistogram over the expert's column of bins.
/// Non-voting entries go to an extra bin that is never written out.
template <int BlockThreads, int Items>
__global__ void __launch_bounds__(BlockThreads)
    histogram_kernel(const std::int8_t* bins, int num_rows, int n, int nbins, std::int32_t* counts) {
  using histogram_t = cub::BlockHistogram<std::uint8_t, BlockThreads, Items, max_bins + 1, cub::BLOCK_HISTO_ATOMIC>;
  __shared__ typename histogram_t::TempStorage temp;
  __shared__ unsigned int h[max_bins + 1];
  for (int e = blockIdx.x; e < n; e += gridDim.x) {
    histogram_t histogram(temp);
    histogram.InitHistogram(h);
    __syncthreads();
    for (int base = 0; base < num_rows; base += BlockThreads * Items) {
      std::uint8_t items[Items];
#pragma unroll
      for (int i = 0; i < Items; ++i) {
        const int t = base + static_cast<int>(threadIdx.x) * Items + i;
        const int j = t < num_rows ? bin_digit(bins[static_cast<std::int64_t>(t) * n + e]) : -1;
        items[i] = static_cast<std::uint8_t>(j < 0 ? max_bins : j);
      }
      histogram.Composite(items, h);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < nbins; j += BlockThreads) counts[j * n + e] = static_cast<std::int32_t>(h[j]);
    __syncthreads();
  }
}

/// Every expert's exact rank from the counts (block_rank_histograms), one block.
/// (Templates, like every kernel here, so that a header-only library links from many units.)
inline constexpr int rank_threads = 1024;
template <int Threads = rank_threads>
__global__ void __launch_bounds__(Threads)
    rank_kernel(const std::int32_t* counts, int n, int nbins, int num_rows, std::int32_t* ranks) {
  __shared__ std::uint64_t sort_key[max_experts];
  block_rank_histograms<Threads>([&](int j, int e) { return counts[j * n + e]; }, n, nbins, num_rows, sort_key,
                                      ranks);
}

/// SPEC §3.3 steps 1-2, a warp per row: votes, plain top-k, mass, and the row's share of K.
template <int MaxN, int K>
__global__ void __launch_bounds__(warp_block_threads, 1)
    select_kernel(any_batch batch, const std::int8_t* bins, const std::int32_t* ranks, route_params p,
                  remap_workspace ws) {
  __shared__ std::int32_t rank_s[MaxN];
  const int n = p.num_experts, k = p.top_k, lane = lane_id();
  if (p.kind == policy::lynx)
    for (int e = threadIdx.x; e < n; e += warp_block_threads) rank_s[e] = ranks[e];
  __syncthreads();
  const int rows = batch.num_rows, t = blockIdx.x * (warp_block_threads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (t >= rows) return;
  warp_row<MaxN> row;
  batch_load(batch, row, t, n, t < batch.valid.rows(rows));
  if (lane == 0) ws.votes[t] = row.votes();
  if (!row.votes()) return;
  // With a model router, its row and choice P (docs/ROUTERS.md): P's choice keys go to the
  // scratch, the mass is of P's logits, and the z top-k runs on the router's row.
  const bool router = !p.router.plain();
  warp_row<MaxN> choice;
  if (router) warp_router_choice(row, n, p.router, choice);
  const std::uint64_t plain = router ? warp_router_plain<K>(choice, k) : warp_topk<K>(row.key, k);
  if (lane < k) ws.plain[static_cast<std::size_t>(t) * k + lane] = plain;
  mark_topk(ws.plain_set(), plain, k);
  const float mass =
      warp_row_mass<K>(row, router ? warp_by_logit<K>(row, plain, k) : plain, k, p.score, p.renormalize);
  if (lane == 0) ws.row_mass[t] = mass;
  select_row<K>(plain, is_pinned(batch.pinned, t), p, ws.active(), ws.anchors(), [&] {
    std::int8_t q[MaxN / 32];  // the caller's bins (remap_topk takes them as given)
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) {
      const int e = warp_row<MaxN>::expert(i);
      q[i] = e < n ? bins[static_cast<std::int64_t>(t) * n + e] : no_vote;
    }
    return router ? warp_z_topk<K>(choice, q, rank_s, k) : warp_z_topk<K>(row, q, rank_s, k);
  });
}

/// The budget greedy of the per-stage path: one block (a step is a block-level phase).
inline constexpr int budget_threads = 256;
template <int MaxN, int K>
__global__ void __launch_bounds__(budget_threads, 1) budget_kernel(any_batch batch, route_params p, remap_workspace ws) {
  using budget_t = block_budget<MaxN, K, budget_threads>;
  __shared__ typename budget_t::TempStorage temp;
  const int n = p.num_experts, k = p.top_k;
  const bool router = !p.router.plain();
  budget_t(temp).run(
      [&](warp_row<MaxN>& row, int t) {
        batch_load(batch, row, t, n, true);
        if (!router) return;
        warp_row<MaxN> choice;  // the router's row (docs/ROUTERS.md)
        warp_router_choice(row, n, p.router, choice);
        choice.max = key_logit(ws.plain[static_cast<std::size_t>(t) * k]);
        row = choice;
      },
      batch.num_rows, ws.votes, ws.plain, p, ws.plain_set(), ws.anchors(), ws.active(),
      budget_scratch{ws.share, ws.top, ws.kth});
}

/// The top-1 anchor for the lynx and piggyback policies: every voting row's argmax joins K.
template <int Threads = 32>
__global__ void __launch_bounds__(Threads) merge_anchors_kernel(remap_workspace ws) {
  for (int i = threadIdx.x; i < set_words; i += Threads) ws.active()[i] |= ws.anchors()[i];
}

/// SPEC §3.3 steps 3-4, a warp per voting row: its top-k inside K and weights.
template <int MaxN, int K>
__global__ void __launch_bounds__(warp_block_threads, 1) final_kernel(any_batch batch, route_params p, remap_workspace ws) {
  const int n = p.num_experts, k = p.top_k, lane = lane_id();
  const int t = blockIdx.x * (warp_block_threads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (t >= batch.num_rows || !ws.votes[t]) return;
  warp_row<MaxN> row;
  batch_load(batch, row, t, n, true);
  const std::uint64_t plain = lane < k ? ws.plain[static_cast<std::size_t>(t) * k + lane] : 0;
  if (!p.router.plain()) {  // a model router's final choice (docs/ROUTERS.md), weights from the logits
    warp_row<MaxN> choice;
    warp_router_choice(row, n, p.router, choice);
    const std::uint64_t chosen =
        warp_router_topk_in<K>(row, choice, p.router, ws.active(), plain, k, is_pinned(batch.pinned, t));
    mark_topk(ws.final_set(), chosen, k);
    batch_emit_scaled<K>(batch, t, warp_by_logit<K>(row, chosen, k), k, p, ws.row_mass[t]);
    return;
  }
  const std::uint64_t chosen = warp_topk_in<K>(row, ws.active(), plain, k);
  mark_topk(ws.final_set(), chosen, k);
  batch_emit<K>(batch, t, chosen, k, p, ws.row_mass[t]);
}

/// SPEC §3.3 step 5 and §5: every block re-derives the batch decision from the sets (N bits,
/// cheaper than another launch), then pads its non-voting rows or, on fallback, writes its
/// voting rows' plain top-k.
template <int MaxN, int K>
__global__ void __launch_bounds__(warp_block_threads, 1) finish_kernel(any_batch batch, route_params p, remap_workspace ws) {
  __shared__ typename block_decide<warp_block_threads>::TempStorage temp;
  constexpr int rows_per_block = warp_block_threads / 32;
  const int k = p.top_k, lane = lane_id();
  // The pad ids only where a row of this block does not vote (warp 0 reads the block's votes).
  const int own = blockIdx.x * rows_per_block + lane;
  const bool pads = threadIdx.x < rows_per_block && own < batch.num_rows && !ws.votes[own];
  const block_decide<warp_block_threads> decision(temp, ws.plain_set(), ws.final_set(), p.num_experts, k, pads);
  const int t = blockIdx.x * rows_per_block + static_cast<int>(threadIdx.x) / 32;
  if (t >= batch.num_rows) return;
  if (!ws.votes[t]) {
    batch_emit_pad(batch, t, decision.pad_ids(), k, p);
  } else if (decision.fallback()) {
    const std::uint64_t plain = lane < k ? ws.plain[static_cast<std::size_t>(t) * k + lane] : 0;
    if (p.router.plain()) {
      batch_emit<K>(batch, t, plain, k, p, ws.row_mass[t]);
    } else {  // P is in choice keys: its weights from the row's logits
      warp_row<MaxN> row;
      batch_load(batch, row, t, p.num_experts, true);
      batch_emit_scaled<K>(batch, t, warp_by_logit<K>(row, plain, k), k, p, ws.row_mass[t]);
    }
  }
}

}  // namespace detail
}  // namespace lynx
