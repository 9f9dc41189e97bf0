#pragma once
// The host-side decisions of the device launchers, in plain C++ so that tests on a machine
// without a GPU check them: which compile-time expert tier a kernel is instantiated for, which
// path lynx::route takes, how many blocks a warp-per-row kernel needs, and the error code.

#include <cuda_runtime_api.h>

#include <type_traits>

#include "../params.hpp"
#include "config.hpp"

namespace lynx {
namespace detail {

inline constexpr int warp_block_threads = 256;  // 8 rows per block in the per-stage kernels
inline constexpr int fused_threads = 1024;
inline constexpr int fused_max_rows = 512;      // the fused path's limits (decode sizes)
inline constexpr int fused_max_experts = 512;

/// The compile-time bound MaxN for N experts: lane j of a row's warp holds MaxN/32 keys.
inline constexpr int expert_tier(int n) { return n <= 128 ? 128 : (n <= 512 ? 512 : max_experts); }

/// Calls f(std::integral_constant<int, expert_tier(n)>{}): runtime N to a compile-time tier,
/// at one place. Only the tiers up to `Largest` are instantiated (the fused kernel's shared
/// memory is sized for at most fused_max_experts); larger n get the largest of them, so a
/// caller must not pass such n (lynx::route's path choice does not).
template <int Largest = max_experts, class F>
auto dispatch_expert_tier(int n, F&& f) {
  static_assert(Largest == 512 || Largest == max_experts, "tiers are 128, 512, max_experts");
  if (n <= 128) return f(std::integral_constant<int, 128>{});
  if constexpr (Largest == 512) {
    return f(std::integral_constant<int, 512>{});
  } else {
    if (n <= 512) return f(std::integral_constant<int, 512>{});
    return f(std::integral_constant<int, max_experts>{});
  }
}

/// How lynx::route runs a call: decode sizes in one single-block launch, the rest one kernel
/// per stage.
enum class route_path { fused, stages };

inline route_path choose_route_path(int num_rows, int n) {
  return num_rows <= fused_max_rows && n <= fused_max_experts ? route_path::fused : route_path::stages;
}

/// Blocks of warp_block_threads for one warp per row.
inline int warp_row_blocks(int num_rows) {
  constexpr int rows_per_block = warp_block_threads / 32;
  return (num_rows + rows_per_block - 1) / rows_per_block;
}

inline cudaError_t to_cuda_error(status s) { return s == status::success ? cudaSuccess : cudaErrorInvalidValue; }

}  // namespace detail
}  // namespace lynx
