#pragma once
// The host's per-row plain top-k (host_rows.hpp's plain_topk) in AVX2 intrinsics: the candidate
// gather (which also counts) and the candidate ranks are 8 experts per instruction, where the
// portable loops compile to one expert per few instructions (a gather does not auto-vectorize).
// Same candidates, same ranks, bitwise the same keys out.

#include <cstdint>

#include "host_simd.hpp"

#if LYNX_HOST_DISPATCH
#include <immintrin.h>

namespace lynx {
namespace host {
namespace detail {
namespace avx2 {

/// compact_lut[mask]: the positions of mask's set bits, in order, one byte each.
struct compact_table {
  std::uint64_t lut[256];
  constexpr compact_table() : lut() {
    for (int mask = 0; mask < 256; ++mask) {
      std::uint64_t v = 0;
      int c = 0;
      for (int b = 0; b < 8; ++b)
        if (mask & (1 << b)) v |= static_cast<std::uint64_t>(b) << (8 * c++);
      lut[mask] = v;
    }
  }
};
inline constexpr compact_table compact_lut{};

/// Writes the ids e with x[e] >= cut to out in id order; returns how many. out has room for
/// n + 8 ids (each step stores 8).
LYNX_HOST_AVX2 inline int gather_at_least(const float* x, int n, float cut, int* out) {
  const __m256 c = _mm256_set1_ps(cut);
  int kept = 0, e = 0;
  for (; e + 8 <= n; e += 8) {
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + e), c, _CMP_GE_OQ)));
    const __m256i pos = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(compact_lut.lut[mask])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kept), _mm256_add_epi32(pos, _mm256_set1_epi32(e)));
    kept += __builtin_popcount(mask);
  }
  for (; e < n; ++e) {
    out[kept] = e;
    kept += x[e] >= cut ? 1 : 0;
  }
  return kept;
}

/// rank[i] = #{j : v[j] > v[i], or v[j] == v[i] and j < i} for i < c; v has c rounded up to 8
/// entries, padded with INT32_MIN (below every real value).
LYNX_HOST_AVX2 inline void rank_candidates(const std::int32_t* v, int c, int* rank) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int i = 0; i < c; ++i) {
    const __m256i vi = _mm256_set1_epi32(v[i]), ii = _mm256_set1_epi32(i);
    int r = 0;
    for (int j = 0; j < c; j += 8) {
      const __m256i vj = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
      const __m256i earlier = _mm256_cmpgt_epi32(ii, _mm256_add_epi32(lane, _mm256_set1_epi32(j)));
      const __m256i ahead = _mm256_or_si256(_mm256_cmpgt_epi32(vj, vi), _mm256_and_si256(_mm256_cmpeq_epi32(vj, vi), earlier));
      r += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(ahead))));
    }
    rank[i] = r;
  }
}

}  // namespace avx2
}  // namespace detail
}  // namespace host
}  // namespace lynx
#else
namespace lynx {
namespace host {
namespace detail {
namespace avx2 {  // never called without dispatch (isa_avx2 is never instantiated)
inline int gather_at_least(const float*, int, float, int*) { return 0; }
inline void rank_candidates(const std::int32_t*, int, int*) {}
}  // namespace avx2
}  // namespace detail
}  // namespace host
}  // namespace lynx
#endif
