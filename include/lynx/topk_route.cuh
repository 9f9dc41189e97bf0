#pragma once
// lynx::topk_route: the baseline router of SPEC §4 on the device (engines use it for prefill).

#include <cuda_runtime.h>

#include "detail/dispatch.hpp"
#include "detail/kernels.cuh"
#include "detail/workspace.hpp"
#include "params.hpp"

namespace lynx {

/// Plain top-k with the model's weighting (softmax -> top-k -> optional renormalize; sigmoid
/// -> top-k). alpha and beta are ignored. Same conventions as lynx::route, workspace query
/// included (null workspace: only the size, no data pointer looked at).
template <class T, class IdT>
cudaError_t topk_route(void* workspace, std::size_t& workspace_bytes, const T* logits,
                       std::int64_t row_stride, int num_rows, token_count valid,
                       const route_params& p, IdT* ids, float* weights, cudaStream_t stream = 0) {
  if (const status s = check(p, num_rows, row_stride, valid); s != status::success)
    return detail::to_cuda_error(s);
  detail::workspace_carver carver(workspace);
  const detail::topk_workspace ws(carver, num_rows, p.num_experts);
  if (!workspace) {
    workspace_bytes = carver.required_bytes();
    return cudaSuccess;
  }
  if (!carver.fits(workspace_bytes)) return cudaErrorInvalidValue;
  if (!has_rows(num_rows, valid)) return cudaSuccess;
  if (const status s = check_pointers({logits, ids, weights}); s != status::success)
    return detail::to_cuda_error(s);
  const int n = p.num_experts, blocks = detail::warp_row_blocks(num_rows);
  if (const cudaError_t e = cudaMemsetAsync(ws.in_plain, 0, sizeof(std::uint32_t) * n, stream); e != cudaSuccess)
    return e;
  // Only the plain flags and votes are used; the final set is the plain one (no fallback).
  const detail::batch_state st{nullptr, ws.in_plain, ws.in_plain, nullptr, ws.votes, nullptr};
  return detail::dispatch_expert_tier(n, [&](auto max_n) {
    constexpr int MaxN = decltype(max_n)::value;
    detail::plain_kernel<T, IdT, MaxN><<<blocks, detail::warp_block_threads, 0, stream>>>(
        logits, row_stride, num_rows, valid, p, st, ids, weights);
    detail::finish_kernel<T, IdT, MaxN><<<blocks, detail::warp_block_threads, 0, stream>>>(
        logits, row_stride, num_rows, p, st, ids, weights);
    return cudaGetLastError();
  });
}

}  // namespace lynx
