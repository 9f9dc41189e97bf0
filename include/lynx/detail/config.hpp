#pragma once
// Compile-time limits and the host/device qualifier shared by every Lynx header.

#include <cstdint>

// Forced inline on the host too: the host path compiles its hot loops for AVX2 + FMA behind a
// runtime check (host/simd.hpp), and only code inlined into those loops gets that target.
#if defined(__CUDACC__)
#define LYNX_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define LYNX_HD inline __attribute__((always_inline))
#else
#define LYNX_HD inline
#endif

// `#pragma unroll` in code the host compiler also sees: only in nvcc's device pass, since its
// host pass hands the pragma to the host compiler (-Wunknown-pragmas there).
#if defined(__CUDA_ARCH__)
#define LYNX_UNROLL _Pragma("unroll")
#else
#define LYNX_UNROLL
#endif

namespace lynx {

/// Largest expert count any entry point accepts (ranks are packed in 11 bits, ids in 16).
inline constexpr int max_experts = 1024;
/// Largest top-k any entry point accepts (per-row selection keeps k keys in registers).
inline constexpr int max_top_k = 32;
/// Largest routed scaling factor a model router accepts: a weight is at most k times it (a
/// sigmoid top-k mass without renormalize), so every weight stays finite (2^100 x 32 < FLT_MAX).
inline constexpr float max_router_scaling = 0x1p100f;
/// Largest row count (num_rows) any entry point accepts: far beyond a decode or prefill batch,
/// and small enough that every row, slot and grid-size sum of the kernels stays within int32
/// (num_rows * top_k <= 2^29).
inline constexpr int max_num_rows = 1 << 24;
/// Deepest bin when beta = 0 ("no clamp"): SPEC §2 allows a documented saturation depth >= 15.
inline constexpr int max_bin_depth = 31;
/// Number of histogram digits kept per expert at most (bins 0 .. -max_bin_depth).
inline constexpr int max_bins = max_bin_depth + 1;
/// Bin value written for every entry of a row that does not vote (padding, or no finite logit).
inline constexpr std::int8_t no_vote = -128;

namespace detail {
/// Deepest bin index (as a positive depth): -beta when beta > 0, else the saturation depth.
LYNX_HD int bin_depth(int beta) { return beta > 0 ? beta : max_bin_depth; }
}  // namespace detail

}  // namespace lynx
