#pragma once
// lynx::remap_topk: SPEC §3.3 from the outputs of affinity_bin and score_experts. The warp- and
// block-level device functions (warp/remap_topk.cuh, block/active_set.cuh, block/budget.cuh)
// for a caller's own kernels, and the launcher.

#include <cuda_runtime.h>

#include "batch.hpp"
#include "block/active_set.cuh"
#include "block/budget.cuh"
#include "detail/device/dispatch.hpp"
#include "detail/device/kernels.cuh"
#include "detail/device/workspace.hpp"
#include "half.hpp"
#include "params.hpp"
#include "warp/remap_topk.cuh"

namespace lynx {
namespace detail {

// remap_topk's kernels on carved scratch (shared by remap_topk and route's per-stage path).
inline cudaError_t launch_remap(const remap_workspace& ws, const any_batch& batch, const std::int8_t* bins,
                                const std::int32_t* ranks, const route_params& p, cudaStream_t stream) {
  const int blocks = warp_row_blocks(batch.num_rows);
  if (const cudaError_t e = cudaMemsetAsync(ws.sets, 0, 4 * set_words * sizeof(std::uint32_t), stream); e != cudaSuccess)
    return e;
  return dispatch_tier(choose_tier(p.num_experts, p.top_k), [&](auto max_n, auto max_k) {
    constexpr int MaxN = decltype(max_n)::value, K = decltype(max_k)::value;
    select_kernel<MaxN, K><<<blocks, warp_block_threads, 0, stream>>>(batch, bins, ranks, p, ws);
    if (p.kind == policy::budget)
      budget_kernel<MaxN, K><<<1, budget_threads, 0, stream>>>(batch, p, ws);
    else if (p.anchor_top1)
      merge_anchors_kernel<><<<1, 32, 0, stream>>>(ws);
    final_kernel<MaxN, K><<<blocks, warp_block_threads, 0, stream>>>(batch, p, ws);
    finish_kernel<MaxN, K><<<blocks, warp_block_threads, 0, stream>>>(batch, p, ws);
    return cudaPeekAtLastError();
  });
}

// The lynx policy's bins for a model router (router_bin_kernel), for route's per-stage path.
inline cudaError_t launch_router_bins(const any_batch& batch, const route_params& p, std::int8_t* bins,
                                      cudaStream_t stream) {
  return dispatch_tier(choose_tier(p.num_experts, p.top_k), [&](auto max_n, auto) {
    router_bin_kernel<decltype(max_n)::value>
        <<<warp_row_blocks(batch.num_rows), warp_block_threads, 0, stream>>>(batch, p, bins);
    return cudaPeekAtLastError();
  });
}

}  // namespace detail

/// Final experts and weights [num_rows x k] of a batch (SPEC §3.3, with the never-worse guard
/// of step 5; non-voting rows as SPEC §5 says). Only the lynx policy reads bins and ranks (others
/// may pass null); with k = 1 the call runs effective_params(p), so the anchored lynx policy
/// reads none either. CUB-style workspace: with workspace == nullptr only workspace_bytes is
/// computed and no data pointer is looked at. No allocation, no synchronization,
/// graph-capturable.
template <class T, class IdT>
cudaError_t remap_topk(void* workspace, std::size_t& workspace_bytes, const batch_ref<T, IdT>& batch,
                       const std::int8_t* bins, const std::int32_t* ranks, const route_params& given,
                       cudaStream_t stream = 0) {
  if (const status s = check(given, batch.num_rows, batch.row_stride, batch.valid); s != status::success)
    return detail::to_cuda_error(s);
  if (check_staged_router(given) != status::success) return cudaErrorInvalidValue;
  const route_params p = effective_params(given);  // k = 1: piggyback where it is the same
  detail::workspace_carver carver(workspace);
  const detail::remap_workspace ws(carver, batch.num_rows, p.num_experts, p.top_k, p.kind == policy::budget);
  if (!workspace) {
    workspace_bytes = carver.required_bytes();
    return cudaSuccess;
  }
  if (!carver.fits(workspace_bytes)) return cudaErrorInvalidValue;
  if (!has_rows(batch.num_rows, batch.valid)) return cudaSuccess;
  const bool lynx_policy = p.kind == policy::lynx;
  if (const status s = check_pointers(batch.valid, {batch.logits, batch.ids, batch.weights,
                                       lynx_policy ? static_cast<const void*>(bins) : batch.logits,
                                       lynx_policy ? static_cast<const void*>(ranks) : batch.logits});
      s != status::success)
    return detail::to_cuda_error(s);
  return detail::launch_remap(ws, detail::any_batch::of(batch), bins, ranks, p, stream);
}

template <class T, class IdT>
cudaError_t remap_topk(void* workspace, std::size_t& workspace_bytes, const T* logits,
                       std::int64_t row_stride, int num_rows, token_count valid,
                       const std::int8_t* bins, const std::int32_t* ranks, const route_params& p,
                       IdT* ids, float* weights, cudaStream_t stream = 0) {
  return remap_topk(workspace, workspace_bytes, batch_ref<T, IdT>{logits, row_stride, num_rows, valid, ids, weights},
                    bins, ranks, p, stream);
}

}  // namespace lynx
