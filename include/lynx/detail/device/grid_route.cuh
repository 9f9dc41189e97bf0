#pragma once
// The grid path of lynx::route for decode sizes (the lynx and piggyback policies on a plain
// router): the whole step in one launch of a warp per row across blocks, as topk_route runs,
// instead of the fused path's one block. The batch-wide steps are short phases between grid
// barriers: every block adds its rows' histogram counts and expert bits to global state, and
// after a barrier each block reads the batch's (the order codes, the packed histograms or
// their ranks, are computed by every block from the same counts, which costs less than one
// more barrier). The last block to finish makes the
// never-worse decision and writes the pads (and, on fallback, every row's plain top-k).
//
// A grid barrier needs every block resident at once: the launch is cooperative (the runtime
// refuses a grid that does not fit), and lynx::route takes this path only when the device's
// occupancy says it fits. Batch-wide state is integer counts and bit sets added with atomics,
// so results do not depend on which block arrives first, and they are bitwise the fused path's
// and the host path's (the same warp and block functions in the same order; tested on an H200).
// lynx::route takes this path once the rows outnumber the fused block's warps
// (dispatch.hpp, grid_route_wanted).

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../../batch.hpp"
#include "../../block/active_set.cuh"
#include "../../block/score_experts.cuh"
#include "../../params.hpp"
#include "../../sorted_layout.hpp"
#include "../../warp/affinity_bin.cuh"
#include "../../warp/remap_topk.cuh"
#include "../../warp/row.cuh"
#include "../../warp/topk.cuh"
#include "../config.hpp"
#include "batch_rows.cuh"
#include "dispatch.hpp"
#include "kernels.cuh"
#include "warp_ops.cuh"
#include "workspace.hpp"

