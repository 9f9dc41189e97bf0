#pragma once
// lynx::affinity_bin: SPEC §3.1. The warp-level device function (warp/affinity_bin.cuh) for a
// caller's own kernels, and the launcher over a whole batch.

#include <cuda_runtime.h>

#include "detail/device/dispatch.hpp"
#include "detail/device/kernels.cuh"
#include "half.hpp"
#include "params.hpp"
#include "warp/affinity_bin.cuh"

namespace lynx {

/// Writes bins[t * N + e] = q[t, e] (int8, 0 .. -depth) for rows t < num_rows. Rows that do
/// not vote (t >= valid, or no finite logit) are filled with lynx::no_vote.
/// Needs no workspace; validates first and writes nothing on error.
template <class T>
cudaError_t affinity_bin(const T* logits, std::int64_t row_stride, int num_rows,
                         token_count valid, const route_params& p, std::int8_t* bins,
                         cudaStream_t stream = 0) {
  if (const status s = check(p, num_rows, row_stride, valid, {logits, bins}); s != status::success)
    return detail::to_cuda_error(s);
  if (!has_rows(num_rows, valid)) return cudaSuccess;
  return detail::dispatch_tier(detail::choose_tier(p.num_experts, 1), [&](auto max_n, auto) {
    constexpr int MaxN = decltype(max_n)::value;
    const auto batch = detail::any_batch::of(batch_ref<T, std::int32_t>{logits, row_stride, num_rows, valid});
    detail::affinity_bin_kernel<MaxN><<<detail::warp_row_blocks(num_rows), detail::warp_block_threads, 0, stream>>>(
        batch, p.num_experts, p.alpha, detail::bin_depth(p.beta), bins);
    return cudaPeekAtLastError();
  });
}

}  // namespace lynx
