#pragma once
// lynx::score_experts: SPEC §3.2, exact integer histograms and ranks. The block-level device
// class (block/score_experts.cuh) for a caller's own kernels, and the launcher.

#include <cuda_runtime.h>

#include "block/score_experts.cuh"
#include "detail/device/dispatch.hpp"
#include "detail/device/kernels.cuh"
#include "params.hpp"

namespace lynx {

/// From bins [num_rows x N] (affinity_bin's output), writes counts[j * N + e] =
/// #{voting t : q[t,e] = -j} for j < histogram_bins(p) (cub::BlockHistogram, a block per expert),
/// and ranks[e] = the number of experts whose histogram is lexicographically greater (SPEC §3.2:
/// exact, order-independent). counts and ranks are per expert: required and written even for
/// zero rows (all zero).
inline cudaError_t score_experts(const std::int8_t* bins, int num_rows, const route_params& p,
                                 std::int32_t* counts, std::int32_t* ranks,
                                 cudaStream_t stream = 0) {
  if (const status s = check(p, num_rows, p.num_experts, num_rows, {bins}); s != status::success)
    return detail::to_cuda_error(s);
  if (const status s = check_pointers({counts, ranks}); s != status::success)
    return detail::to_cuda_error(s);
  const int n = p.num_experts, nbins = histogram_bins(p);
  constexpr int threads = 128, items = 4;
  detail::histogram_kernel<threads, items><<<n, threads, 0, stream>>>(bins, num_rows, n, nbins, counts);
  if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess) return e;
  detail::rank_kernel<><<<1, detail::rank_threads, 0, stream>>>(counts, n, nbins, num_rows, ranks);
  return cudaPeekAtLastError();
}

}  // namespace lynx