namespace lynx {
namespace detail {

/// Block-collective grid barrier number `round` (1, 2, ...) on a counter zeroed before the
/// launch: every block's writes before it are visible to every block after it (fences around
/// a monotonic arrival count; the threadFenceReduction pattern, waiting instead of leaving).
/// Every block of the grid must be resident (a cooperative launch).
__device__ __forceinline__ void grid_barrier(unsigned int* arrived, unsigned int round) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(arrived, 1u);
    const unsigned int target = round * gridDim.x;
    while (*static_cast<volatile unsigned int*>(arrived) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

inline constexpr int grid_route_threads = warp_block_threads;  // 8 rows a block, as topk_route

template <int MaxN, int K>
__global__ void __launch_bounds__(grid_route_threads)
    grid_route_kernel(any_batch batch, route_params p, remap_workspace ws, grid_state g, sorted_layout_ref layout) {
  constexpr int threads = grid_route_threads, warps = threads / 32;
  using score_t = block_score_experts<MaxN, threads>;
  using decide_t = block_decide<threads>;
  using layout_t = topk_layout_t<MaxN>;
  __shared__ union {
    typename score_t::TempStorage score;    // phases 1-2
    typename decide_t::TempStorage decide;  // the last block: the decision, the pads
    typename layout_t::TempStorage layout;  // the last block: the sorted layout
  } temp;
  __shared__ std::uint32_t code[MaxN];  // the experts' order codes
  __shared__ std::uint32_t set_s[MaxN / 32], final_s[MaxN / 32];
  __shared__ bool last;
  const int n = p.num_experts, k = p.top_k, lane = lane_id(), depth = bin_depth(p.beta);
  const int rows = batch.num_rows, b = batch.valid.rows(rows);
  const int t = blockIdx.x * warps + static_cast<int>(threadIdx.x) / 32;
  const bool lynx_policy = p.kind == policy::lynx, mine = t < rows;
  const bool pinned = mine && is_pinned(batch.pinned, t);
  score_t score(temp.score, n, depth + 1);
  if (lynx_policy) {
    score.init();
    __syncthreads();
  }
  // Phase 1, the warp's row (kept in registers to the end): its plain top-k, mass, plain
  // experts, and its bins (lynx) or its share of K (piggyback; the top-1 anchor joins K at once).
  warp_row<MaxN> row;
  std::uint64_t plain = 0;
  float mass = 0.f;
  bool votes = false;
  if (mine) {
    batch_load(batch, row, t, n, t < b);
    votes = row.votes();
    if (lane == 0) ws.votes[t] = votes;
    if (votes) {
      plain = warp_topk<K>(row.key, k);
      if (lane < k) ws.plain[static_cast<std::size_t>(t) * k + lane] = plain;
      mark_topk(g.plain_set(), plain, k);
      mass = warp_row_mass<K>(row, plain, k, p.score, p.renormalize);
      if (lane == 0) ws.row_mass[t] = mass;
      if (lynx_policy) {
        std::int8_t q[MaxN / 32];
        warp_affinity_bin(row, p.alpha, depth, q);
        score.add_row(q);
      } else {
        select_row<K>(plain, pinned, p, g.active(), g.active(), [] { return std::uint64_t{0}; });
      }
    }
  }
  unsigned int round = 0;
  if (lynx_policy) {  // Phase 2: the batch's histogram and order codes, then the row's z top-k
    __syncthreads();
    score.flush(g.counts());
    grid_barrier(g.arrived(), ++round);
    score.load(g.counts());
    __syncthreads();
    score.order_codes(b, code);
    if (votes)
      select_row<K>(plain, pinned, p, g.active(), g.active(), [&] {
        std::int8_t q[MaxN / 32];
        warp_affinity_bin(row, p.alpha, depth, q);
        return warp_z_topk_set<K>(row, q, order_codes{code}, plain, k, p.alpha, depth);
      });
  }
  // Phase 3: the row's top-k inside K and its weights.
  grid_barrier(g.arrived(), ++round);
  for (int i = threadIdx.x; i < MaxN / 32; i += threads) set_s[i] = __ldcg(g.active() + i);
  __syncthreads();
  if (votes) {
    const std::uint64_t chosen = warp_topk_in<K>(row, set_s, plain, k);
    mark_topk(g.final_set(), chosen, k);
    batch_emit<K>(batch, t, chosen, k, p, mass);
  }
  // The last block: the decision, the pads, the fallback.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(g.done(), 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  bool pads = false;  // whether a row takes the pad ids (most batches have none)
  for (int i = threadIdx.x; i < MaxN / 32; i += threads) {
    set_s[i] = __ldcg(g.plain_set() + i);
    final_s[i] = __ldcg(g.final_set() + i);
  }
  for (int r = threadIdx.x; r < rows; r += threads) pads |= !__ldcg(ws.votes + r);
  pads = __syncthreads_or(pads);
  const decide_t decision(temp.decide, set_s, final_s, n, k, pads);
  if (pads || decision.fallback())  // else every row is written already
    for (int r = static_cast<int>(threadIdx.x) / 32; r < rows; r += warps) {
      if (!__ldcg(ws.votes + r)) {
        batch_emit_pad(batch, r, decision.pad_ids(), k, p);
      } else if (decision.fallback()) {
        const std::uint64_t keys = lane < k ? __ldcg(ws.plain + static_cast<std::size_t>(r) * k + lane) : 0;
        batch_emit<K>(batch, r, keys, k, p, __ldcg(ws.row_mass + r));
      }
    }
  if (!layout.wanted()) return;
  __syncthreads();
  any_batch_layout<layout_t>(temp.layout, batch.ids, batch.ids64, rows, k, n, layout);
}

/// How many blocks of grid_route_kernel<MaxN, K> the current device holds at once (0 when the
/// device cannot be asked or has no cooperative launch). Host queries only: no stream work, so
/// they are allowed during graph capture; a failed query's error is cleared. route asks on
/// every call that wants the grid path, so the answer is kept per device (a constant of the
/// device and the kernel); a failure is not kept.
template <int MaxN, int K>
int grid_route_resident_blocks() {
  constexpr int cached_devices = 64;
  static std::atomic<int> known[cached_devices];  // resident blocks + 1; 0: not asked yet
  int device = 0, sms = 0, cooperative = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const bool cacheable = device >= 0 && device < cached_devices;
  if (cacheable)
    if (const int k = known[device].load(std::memory_order_relaxed); k > 0) return k - 1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_route_kernel<MaxN, K>, grid_route_threads, 0) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int blocks = cooperative ? sms * per_sm : 0;
  if (cacheable) known[device].store(blocks + 1, std::memory_order_relaxed);
  return blocks;
}

/// One cooperative launch of grid_route_kernel<MaxN, K> (the state already zeroed). A layout
/// asked for is written by the last block, in the shared memory the routing used.
template <int MaxN, int K>
cudaError_t launch_grid_route(const any_batch& batch, const route_params& p, const remap_workspace& ws,
                              const grid_state& g, const sorted_layout_ref& layout, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned int>(warp_row_blocks(batch.num_rows)));
  config.blockDim = dim3(grid_route_threads);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, grid_route_kernel<MaxN, K>, batch, p, ws, g, layout);
}

}  // namespace detail
}  // namespace lynx
