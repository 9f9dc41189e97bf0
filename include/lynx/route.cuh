#pragma once
// lynx::route: the whole Lynx step (affinity_bin -> score_experts -> remap_topk) on the device.

#include <cuda_runtime.h>

#include "affinity_bin.cuh"
#include "batch.hpp"
#include "detail/device/dispatch.hpp"
#include "detail/device/grid_route.cuh"
#include "detail/device/workspace.hpp"
#include "remap_topk.cuh"
#include "score_experts.cuh"
#include "sorted_layout.hpp"

namespace lynx {

namespace detail {

/// lynx::route's body, with the decode path chosen (automatic) or forced (grid).
template <class T, class IdT>
cudaError_t route_with(decode_choice choice, void* workspace, std::size_t& workspace_bytes,
                       const batch_ref<T, IdT>& batch, const route_params& given, const sorted_layout_ref& layout,
                       cudaStream_t stream) {
  if (const status s = check(given, batch.num_rows, batch.row_stride, batch.valid); s != status::success)
    return detail::to_cuda_error(s);
  const route_params p = effective_params(given);  // k = 1: piggyback where it is the same
  if (!layout_fits(layout, batch.num_rows, p.top_k, p.num_experts)) return cudaErrorInvalidValue;
  detail::workspace_carver carver(workspace);
  const bool lynx_policy = p.kind == policy::lynx;
  const detail::route_workspace ws(carver, batch.num_rows, p);
  if (!workspace) {
    workspace_bytes = carver.required_bytes();
    return cudaSuccess;
  }
  if (!carver.fits(workspace_bytes)) return cudaErrorInvalidValue;
  const detail::any_batch any = detail::any_batch::of(batch);
  if (!has_rows(batch.num_rows, batch.valid))
    return layout.wanted() ? detail::launch_sorted_layout(any, false, p.top_k, p.num_experts, layout, stream)
                           : cudaSuccess;
  if (const status s = check_pointers(batch.valid, {batch.logits, batch.ids, batch.weights}); s != status::success)
    return detail::to_cuda_error(s);
  const int tier = detail::choose_tier(p.num_experts, p.top_k);
  const bool decode = detail::choose_route_path(batch.num_rows, p.num_experts, p.top_k) == detail::route_path::fused;
  if (choice == decode_choice::grid && !(decode && detail::grid_route_policy(p, batch.num_rows)))
    return cudaErrorNotSupported;
  if (decode) {
    // Decode sizes: the whole step in one launch (no host sync, no allocation): one block, or
    // for the lynx and piggyback policies on a plain router with more rows than the block has
    // warps (grid_route_wanted), a warp per row across blocks with grid barriers, when the
    // device holds every block at once.
    const bool router = !p.router.plain();
    return detail::dispatch_tier<detail::fused_max_experts>(tier, [&](auto max_n, auto max_k) {
      constexpr int MaxN = decltype(max_n)::value, K = decltype(max_k)::value;
      const bool try_grid =
          choice == decode_choice::grid ||
          (choice == decode_choice::automatic &&
           detail::grid_route_wanted(p, detail::decode_rows(batch.num_rows, batch.valid), MaxN));
      const bool grid = try_grid && detail::choose_decode_path(p, batch.num_rows,
                                                               detail::grid_route_resident_blocks<MaxN, K>()) ==
                                        detail::route_path::grid;
      if (choice == decode_choice::grid && !grid) return cudaErrorNotSupported;
      if (grid) {
        const std::size_t words =
            detail::grid_state::size_words(p.num_experts, detail::route_workspace::grid_bins(p));
        if (const cudaError_t e = cudaMemsetAsync(ws.grid.words, 0, words * sizeof(std::uint32_t), stream);
            e != cudaSuccess)
          return e;
        return detail::launch_grid_route<MaxN, K>(any, p, ws.remap, ws.grid, layout, stream);
      }
      if (router)
        detail::fused_route_kernel<MaxN, K, true>
            <<<1, detail::fused_threads(MaxN, true), 0, stream>>>(any, p, ws.remap, layout);
      else
        detail::fused_route_kernel<MaxN, K, false>
            <<<1, detail::fused_threads(MaxN), 0, stream>>>(any, p, ws.remap, layout);
      return cudaPeekAtLastError();
    }, cudaErrorInvalidValue);  // no tier above fused_max_experts reaches here
  }
  if (lynx_policy) {  // the other policies need no bins or scores
    // A model router's bins are of its choice scores (docs/ROUTERS.md), not affinity_bin's.
    if (cudaError_t e = p.router.plain()
                            ? affinity_bin(batch.logits, batch.row_stride, batch.num_rows, batch.valid, p, ws.bins, stream)
                            : detail::launch_router_bins(any, p, ws.bins, stream);
        e != cudaSuccess)
      return e;
    if (cudaError_t e = score_experts(ws.bins, batch.num_rows, p, ws.counts, ws.ranks, stream); e != cudaSuccess)
      return e;
  }
  if (const cudaError_t e = detail::launch_remap(ws.remap, any, ws.bins, ws.ranks, p, stream); e != cudaSuccess)
    return e;
  return layout.wanted() ? detail::launch_sorted_layout(any, true, p.top_k, p.num_experts, layout, stream)
                         : cudaSuccess;
}

}  // namespace detail

/// Routes a batch: rows [0, num_rows) of logits (row-major, row_stride >= N; float, __half or
/// __nv_bfloat16) to k experts each, writing ids [num_rows x k] (int32_t or int64_t) and fp32
/// weights [num_rows x k]. Rows >= valid are padding (SPEC §5); pinned rows keep their plain
/// top-k. With k = 1, a policy whose K holds every token's top-1 (the default, the anchored
/// lynx policy) runs as piggyback with keep_k 1: the same results (effective_params).
///
/// CUB-style: with workspace == nullptr only workspace_bytes is computed; the data pointers are
/// not looked at (they may be null), but the parameters and shapes are checked. No allocation,
/// no synchronization, graph-capturable, deterministic. Returns cudaErrorInvalidValue (nothing
/// written) when lynx::check rejects the arguments or workspace_bytes is too small. Up to 512
/// rows and 512 experts (k <= 16) the whole step is one kernel launch of one block, or, for the
/// lynx and piggyback policies on a plain router with more rows than that block has warps (the
/// valid rows where B is a host count), a memset and a cooperative launch of a warp per row
/// across blocks, when the device holds them all at once (LYNX_GRID_ROUTE overrides the
/// choice; dispatch.hpp); larger calls run the stages' kernels in turn.
///
/// With a sorted_layout_ref that asks for any array, the same call also writes the batch's
/// expert-sorted layout (sorted_layout.hpp; vLLM's moe_align_block_size arrays among them): in
/// the same launch on both decode paths (the fused block, the grid path's last block), and
/// after the per-stage path in one more one-block launch. It needs no workspace. A call with
/// B = 0 (a host count) routes nothing and writes the empty layout.
template <class T, class IdT>
cudaError_t route(void* workspace, std::size_t& workspace_bytes, const batch_ref<T, IdT>& batch,
                  const route_params& p, const sorted_layout_ref& layout, cudaStream_t stream = 0) {
  return detail::route_with(detail::decode_choice::automatic, workspace, workspace_bytes, batch, p, layout, stream);
}

template <class T, class IdT>
cudaError_t route(void* workspace, std::size_t& workspace_bytes, const batch_ref<T, IdT>& batch,
                  const route_params& p, cudaStream_t stream = 0) {
  return route(workspace, workspace_bytes, batch, p, sorted_layout_ref{}, stream);
}

template <class T, class IdT>
cudaError_t route(void* workspace, std::size_t& workspace_bytes, const T* logits, std::int64_t row_stride,
                  int num_rows, token_count valid, const route_params& p, IdT* ids, float* weights,
                  cudaStream_t stream = 0) {
  return route(workspace, workspace_bytes, batch_ref<T, IdT>{logits, row_stride, num_rows, valid, ids, weights}, p,
               stream);
}

}  // namespace lynx
