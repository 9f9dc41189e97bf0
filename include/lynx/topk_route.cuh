#pragma once
// lynx::topk_route: the baseline router of SPEC §4 on the device (engines use it for prefill).

#include <cuda_runtime.h>

#include "batch.hpp"
#include "detail/device/dispatch.hpp"
#include "detail/device/kernels.cuh"
#include "detail/device/workspace.hpp"
#include "half.hpp"
#include "params.hpp"
#include "sorted_layout.hpp"

namespace lynx {

/// Plain top-k with the model's weighting (softmax -> top-k -> optional renormalize; sigmoid
/// -> top-k), or the model's own router where p.router describes one (groups, a correction
/// bias in device memory, a scaling factor: params.hpp). alpha, beta, the policy and the pinned
/// rows are not used, but the parameters must pass lynx::check, so that one route_params serves
/// both calls. Same conventions as lynx::route, workspace query included (null workspace: only
/// the size, no data pointer looked at). Up to 8 rows one kernel launch; above, a memset of a
/// few words before it. With a sorted_layout_ref that asks for any array, the last block to
/// finish also writes the expert-sorted layout (as lynx::route does), in the same launch.
template <class T, class IdT>
cudaError_t topk_route(void* workspace, std::size_t& workspace_bytes, const batch_ref<T, IdT>& batch,
                       const route_params& p, const sorted_layout_ref& layout, cudaStream_t stream = 0) {
  if (const status s = check(p, batch.num_rows, batch.row_stride, batch.valid); s != status::success)
    return detail::to_cuda_error(s);
  if (!layout_fits(layout, batch.num_rows, p.top_k, p.num_experts)) return cudaErrorInvalidValue;
  detail::workspace_carver carver(workspace);
  const detail::topk_workspace ws(carver, batch.num_rows);
  if (!workspace) {
    workspace_bytes = carver.required_bytes();
    return cudaSuccess;
  }
  if (!carver.fits(workspace_bytes)) return cudaErrorInvalidValue;
  if (!has_rows(batch.num_rows, batch.valid))
    return layout.wanted() ? detail::launch_sorted_layout(detail::any_batch::of(batch), false, p.top_k,
                                                          p.num_experts, layout, stream)
                           : cudaSuccess;
  if (const status s = check_pointers(batch.valid, {batch.logits, batch.ids, batch.weights}); s != status::success)
    return detail::to_cuda_error(s);
  if (detail::topk_route_zeroes_state(batch.num_rows))
    if (const cudaError_t e = cudaMemsetAsync(ws.state, 0, (detail::set_words + 1) * sizeof(std::uint32_t), stream);
        e != cudaSuccess)
      return e;
  return detail::dispatch_tier(detail::choose_tier(p.num_experts, p.top_k), [&](auto max_n, auto max_k) {
    constexpr int MaxN = decltype(max_n)::value, K = decltype(max_k)::value;
    detail::topk_route_kernel<MaxN, K>
        <<<detail::warp_row_blocks(batch.num_rows), detail::warp_block_threads,
           layout.wanted() ? detail::topk_layout_bytes<MaxN> : 0, stream>>>(detail::any_batch::of(batch), p, ws,
                                                                            layout);
    return cudaPeekAtLastError();
  });
}

template <class T, class IdT>
cudaError_t topk_route(void* workspace, std::size_t& workspace_bytes, const batch_ref<T, IdT>& batch,
                       const route_params& p, cudaStream_t stream = 0) {
  return topk_route(workspace, workspace_bytes, batch, p, sorted_layout_ref{}, stream);
}

template <class T, class IdT>
cudaError_t topk_route(void* workspace, std::size_t& workspace_bytes, const T* logits, std::int64_t row_stride,
                       int num_rows, token_count valid, const route_params& p, IdT* ids, float* weights,
                       cudaStream_t stream = 0) {
  return topk_route(workspace, workspace_bytes, batch_ref<T, IdT>{logits, row_stride, num_rows, valid, ids, weights},
                    p, stream);
}

}  // namespace lynx
