#pragma once
// lynx::remap_topk: SPEC §3.3 on the device, from the outputs of affinity_bin and score_experts.

#include <cuda_runtime.h>

#include "detail/dispatch.hpp"
#include "detail/kernels.cuh"
#include "detail/workspace.hpp"
#include "params.hpp"

namespace lynx {
namespace detail {

// Launches remap_topk's kernels on carved scratch (shared by remap_topk and route).
template <class T, class IdT>
cudaError_t launch_remap(const remap_workspace& ws, const T* logits, std::int64_t row_stride,
                         int num_rows, token_count valid, const std::int8_t* bins,
                         const std::int32_t* ranks, const route_params& p, IdT* ids,
                         float* weights, cudaStream_t stream) {
  const int n = p.num_experts, blocks = warp_row_blocks(num_rows);
  if (const cudaError_t e = cudaMemsetAsync(ws.flags, 0, 4 * sizeof(std::uint32_t) * n, stream); e != cudaSuccess)
    return e;
  const batch_state st{ws.in_active(), ws.in_plain(), ws.in_final(), ws.anchors(), ws.votes, ws.row_mass};
  return dispatch_expert_tier(n, [&](auto max_n) {
    constexpr int MaxN = decltype(max_n)::value;
    select_kernel<T, MaxN><<<blocks, warp_block_threads, 0, stream>>>(logits, row_stride, num_rows, valid, bins,
                                                                       ranks, p, st);
    if (p.kind == policy::budget)
      budget_kernel<T><<<1, 1024, 0, stream>>>(logits, row_stride, num_rows, p, st, ws.share, ws.top);
    else if (p.anchor_top1)
      merge_flags_kernel<<<1, 1024, 0, stream>>>(ws.anchors(), n, ws.in_active());
    final_kernel<T, IdT, MaxN><<<blocks, warp_block_threads, 0, stream>>>(logits, row_stride, num_rows, p, st, ids,
                                                                           weights);
    finish_kernel<T, IdT, MaxN><<<blocks, warp_block_threads, 0, stream>>>(logits, row_stride, num_rows, p, st, ids,
                                                                            weights);
    return cudaGetLastError();
  });
}

}  // namespace detail

/// Final experts and weights [num_rows x k] (SPEC §3.3, with the never-worse guard of step 5;
/// non-voting rows as SPEC §5 says). Only the lynx policy reads bins and ranks (others may
/// pass null). CUB-style workspace: with workspace == nullptr only workspace_bytes is
/// computed and no data pointer is looked at. No allocation, no synchronization,
/// graph-capturable.
template <class T, class IdT>
cudaError_t remap_topk(void* workspace, std::size_t& workspace_bytes, const T* logits,
                       std::int64_t row_stride, int num_rows, token_count valid,
                       const std::int8_t* bins, const std::int32_t* ranks, const route_params& p,
                       IdT* ids, float* weights, cudaStream_t stream = 0) {
  if (const status s = check(p, num_rows, row_stride, valid); s != status::success)
    return detail::to_cuda_error(s);
  detail::workspace_carver carver(workspace);
  const detail::remap_workspace ws(carver, num_rows, p.num_experts, p.top_k, p.kind == policy::budget);
  if (!workspace) {
    workspace_bytes = carver.required_bytes();
    return cudaSuccess;
  }
  if (!carver.fits(workspace_bytes)) return cudaErrorInvalidValue;
  if (!has_rows(num_rows, valid)) return cudaSuccess;
  const bool lynx_policy = p.kind == policy::lynx;
  if (const status s = check_pointers({logits, ids, weights, lynx_policy ? static_cast<const void*>(bins) : logits,
                                       lynx_policy ? static_cast<const void*>(ranks) : logits});
      s != status::success)
    return detail::to_cuda_error(s);
  return detail::launch_remap(ws, logits, row_stride, num_rows, valid, bins, ranks, p, ids,
                              weights, stream);
}

}  // namespace lynx
