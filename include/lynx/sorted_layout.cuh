#pragma once
// lynx::sorted_layout: the expert-sorted layout (sorted_layout.hpp) of any ids on the device,
// one launch of one block; lynx::block_sorted_layout for a caller's own kernel. lynx::route and
// lynx::topk_route write the same layout in their own launch when given a sorted_layout_ref.

#include <cuda_runtime.h>

#include <cstdint>

#include "block/sorted_layout.cuh"
#include "detail/device/kernels.cuh"
#include "params.hpp"
#include "sorted_layout.hpp"

namespace lynx {

/// The layout of ids [num_rows x k] (int32_t or int64_t, device memory) over n experts. Ids
/// outside [0, n), and those the expert map sends outside it, take no part. No allocation, no
/// synchronization, graph-capturable. cudaErrorInvalidValue (nothing written) for n outside
/// [1, max_experts], k outside [1, max_top_k], num_rows < 0, a layout that layout_fits rejects,
/// or null ids with rows to lay out.
template <class IdT>
cudaError_t sorted_layout(const IdT* ids, int num_rows, int k, int n, const sorted_layout_ref& layout,
                          cudaStream_t stream = 0) {
  static_assert(std::is_same_v<IdT, std::int32_t> || std::is_same_v<IdT, std::int64_t>, "ids: int32_t or int64_t");
  if (n < 1 || n > max_experts || k < 1 || k > max_top_k || num_rows < 0 || !layout_fits(layout, num_rows, k, n))
    return cudaErrorInvalidValue;
  if (num_rows > 0 && !ids) return cudaErrorInvalidValue;
  if (!layout.wanted()) return cudaSuccess;
  return detail::launch_sorted_layout(ids, num_rows, k, n, layout, stream);
}

}  // namespace lynx
