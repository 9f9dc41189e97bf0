#pragma once
// The host path's per-row selections: the plain top-k (one N-wide selection per row, without
// a data-dependent branch per expert) and the top-k inside the active set K derived from it.
// Each yields the same keys, in the same order, as the kernels' packed-key top-k.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "../row_math.hpp"
#include "rows.hpp"
#include "simd.hpp"
#include "topk_avx2.hpp"

namespace lynx {
namespace host {
namespace detail {

namespace d = lynx::detail;

/// The row's top-k logit keys (SPEC §4 order), where experts whose mask is 0 (if a mask is
/// given) have key bits 0, below every logit's. The fallback of plain_topk (ties, few finite
/// logits): a scan.
LYNX_HOST_INLINE void plain_topk_scan(const float* x, const std::uint32_t* mask, int n, int k, std::uint64_t* best) {
  d::topk_clear(best, k);
  for (int e = 0; e < n; ++e) d::topk_push(best, k, key_of(d::ordered_bits(x[e]) & (mask ? mask[e] : ~0u), e));
}

/// The entries i < c with x[i] >= cut, in order (values and ids; ids i where id is null), and
/// how many; the ranks of candidates (topk_avx2.hpp says what each computes).
template <class Isa>
LYNX_HOST_INLINE int keep_at_least(Isa, const float* x, const int* id, int c, float cut, float* ox, int* oid) {
  if constexpr (Isa::avx2) {
    return avx2::keep_at_least(x, id, c, cut, ox, oid);
  } else {
    int kept = 0;
    for (int i = 0; i < c; ++i) {
      ox[kept] = x[i];
      oid[kept] = id ? id[i] : i;
      kept += x[i] >= cut ? 1 : 0;
    }
    return kept;
  }
}
template <class Isa>
LYNX_HOST_INLINE void rank_candidates(Isa, const std::int32_t* v, int c, int* rank) {
  if constexpr (Isa::avx2) {
    avx2::rank_candidates(v, c, rank);
  } else {
    for (int i = 0; i < c; ++i) {
      int r = 0;
      for (int j = 0; j < i; ++j) r += v[j] >= v[i] ? 1 : 0;
      for (int j = i + 1; j < c; ++j) r += v[j] > v[i] ? 1 : 0;
      rank[i] = r;
    }
  }
}

LYNX_HOST_INLINE int lowest_set_bit(std::uint64_t b) {  // b != 0
#if defined(__GNUC__)
  return __builtin_ctzll(b);
#else
  int i = 0;
  for (; !(b & 1u); b >>= 1) ++i;
  return i;
#endif
}

/// Bit e of words[e / 64]: q[e] == want; returns how many (n <= max_experts).
template <class Isa>
LYNX_HOST_INLINE int match_bits(Isa, const std::int8_t* q, int n, std::int8_t want, std::uint64_t* words) {
  if constexpr (Isa::avx2) {
    return avx2::match_bits(q, n, want, words);
  } else {
    int count = 0;
    for (int w = 0; w < (n + 63) / 64; ++w) {
      std::uint64_t b = 0;
      for (int j = 0; j < 64 && w * 64 + j < n; ++j) {
        const bool hit = q[w * 64 + j] == want;
        b |= static_cast<std::uint64_t>(hit) << j;
        count += hit ? 1 : 0;
      }
      words[w] = b;
    }
    return count;
  }
}

/// Scratch of plain_topk for rows of n experts: two candidate lists (values and ids).
struct topk_scratch {
  buffer<float> x0, x1;
  buffer<int> id0, id1;
  explicit topk_scratch(int n)
      : x0(static_cast<std::size_t>(n) + 8), x1(static_cast<std::size_t>(n) + 8),
        id0(static_cast<std::size_t>(n) + 8), id1(static_cast<std::size_t>(n) + 8) {}
};

/// A cutoff that at least k of the n sanitized logits reach, since each column holds its own
/// max: the least of the maxima of 8g >= k columns (expert e in column e mod 8g), or for k <= 4
/// the k-th largest of 8. It keeps about 2.5k of 128 normal logits. -inf (keep all) where the
/// row is too short for such columns.
template <class Isa>
LYNX_HOST_INLINE float column_cut(Isa, const float* x, int n, int k) {
  const int g = (k + 7) / 8, cols = 8 * g, whole = n / cols * cols;
  if (n < 2 * cols) return -INFINITY;
  if (k > 4) {
    if constexpr (Isa::avx2) return avx2::column_min_max(x, whole, g);
  }
  float colmax[max_top_k];
  std::fill(colmax, colmax + max_top_k, -INFINITY);
  if constexpr (Isa::avx2) {
    avx2::column_max(x, whole, colmax);  // g = 1 here
  } else {
    for (int e = 0; e < whole; ++e) {
      float& c = colmax[e % cols];
      c = x[e] > c ? x[e] : c;  // no NaN in x
    }
  }
  if (k <= 4) {  // the k largest of the 8 maxima, descending (a short insertion)
    float top[4] = {};
    int have = 0;
    for (int j = 0; j < cols; ++j) {
      const float v = colmax[j];
      if (have == k && !(v > top[k - 1])) continue;
      int i = have < k ? have++ : k - 1;
      for (; i > 0 && top[i - 1] < v; --i) top[i] = top[i - 1];
      top[i] = v;
    }
    return top[k - 1];
  }
  float cut = colmax[0];
  for (int j = 1; j < cols; ++j) cut = colmax[j] < cut ? colmax[j] : cut;
  return cut;
}

/// The row's top-k logit keys (SPEC §4 order) without a data-dependent branch per expert.
/// One pass over the row keeps the experts at or above column_cut (a vector compaction); while
/// that keeps more than about k + 8, the kept list is narrowed by bisecting the cutoff toward
/// the row's max m (each step a pass over the list alone); then each candidate's rank among
/// them (by logit, then lower id) is its slot. With `ranked`, every candidate in key order goes
/// there (the row's best keys) and the count is returned. A mask (masked_topk's) puts the
/// experts whose mask is 0, which are at -inf in x, below every other key.
template <class Isa>
LYNX_HOST_INLINE int plain_topk(Isa isa, const float* x, const std::uint32_t* mask, int n, int k, float m,
                                topk_scratch& s, std::uint64_t* best, std::uint64_t* ranked = nullptr) {
  constexpr int max_candidates = 64;  // ranking is quadratic in the candidates
  const int cap = (k + 15) & ~7;  // k + 8 or a little more: ranks go 8 candidates at a time
  float good = column_cut(isa, x, n, k), high = m;  // cutoffs that keep >= k, and maybe fewer
  int c = keep_at_least(isa, x, nullptr, n, good, s.x0.data(), s.id0.data());
  float* cx = s.x0.data();
  int* cid = s.id0.data();
  for (int iter = 0; iter < 12 && c > cap && good > -INFINITY; ++iter) {
    const float mid = 0.5f * good + 0.5f * high;
    float* nx = cx == s.x0.data() ? s.x1.data() : s.x0.data();
    int* nid = cid == s.id0.data() ? s.id1.data() : s.id0.data();
    for (int i = 0; i < 8; ++i) cx[c + i] = -INFINITY;  // whole steps of 8: the padding stays out
    const int kept = keep_at_least(isa, cx, cid, (c + 7) & ~7, mid, nx, nid);
    if (kept >= k) {
      good = mid;
      c = kept;
      cx = nx;
      cid = nid;
    } else {
      high = mid;
    }
  }
  if (c > max_candidates) {  // ties or few finite logits: scan instead
    plain_topk_scan(x, mask, n, k, best);
    if (ranked)
      for (int i = 0; i < k; ++i) ranked[i] = best[i];
    return k;
  }
  // Signed compares of the order-preserving bits, plus one: padding (INT32_MIN) sorts below
  // every candidate. A masked expert can be a candidate only when the cutoff is -inf (it is
  // at -inf in x); its bits are 0 here, as in plain_topk_scan, below every logit's, so that
  // members of the mask at -inf still outrank it.
  std::uint32_t bits[max_candidates];
  std::int32_t v[max_candidates + 8];
  int rank[max_candidates];
  for (int i = 0; i < c; ++i) bits[i] = d::ordered_bits(cx[i]);
  if (mask)
    for (int i = 0; i < c; ++i) bits[i] &= mask[cid[i]];
  for (int i = 0; i < c; ++i) v[i] = static_cast<std::int32_t>(bits[i] ^ 0x80000000u) + 1;
  for (int i = 0; i < 8; ++i) v[c + i] = INT32_MIN;
  rank_candidates(isa, v, c, rank);
  if (ranked) {  // every candidate in key order: the row's best keys above the cutoff
    for (int i = 0; i < c; ++i) ranked[rank[i]] = key_of(bits[i], cid[i]);
    for (int i = 0; i < k; ++i) best[i] = ranked[i];
    return c;
  }
  std::uint64_t slot[max_top_k + 1];
  for (int i = 0; i < c; ++i) slot[rank[i] < k ? rank[i] : k] = key_of(bits[i], cid[i]);
  for (int i = 0; i < k; ++i) best[i] = slot[i];
  return c;
}

/// A model router's choice for a loaded row x (the host's; warp_router_topk is the device's):
/// its choice scores c, its kept groups (returned) and P, the top-k keys of c inside the kept
/// groups in choice order, which is router_choice's result exactly (plain_topk with the
/// other groups masked below every key). The choice scores are one loop without branches.
template <class Isa>
LYNX_HOST_INLINE std::uint32_t router_choice_row(Isa isa, const float* x, int n, int k, const model_router& r, float* c,
                                                 float* masked, std::uint32_t* mask, topk_scratch& ts,
                                                 std::uint64_t* taken) {
  if (r.bias) {
    const float* b = r.bias;
    for (int e = 0; e < n; ++e) c[e] = d::sigmoid(x[e]) + d::sanitize(b[e]);
  } else {
    std::copy_n(x, n, c);
  }
  const std::uint32_t kept = d::router_groups(c, n, r);
  const int size = n / r.num_groups;
  const std::uint32_t minus_inf = d::float_bits(-INFINITY);
  std::uint32_t top = 0;
  for (int e = 0; e < n; ++e) {
    const std::uint32_t mk = 0u - (kept >> (e / size) & 1u);
    const float v = d::bits_float((d::float_bits(c[e]) & mk) | (minus_inf & ~mk));
    masked[e] = v;
    mask[e] = mk;
    const std::uint32_t o = d::ordered_bits(v) & mk;
    top = o > top ? o : top;
  }
  plain_topk(isa, masked, r.grouped() ? mask : nullptr, n, k, d::unordered_float(top), ts, taken);
  return kept;
}

/// Scratch of router_choice_row.
struct router_scratch {
  buffer<float> masked;
  buffer<std::uint32_t> mask;
  topk_scratch ts;
  explicit router_scratch(int n) : masked(static_cast<std::size_t>(n)), mask(static_cast<std::size_t>(n)), ts(n) {}
};

/// How many keys plain_topk's `ranked` output may hold.
inline constexpr int max_ranked = 64;

/// The active set K as the final selection reads it.
struct active_set {
  std::vector<std::uint8_t> flag;   // per expert: in K
  std::vector<std::uint32_t> mask;  // per expert: all ones if in K
  std::vector<int> list;            // K's ids, ascending
  explicit active_set(const std::vector<std::uint8_t>& in_active) : flag(in_active), mask(in_active.size()) {
    for (std::size_t e = 0; e < flag.size(); ++e) {
      mask[e] = flag[e] ? ~0u : 0u;
      if (flag[e]) list.push_back(static_cast<int>(e));
    }
  }
};

/// Scratch of final_topk, reused across rows.
struct final_scratch {
  buffer<float> x;
  topk_scratch ts;
  explicit final_scratch(int n) : x(static_cast<std::size_t>(n)), ts(n) {}
};

/// The row's top-k keys among the experts whose mask is all ones: plain_topk of the row with
/// the others at -inf and below every key (so any member, even at -inf, ranks above them).
template <class Isa>
LYNX_HOST_INLINE void masked_topk(Isa isa, const float* x, float m, int n, int k, const std::uint32_t* mask,
                                  final_scratch& fs, std::uint64_t* out) {
  const std::uint32_t minus_inf = d::float_bits(-INFINITY);
  for (int e = 0; e < n; ++e) {
    const std::uint32_t mk = mask[e];
    fs.x[e] = d::bits_float((d::float_bits(x[e]) & mk) | (minus_inf & ~mk));
  }
  plain_topk(isa, fs.x.data(), mask, n, k, m, fs.ts, out);
}

/// SPEC §3.3 step 3 for one row: its top-k of (active bit, logit key), in that key order.
/// When P lies inside K, that is P; else the first k of K among the row's ranked candidates,
/// when there are k. Otherwise, with K at least k large, it is the plain top-k
/// of the row with every expert outside K masked to -inf (and below every key inside K).
/// With K smaller than k: K by key, then P \ K (the best keys outside K).
template <class Isa>
LYNX_HOST_INLINE void final_topk(Isa isa, const float* x, float m, const std::uint64_t* plain,
                                 const int* plain_ids, const std::uint64_t* ranked, int num_ranked,
                                 int n, int k, const active_set& K, final_scratch& fs,
                                 std::uint64_t* chosen) {
  int c = 0;
  for (int i = 0; i < k; ++i) c += K.flag[plain_ids[i]];
  if (c == k) {
    for (int i = 0; i < k; ++i) chosen[i] = plain[i];
    return;
  }
  // The row's best keys (plain_topk's candidates, every key above a cutoff) usually hold k
  // experts of K; those are then its top-k inside K.
  c = 0;
  for (int i = 0; i < num_ranked && c < k; ++i)
    if (K.flag[d::key_expert(ranked[i])]) chosen[c++] = ranked[i];
  if (c == k) return;
  const int size = static_cast<int>(K.list.size());
  if (size >= k) {
    masked_topk(isa, x, m, n, k, K.mask.data(), fs, chosen);
    return;
  }
  c = 0;
  for (const int e : K.list) chosen[c++] = key_of(x[e], e);
  std::sort(chosen, chosen + c, [](std::uint64_t a, std::uint64_t b) { return a > b; });
  for (int i = 0; i < k && c < k; ++i)
    if (!K.flag[d::key_expert(plain[i])]) chosen[c++] = plain[i];
}

}  // namespace detail
}  // namespace host
}  // namespace lynx
