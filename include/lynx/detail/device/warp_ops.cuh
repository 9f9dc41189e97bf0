#pragma once
// Warp-wide reductions the warp- and block-level functions share. Every one runs on full
// warps (mask 0xffffffff): the library's warp functions are warp-collective.

#include <cstdint>

namespace lynx {
namespace detail {

inline constexpr unsigned full_mask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(full_mask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ std::uint64_t warp_max(std::uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const std::uint64_t w = __shfl_xor_sync(full_mask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// The warp's largest 64-bit key, by its high word first: a 32-bit max (one instruction from
/// sm_80 on, a 5-step butterfly before), then the one lane that holds it gives the whole key.
/// Only when several lanes share the high word does it take the full 64-bit butterfly.
__device__ __forceinline__ std::uint64_t warp_max_key(std::uint64_t v) {
  const unsigned hi = static_cast<unsigned>(v >> 32);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned top = __reduce_max_sync(full_mask, hi);
#else
  unsigned top = hi;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned w = __shfl_xor_sync(full_mask, top, o);
    top = w > top ? w : top;
  }
#endif
  const unsigned holders = __ballot_sync(full_mask, hi == top);
  if ((holders & (holders - 1)) == 0) return __shfl_sync(full_mask, v, __ffs(holders) - 1);
  return warp_max(hi == top ? v : std::uint64_t{0});
}

/// An integer sum (exact in any order): one instruction from sm_80 on, a 5-step butterfly before.
__device__ __forceinline__ int warp_sum(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(full_mask, v);
#else
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
#endif
}

/// The butterfly of row_exp_sum (row_math.hpp): lane j's partial plus lane j^o's, own first.
__device__ __forceinline__ float warp_butterfly_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(full_mask, v, o);
  return v;
}

struct max_op {
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a > b ? a : b; }
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

/// Bit e of a flag set kept as 32-bit words (shared or global memory).
__device__ __forceinline__ bool test_bit(const std::uint32_t* words, int e) { return (words[e >> 5] >> (e & 31)) & 1u; }
__device__ __forceinline__ void set_bit(std::uint32_t* words, int e) { atomicOr(words + (e >> 5), 1u << (e & 31)); }

}  // namespace detail
}  // namespace lynx
