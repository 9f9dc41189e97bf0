#pragma once
// The host's per-row plain top-k (topk.hpp's plain_topk) in AVX2 intrinsics: the candidate
// selection (which also counts) and the candidate ranks are 8 experts per instruction, where the
// portable loops compile to one expert per few instructions (a compaction does not auto-vectorize).
// Same candidates, same ranks, bitwise the same keys out.

#include <cstdint>

#include "simd.hpp"

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

/// Keeps the entries i < c with x[i] >= cut, in order: their values to ox, their ids to oid
/// (id[i], or i where id is null). Returns how many; the outputs have room for c + 8 (each
/// step stores 8).
template <bool Ids>
LYNX_HOST_AVX2 inline int keep_at_least(const float* x, const int* id, int c, float cut, float* ox, int* oid) {
  const __m256 bound = _mm256_set1_ps(cut);
  int kept = 0, i = 0;
  for (; i + 8 <= c; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, bound, _CMP_GE_OQ)));
    const __m256i pos = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(compact_lut.lut[mask])));
    __m256i ids;
    if constexpr (Ids)
      ids = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(id + i)), pos);
    else
      ids = _mm256_add_epi32(pos, _mm256_set1_epi32(i));
    _mm256_storeu_ps(ox + kept, _mm256_permutevar8x32_ps(v, pos));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(oid + kept), ids);
    kept += __builtin_popcount(mask);
  }
  for (; i < c; ++i) {
    ox[kept] = x[i];
    oid[kept] = Ids ? id[i] : i;
    kept += x[i] >= cut ? 1 : 0;
  }
  return kept;
}
LYNX_HOST_AVX2 inline int keep_at_least(const float* x, const int* id, int c, float cut, float* ox, int* oid) {
  return id ? keep_at_least<true>(x, id, c, cut, ox, oid) : keep_at_least<false>(x, id, c, cut, ox, oid);
}

/// The least of the column maxima of x[0, whole) in 8G columns (column e mod 8G; whole is a
/// multiple of 8G). No NaN in x, so max_ps and min_ps are exact.
template <int G>
LYNX_HOST_AVX2 inline float column_min_max(const float* x, int whole) {
  __m256 acc[G];
  for (int a = 0; a < G; ++a) acc[a] = _mm256_loadu_ps(x + 8 * a);
  for (int e = 8 * G; e < whole; e += 8 * G)
    for (int a = 0; a < G; ++a) acc[a] = _mm256_max_ps(acc[a], _mm256_loadu_ps(x + e + 8 * a));
  __m256 m = acc[0];
  for (int a = 1; a < G; ++a) m = _mm256_min_ps(m, acc[a]);
  __m128 h = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_min_ps(h, _mm_movehl_ps(h, h));
  h = _mm_min_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}
LYNX_HOST_AVX2 inline float column_min_max(const float* x, int whole, int g) {
  switch (g) {
    case 1: return column_min_max<1>(x, whole);
    case 2: return column_min_max<2>(x, whole);
    case 3: return column_min_max<3>(x, whole);
    default: return column_min_max<4>(x, whole);  // k <= max_top_k = 32
  }
}
/// colmax[j] = the max of x[e] over e < whole with e mod 8 == j (whole is a multiple of 8).
LYNX_HOST_AVX2 inline void column_max(const float* x, int whole, float* colmax) {
  __m256 acc = _mm256_loadu_ps(x);
  for (int e = 8; e < whole; e += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + e));
  _mm256_storeu_ps(colmax, acc);
}

/// Bit e of words[e / 64]: q[e] == want; returns how many.
LYNX_HOST_AVX2 inline int match_bits(const std::int8_t* q, int n, std::int8_t want, std::uint64_t* words) {
  const __m256i w = _mm256_set1_epi8(want);
  int count = 0, e = 0;
  for (; e + 64 <= n; e += 64) {
    const std::uint32_t lo = static_cast<std::uint32_t>(
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e)), w)));
    const std::uint32_t hi = static_cast<std::uint32_t>(
        _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e + 32)), w)));
    const std::uint64_t b = (static_cast<std::uint64_t>(hi) << 32) | lo;
    words[e / 64] = b;
    count += __builtin_popcountll(b);
  }
  if (e < n) {
    std::uint64_t b = 0;
    for (int j = 0; e + j < n; ++j) b |= static_cast<std::uint64_t>(q[e + j] == want) << j;
    words[e / 64] = b;
    count += __builtin_popcountll(b);
  }
  return count;
}

/// rank[i] = #{j : v[j] > v[i], or v[j] == v[i] and j < i} for i < c; v has c rounded up to 8
/// entries, padded with INT32_MIN (below every real value, which is never INT32_MIN itself).
/// Eight i at a time against each j: v[j] >= v[i] for j < i is v[j] > v[i] - 1.
LYNX_HOST_AVX2 inline void rank_candidates(const std::int32_t* v, int c, int* rank) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int i0 = 0; i0 < c; i0 += 8) {
    const __m256i vi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i0));
    const __m256i ii = _mm256_add_epi32(lane, _mm256_set1_epi32(i0));
    __m256i r = _mm256_setzero_si256();
    for (int j = 0; j < c; ++j) {
      const __m256i earlier = _mm256_cmpgt_epi32(ii, _mm256_set1_epi32(j));  // -1 where j < i
      const __m256i ahead = _mm256_cmpgt_epi32(_mm256_set1_epi32(v[j]), _mm256_add_epi32(vi, earlier));
      r = _mm256_sub_epi32(r, ahead);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rank + i0), r);
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
inline int keep_at_least(const float*, const int*, int, float, float*, int*) { return 0; }
inline void rank_candidates(const std::int32_t*, int, int*) {}
inline int match_bits(const std::int8_t*, int, std::int8_t, std::uint64_t*) { return 0; }
inline float column_min_max(const float*, int, int) { return 0.0f; }
inline void column_max(const float*, int, float*) {}
}  // namespace avx2
}  // namespace detail
}  // namespace host
}  // namespace lynx
#endif
