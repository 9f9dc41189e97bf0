#pragma once
// The host-side decisions of the device launchers, in plain C++ so that tests on a machine
// without a GPU check them: which compile-time tier (MaxN, K) a kernel is instantiated for,
// which path lynx::route takes, how many blocks a warp-per-row kernel needs, the error code.

#include <cuda_runtime_api.h>

#include <type_traits>

#include "../../batch.hpp"
#include "../../params.hpp"
#include "../config.hpp"

namespace lynx {
namespace detail {

inline constexpr int warp_block_threads = 256;  // 8 rows per block in the warp-per-row kernels
inline constexpr int fused_max_rows = 512;      // the fused path's limits (decode sizes)
inline constexpr int fused_max_experts = 512;

/// Threads of the fused kernel's one block: 32 warps, or 16 above 128 experts, whose rows need
/// more registers per lane (no spill within __launch_bounds__). A model router's rows carry the
/// router's row beside the logits: 16 warps, or 8 above 256 experts.
LYNX_HD constexpr int fused_threads(int max_n, bool router = false) {
  return router ? (max_n <= 256 ? 512 : 256) : (max_n <= 128 ? 1024 : 512);
}

/// A compile-time tier: MaxN bounds N (lane j of a row's warp holds MaxN/32 keys), K bounds k
/// (the loops that fill k slots of a row unroll K times; the real k may be smaller).
struct tier {
  int max_n, max_k;
};

/// Every tier a kernel is instantiated for, cheapest first. They cover every shape of
/// bench/bench_shapes.hpp and the SPEC families without local memory; the last one is the
/// generic fallback for any N <= 1024 and k <= 32, which may use the stack.
inline constexpr tier tiers[] = {{128, 1}, {128, 2}, {128, 4}, {128, 8}, {256, 8}, {512, 8}, {512, 16}, {1024, 32}};
inline constexpr int num_tiers = sizeof(tiers) / sizeof(tiers[0]);
inline constexpr int generic_tier = num_tiers - 1;

/// The cheapest tier that holds (n, k).
inline constexpr int choose_tier(int n, int k) {
  for (int i = 0; i < num_tiers; ++i)
    if (tiers[i].max_n >= n && tiers[i].max_k >= k) return i;
  return generic_tier;
}

/// Calls f(std::integral_constant<int, MaxN>{}, std::integral_constant<int, K>{}) for tier i:
/// runtime (N, k) to compile-time bounds, at one place. Only tiers with MaxN <= Largest are
/// instantiated (the fused kernel's shared memory is sized for fused_max_experts); for a larger
/// one f is not called and `refused` comes back (lynx::route's path choice never asks for one,
/// and passes cudaErrorInvalidValue should that change).
template <int Largest = max_experts, class F,
          class R = std::invoke_result_t<F, std::integral_constant<int, tiers[0].max_n>,
                                         std::integral_constant<int, tiers[0].max_k>>>
R dispatch_tier(int i, F&& f, R refused = R{}) {
  using std::integral_constant;
  const auto at = [&](auto index) -> R {
    constexpr tier t = tiers[decltype(index)::value];
    if constexpr (t.max_n <= Largest) {
      return f(integral_constant<int, t.max_n>{}, integral_constant<int, t.max_k>{});
    } else {
      return refused;
    }
  };
  switch (i) {
    case 0: return at(integral_constant<int, 0>{});
    case 1: return at(integral_constant<int, 1>{});
    case 2: return at(integral_constant<int, 2>{});
    case 3: return at(integral_constant<int, 3>{});
    case 4: return at(integral_constant<int, 4>{});
    case 5: return at(integral_constant<int, 5>{});
    case 6: return at(integral_constant<int, 6>{});
    default: return at(integral_constant<int, 7>{});
  }
}
static_assert(num_tiers == 8, "dispatch_tier lists every tier");

/// How lynx::route runs a call: decode sizes in one single-block launch (fused) or, above one
/// row per warp of that block, a warp per row across blocks (grid); the rest one kernel per
/// stage.
enum class route_path { fused, grid, stages };

inline route_path choose_route_path(int num_rows, int n, int k) {
  const tier t = tiers[choose_tier(n, k)];
  return num_rows <= fused_max_rows && t.max_n <= fused_max_experts ? route_path::fused : route_path::stages;
}

/// Blocks of warp_block_threads for one warp per row.
inline int warp_row_blocks(int num_rows) {
  constexpr int rows_per_block = warp_block_threads / 32;
  return (num_rows + rows_per_block - 1) / rows_per_block;
}

/// Whether topk_route zeroes its state (the plain set and the block counter) before its kernel:
/// only for more than one block; one block keeps them in shared memory (topk_route_kernel).
inline bool topk_route_zeroes_state(int num_rows) { return warp_row_blocks(num_rows) > 1; }

/// Whether the policy and the expert tier allow the grid path: the policies whose set needs no
/// serial greedy (the budget policy stays on the fused path), at the fused tiers. Its workspace
/// is reserved by this, whatever the router and the row count, so that a size queried for a
/// batch also holds any smaller one (the README's query at max_tokens).
inline bool grid_route_tier(const route_params& p) {
  return (p.kind == policy::lynx || p.kind == policy::piggyback) &&
         tiers[choose_tier(p.num_experts, p.top_k)].max_n <= fused_max_experts;
}

/// Whether a call's shape and policy allow the grid path: the tier, at decode sizes.
inline bool grid_route_shape(const route_params& p, int num_rows) {
  return grid_route_tier(p) && num_rows <= fused_max_rows;
}

/// When lynx::route takes the grid path. LYNX_GRID_ROUTE, defined before including Lynx: 0,
/// never; 1, wherever it applies and fits; unset, where the fused block would give a warp more
/// than one row. That is the crossover measured on an H200 (bench/README, 2026-12-04): with a
/// row per warp the one block is faster (its single launch against a memset and a cooperative
/// launch), beyond that every phase reloads rows on one SM, and the grid path is faster at every
/// benchmark shape: 1.1-2.1x at T = 32-64, 2.4-6.4x at T = 256.
#ifndef LYNX_GRID_ROUTE
#define LYNX_GRID_ROUTE -1
#endif
inline constexpr int grid_route_mode = LYNX_GRID_ROUTE;

/// Whether a call may take the grid path: its shape and policy, and a plain router (a model
/// router's calls stay on the fused path).
inline bool grid_route_policy(const route_params& p, int num_rows) {
  return p.router.plain() && grid_route_shape(p, num_rows);
}

/// The rows that decide lynx::route's own choice of decode path: B where the host knows it (the
/// fused block gives the padding rows past B no work but their pad ids), else all of them.
inline int decode_rows(int num_rows, const token_count& valid) {
  return valid.by_pointer ? num_rows : valid.rows(num_rows);
}

/// Whether lynx::route's own choice (decode_choice::automatic) tries the grid path: the policy
/// allows it and LYNX_GRID_ROUTE asks for it, or (unset) the rows outnumber the fused block's
/// warps at this tier. The occupancy check (choose_decode_path) comes after.
inline bool grid_route_wanted(const route_params& p, int num_rows, int max_n, int mode = grid_route_mode) {
  if (mode == 0 || !grid_route_policy(p, num_rows)) return false;
  return mode > 0 || num_rows > fused_threads(max_n) / 32;
}

/// The decode path: the grid path when the policy allows it and its blocks fit on the device
/// at once (resident_blocks: what the occupancy query says; 0 when it could not be asked),
/// else the fused one-block path.
inline route_path choose_decode_path(const route_params& p, int num_rows, int resident_blocks) {
  return grid_route_policy(p, num_rows) && warp_row_blocks(num_rows) <= resident_blocks ? route_path::grid
                                                                                        : route_path::fused;
}

/// Which decode path lynx::route's body takes: its own choice, or (the device tests, on any
/// build) the grid path wherever the policy allows it and it fits, else cudaErrorNotSupported,
/// or the fused one-block path.
enum class decode_choice { automatic, grid, fused };


inline cudaError_t to_cuda_error(status s) { return s == status::success ? cudaSuccess : cudaErrorInvalidValue; }

}  // namespace detail
}  // namespace lynx
