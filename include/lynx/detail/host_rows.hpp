#pragma once
// The host path's loops, written once as forced-inline templates that host.hpp instantiates
// for AVX2 + FMA and for any CPU (host_simd.hpp). The per-element math is row_math.hpp's,
// shared with the kernels; what differs from the kernels is only how work is organised:
//
// - each row is loaded once into sanitized floats, in a loop without branches that compilers
//   vectorize;
// - each row runs one N-wide selection, its plain top-k (P), and derives the other two from it:
//   the z top-k (SPEC §3.3 step 1) needs only the bin q* of P's k-th expert, because bins are
//   monotone in the logit, and then the best of bin q* by batch rank (a walk in rank order, or
//   the bin's few experts when it is sparse); the top-k inside K is usually P, or the first k
//   members of K among P's ranked candidates, so it rarely scans N again.
//
// Every shortcut yields the same ids, in the same order, as the kernels' packed-key top-k, and
// each falls back to that top-k where its premise does not hold (bins not from affinity_bin).

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "../params.hpp"
#include "budget.hpp"
#include "histogram_rank.hpp"
#include "host_simd.hpp"
#include "host_topk_avx2.hpp"
#include "row_math.hpp"

namespace lynx {
namespace host {
namespace detail {

namespace d = lynx::detail;

/// Scratch that every use writes before it reads: no zero fill (std::vector's costs as much as
/// a pass over the batch).
template <class T>
class buffer {
 public:
  explicit buffer(std::size_t n) : p_(new T[n]) {}
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  T& operator[](std::size_t i) { return p_[i]; }
  const T& operator[](std::size_t i) const { return p_[i]; }

 private:
  std::unique_ptr<T[]> p_;
};

/// Loads a row: x[e] = the sanitized logit (no NaN, no -0). Returns the row's max (-inf: the
/// row does not vote).
template <class T>
LYNX_HOST_INLINE float load_row(const T* row, int n, float* x) {
  std::uint32_t top = 0;  // an integer max vectorizes (a float one would need -ffast-math)
  for (int e = 0; e < n; ++e) {
    const float v = d::sanitize(d::to_float(row[e]));
    const std::uint32_t b = d::ordered_bits(v);
    x[e] = v;
    top = b > top ? b : top;
  }
  return d::unordered_float(top);
}

LYNX_HOST_INLINE std::uint64_t key_of(std::uint32_t u, int e) {
  return (static_cast<std::uint64_t>(u) << 16) | static_cast<std::uint64_t>(0xFFFF - e);
}
/// The logit key of a loaded logit (d::logit_key without sanitizing again).
LYNX_HOST_INLINE std::uint64_t key_of(float x, int e) { return key_of(d::ordered_bits(x), e); }

/// The row's top-k logit keys (SPEC §4 order), where experts whose mask is 0 (if a mask is
/// given) have key bits 0, below every logit's. The fallback of plain_topk (ties, few finite
/// logits): a scan.
LYNX_HOST_INLINE void plain_topk_scan(const float* x, const std::uint32_t* mask, int n, int k, std::uint64_t* best) {
  d::topk_clear(best, k);
  for (int e = 0; e < n; ++e) d::topk_push(best, k, key_of(d::ordered_bits(x[e]) & (mask ? mask[e] : ~0u), e));
}

/// The entries i < c with x[i] >= cut, in order (values and ids; ids i where id is null), and
/// how many; the ranks of candidates (host_topk_avx2.hpp says what each computes).
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

/// How many keys plain_topk's `ranked` output may hold.
inline constexpr int max_ranked = 64;

/// row_exp_sum over loaded logits: the same 32 lane sums and butterfly, with the lanes as the
/// inner loop so that it vectorizes.
LYNX_HOST_INLINE float row_exp_sum(const float* x, int n, float m) {
  float p[32] = {};
  int base = 0;
  for (; base + 32 <= n; base += 32)
    for (int j = 0; j < 32; ++j) p[j] += d::exp_f32(x[base + j] - m);
  for (int j = 0; base + j < n; ++j) p[j] += d::exp_f32(x[base + j] - m);
  return d::butterfly_sum(p);
}

/// original_mass (row_math.hpp) from a loaded row.
template <class T>
LYNX_HOST_INLINE float original_mass(const T* row, const float* x, int n, float m,
                                     const std::uint64_t* topk, int k, scoring s, bool renormalize) {
  if (renormalize) return 1.0f;
  return d::topk_mass(row, m, topk, k, s, s == scoring::sigmoid ? 0.0f : row_exp_sum(x, n, m));
}

/// SPEC §3.1 for a loaded row.
LYNX_HOST_INLINE void bin_row(const float* x, int n, float m, float alpha, int depth,
                              std::int8_t* out) {
  for (int e = 0; e < n; ++e) out[e] = static_cast<std::int8_t>(d::affinity_bin_of(x[e], m, alpha, depth));
}

/// Adds rows' bins to the histogram counts[j * n + e] (j < nbins; counts start at 0). Up to 8
/// bins count in bytes, one compare-and-subtract per 32 experts and bin (a vector pass; a
/// scatter does not vectorize), and carry into counts every 255 rows and at the end.
class histogram_counter {
 public:
  histogram_counter(int n, int nbins, std::int32_t* counts)
      : n_(n), nbins_(nbins), counts_(counts), bytes_(nbins <= 8 ? static_cast<std::size_t>(nbins) * n : 0, 0) {}
  ~histogram_counter() { flush(); }
  LYNX_HOST_INLINE void add(const std::int8_t* q) {
    if (bytes_.empty()) {
      for (int e = 0; e < n_; ++e) {
        const int j = d::bin_digit(q[e]);
        if (j >= 0 && j < nbins_) ++counts_[static_cast<std::size_t>(j) * n_ + e];
      }
      return;
    }
    for (int j = 0; j < nbins_; ++j) {
      std::uint8_t* c = bytes_.data() + static_cast<std::size_t>(j) * n_;
      const std::int8_t want = static_cast<std::int8_t>(-j);
      for (int e = 0; e < n_; ++e) c[e] = static_cast<std::uint8_t>(c[e] + (q[e] == want ? 1 : 0));
    }
    if (++pending_ == 255) flush();
  }
  void flush() {
    for (std::size_t i = 0; i < bytes_.size(); ++i) {
      counts_[i] += bytes_[i];
      bytes_[i] = 0;
    }
    pending_ = 0;
  }

 private:
  int n_, nbins_;
  std::int32_t* counts_;
  std::vector<std::uint8_t> bytes_;
  int pending_ = 0;
};

/// Competition ranks of the histograms (0 = greatest H), and optionally the experts in rank
/// order (rank ascending, then id: H descending). When every digit fits, each histogram packs
/// into one integer whose order is H's, and one sort of those gives the ranks.
LYNX_HOST_INLINE void rank_histograms(const std::int32_t* counts, int n, int nbins, std::int32_t* ranks,
                                      int* order = nullptr) {
  std::int32_t most = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n) * nbins; ++i) most = counts[i] > most ? counts[i] : most;
  int bits = 1;
  while (bits < 31 && (std::int64_t{1} << bits) <= most) ++bits;
  if (bits * nbins <= 48) {
    std::vector<std::uint64_t> packed(n, 0);
    for (int j = 0; j < nbins; ++j)  // digit by digit: a vector pass each
      for (int e = 0; e < n; ++e)
        packed[e] = (packed[e] << bits) | static_cast<std::uint64_t>(counts[static_cast<std::size_t>(j) * n + e]);
    for (int e = 0; e < n; ++e) packed[e] = (packed[e] << 16) | static_cast<std::uint64_t>(0xFFFF - e);
    std::sort(packed.begin(), packed.end(), [](std::uint64_t a, std::uint64_t b) { return a > b; });
    for (int i = 0; i < n; ++i) {
      const bool tie = i > 0 && (packed[i - 1] >> 16) == (packed[i] >> 16);
      ranks[d::key_expert(packed[i])] = tie ? ranks[d::key_expert(packed[i - 1])] : i;
      if (order) order[i] = d::key_expert(packed[i]);
    }
    return;
  }
  std::vector<int> sorted(n);
  std::iota(sorted.begin(), sorted.end(), 0);
  const auto greater = [&](int a, int b) { return d::histogram_greater(counts, n, nbins, a, b); };
  std::stable_sort(sorted.begin(), sorted.end(), greater);
  for (int i = 0; i < n; ++i) {
    ranks[sorted[i]] = (i > 0 && !greater(sorted[i - 1], sorted[i])) ? ranks[sorted[i - 1]] : i;
    if (order) order[i] = sorted[i];
  }
}

/// The experts in batch-rank order (rank ascending, then id), and for each position the run
/// of equal ranks it lies in, [first, end).
struct rank_order {
  std::vector<int> order, first, end;
  /// From any ranks (remap_topk's caller's): those outside [0, n) are clamped.
  void build(const std::int32_t* ranks, int n) {
    std::vector<int> count(static_cast<std::size_t>(n) + 1, 0);
    for (int e = 0; e < n; ++e) ++count[clamp(ranks[e], n) + 1];
    for (int r = 0; r < n; ++r) count[r + 1] += count[r];
    order.assign(n, 0);
    for (int e = 0; e < n; ++e) order[count[clamp(ranks[e], n)]++] = e;
    runs(ranks, n);
  }
  /// The runs, with `order` already in place (rank_histograms writes it).
  void runs(const std::int32_t* ranks, int n) {
    first.assign(n, 0);
    end.assign(n, n);
    const auto same = [&](int i, int j) { return clamp(ranks[order[i]], n) == clamp(ranks[order[j]], n); };
    for (int i = 1; i < n; ++i) first[i] = same(i, i - 1) ? first[i - 1] : i;
    for (int i = n - 2; i >= 0; --i) end[i] = same(i, i + 1) ? end[i + 1] : i + 1;
  }
  /// Where a rank outside [0, n) goes.
  static int clamp(std::int32_t r, int n) { return r < 0 ? 0 : (r >= n ? n - 1 : r); }
};

/// SPEC §3.3 step 1 for one row: its top-k by z = (bin, batch rank, logit, lower id), the same
/// set as the kernels' top-k of z_key, from the row's plain top-k P (`plain`: its ids in key
/// order). Marks the chosen experts in `mark`.
/// Bins are monotone in the logit, so every expert above the bin q* of the k-th plain expert is
/// in P, and the rest come from bin q* in rank order. `trusted`: the bins are affinity_bin's
/// for these logits (route's own); otherwise the premise is checked, and where it fails this
/// runs the packed-key top-k.
template <class Isa>
LYNX_HOST_INLINE void z_topk(Isa isa, const std::int8_t* q, const float* x, const std::int32_t* ranks,
                             const rank_order& ro, const int* plain, int n, int k, int depth,
                             bool trusted, std::uint8_t* mark, std::vector<int>& pick) {
  // q* = the bin of P's k-th expert; above = how many experts have a higher bin. With bins
  // monotone in the logit, those are all in P, and bin q* holds the k - above others.
  const int star = q[plain[k - 1]];
  int above = 0;
  for (int i = 0; i < k; ++i) above += q[plain[i]] > star ? 1 : 0;
  if (!trusted) {
    int all_above = 0, p_at_least = 0;
    for (int e = 0; e < n; ++e) all_above += q[e] > star ? 1 : 0;
    for (int i = 0; i < k; ++i) p_at_least += q[plain[i]] >= star ? 1 : 0;
    if (star > 0 || star < -depth || all_above != above || p_at_least != k) {
      std::uint64_t best[max_top_k];
      d::topk_clear(best, k);
      for (int e = 0; e < n; ++e) d::topk_push(best, k, d::z_key_high(q[e], ranks[e]) | key_of(x[e], e));
      for (int i = 0; i < k; ++i) mark[d::key_expert(best[i])] = 1;
      return;
    }
  }
  for (int i = 0; i < k; ++i)
    if (q[plain[i]] > star) mark[plain[i]] = 1;
  const std::int8_t want = static_cast<std::int8_t>(star);
  const int need = k - above;
  if (need == 0) return;
  // Bin q* is sparse when q* is not the deepest bin: then the row's few experts in it by
  // (rank, logit key) cost less than a walk in rank order to the need-th of them.
  std::uint64_t words[max_experts / 64];
  const int in_star = match_bits(isa, q, n, want, words);
  if (in_star * in_star <= need * n) {
    std::uint64_t best[max_top_k];
    d::topk_clear(best, need);
    for (int w = 0; w < (n + 63) / 64; ++w)
      for (std::uint64_t b = words[w]; b; b &= b - 1) {
        const int e = w * 64 + lowest_set_bit(b);
        const int r = rank_order::clamp(ranks[e], n);
        d::topk_push(best, need, (static_cast<std::uint64_t>(n - r) << 48) | key_of(x[e], e));
      }
    for (int j = 0; j < need; ++j) mark[d::key_expert(best[j])] = 1;
    return;
  }
  pick.resize(n);
  const int* order = ro.order.data();
  int* picked = pick.data();
  int c = 0, i = 0;  // the first `need` experts of bin q* in rank order
  for (; i < n; ++i) {
    const int e = order[i];
    picked[c] = e;
    c += q[e] == want ? 1 : 0;
    if (c == need) break;
  }
  if (c == need && ro.end[i] - ro.first[i] > 1) {
    // The last pick's rank is shared: its run's experts of bin q* go by logit key instead.
    for (int j = ro.first[i]; j <= i; ++j) c -= q[ro.order[j]] == want ? 1 : 0;
    const int rest = need - c;
    std::uint64_t best[max_top_k];
    d::topk_clear(best, rest);
    for (int j = ro.first[i]; j < ro.end[i]; ++j) {
      const int e = ro.order[j];
      if (q[e] == want) d::topk_push(best, rest, key_of(x[e], e));
    }
    for (int j = 0; j < rest; ++j) mark[d::key_expert(best[j])] = 1;
  }
  for (int j = 0; j < c; ++j) mark[picked[j]] = 1;
}

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

/// The budget policy's greedy (detail/budget.hpp), from loaded rows x (row t at t * n).
/// K starts as K0 = the pinned experts, plus the anchors when all of them fit in the limit (the
/// greedy would take every anchor first anyway), inserted at once; the batch's mass is then
/// summed token by token. Then the best marginal gain, anchors first when they did not fit,
/// until the limit, the target mass, or no gain is left; below k experts, the target does not
/// stop it, and vanished gains leave the rest to fill_from_plain. The kernel evaluates every gain at
/// every step; here stale gains serve as upper bounds (lazy greedy). Each term of a gain only
/// shrinks as K grows and fp32 addition is monotone, so a stale sum bounds the fresh one even
/// in floating point, and the steps, the ties (lower id) and the sums are the kernel's exactly.
template <class Isa>
LYNX_HOST_INLINE void budget_greedy(Isa isa, const float* x, const float* row_m,
                                    const std::uint8_t* votes, int rows, const std::uint8_t* anchors,
                                    const std::uint64_t* plain, int plain_unique, const route_params& p,
                                    std::uint8_t* in_active) {
  const int n = p.num_experts, k = p.top_k;
  std::vector<int> voters;
  for (int t = 0; t < rows; ++t)
    if (votes[t]) voters.push_back(t);
  const int v = static_cast<int>(voters.size());
  // share[i * n + e]: token-major, so that the first gains of all experts are one vector pass.
  std::vector<float> share(static_cast<std::size_t>(v) * n), top(static_cast<std::size_t>(v) * k, 0.0f),
      kth(v, 0.0f), bound(n, 0.0f);
  for (int i = 0; i < v; ++i) {
    const int t = voters[i];
    const float* xt = x + static_cast<std::size_t>(t) * n;
    const std::uint64_t* pt = plain + static_cast<std::size_t>(t) * k;
    float sum = 0.0f;  // plain_activation_sum, over the loaded row
    for (int j = 0; j < k; ++j) sum += d::activation(xt[d::key_expert(pt[j])], row_m[t], p.score);
    float* s = share.data() + static_cast<std::size_t>(i) * n;
    const float mt = row_m[t];
    if (p.score == scoring::sigmoid)  // d::activation, one loop per scoring so that it vectorizes
      for (int e = 0; e < n; ++e) s[e] = d::scaled_sigmoid(xt[e], mt) / sum;
    else
      for (int e = 0; e < n; ++e) s[e] = d::exp_f32(xt[e] - mt) / sum;
  }
  const auto insert = [&](int e) {
    for (int i = 0; i < v; ++i) {
      float* ti = top.data() + static_cast<std::size_t>(i) * k;
      d::share_insert(ti, k, share[static_cast<std::size_t>(i) * n + e]);
      kth[i] = ti[k - 1];
    }
  };
  const int limit = d::budget_limit(p.budget_experts, p.budget_fraction, plain_unique, n, k);
  int size = 0, with_anchors = 0;
  for (int e = 0; e < n; ++e) {
    size += in_active[e] ? 1 : 0;
    with_anchors += (in_active[e] || anchors[e]) ? 1 : 0;
  }
  const bool bulk = with_anchors <= limit;
  std::vector<std::uint32_t> mask(n);
  for (int e = 0; e < n; ++e) {
    if (bulk && anchors[e]) in_active[e] = 1;
    mask[e] = in_active[e] ? ~0u : 0u;
  }
  if (bulk) size = with_anchors;
  // Inserting K0's shares one by one leaves each token the k largest positive ones. A share is
  // exp_f32 or sigmoid of the logit over a per-token sum, and exp_f32 is monotone (checked over
  // every float), so those are the shares of the token's top-k logits inside K0.
  if (size > 0) {
    final_scratch fs(n);
    std::uint64_t best[max_top_k];
    const int take = size < k ? size : k;
    for (int i = 0; i < v; ++i) {
      const int t = voters[i];
      const std::size_t at = static_cast<std::size_t>(t) * n;
      masked_topk(isa, x + at, row_m[t], n, k, mask.data(), fs, best);
      float* ti = top.data() + static_cast<std::size_t>(i) * k;
      for (int j = 0; j < take; ++j) {
        const float sh = share[static_cast<std::size_t>(i) * n + d::key_expert(best[j])];
        ti[j] = sh > 0.0f ? sh : 0.0f;  // share_insert never takes 0 or NaN
      }
      kth[i] = ti[k - 1];
    }
  }
  float total = 0.0f;
  for (int i = 0; i < v; ++i)
    for (int j = 0; j < k; ++j) total += top[static_cast<std::size_t>(i) * k + j];
  const auto gain_of = [&](int e) {
    float g = 0.0f;
    for (int i = 0; i < v; ++i) g += d::share_gain(share[static_cast<std::size_t>(i) * n + e], kth[i]);
    return g;
  };
  for (int i = 0; i < v; ++i) {  // every gain, token by token: the same sums as gain_of
    const float* s = share.data() + static_cast<std::size_t>(i) * n;
    const float ki = kth[i];
    for (int e = 0; e < n; ++e) bound[e] += d::share_gain(s[e], ki);
  }
  std::vector<int> fresh_at(n, size);  // the K size at which bound[e] was computed
  const float target = p.budget_mass * static_cast<float>(v);
  std::vector<std::uint64_t> heap;  // candidates by gain_key of their bound: the argmax in O(log N)
  for (int phase = bulk ? 1 : 0; phase < 2; ++phase) {
    heap.clear();
    for (int e = 0; e < n; ++e)
      if (!in_active[e] && (phase == 1 || anchors[e])) heap.push_back(d::gain_key(bound[e], e));
    std::make_heap(heap.begin(), heap.end());
    // To the limit, or in mass mode to the target, but not below k experts: with fewer, every
    // token would fill its top-k from outside K, and a count limit would break.
    while (size < limit && (phase == 0 || size < k || !(p.budget_mass > 0.0f) || total < target)) {
      int pick = -1;
      while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        const int e = d::key_expert(heap.back());
        heap.pop_back();
        if (fresh_at[e] == size) {
          pick = e;
          break;
        }
        bound[e] = gain_of(e);
        fresh_at[e] = size;
        heap.push_back(d::gain_key(bound[e], e));
        std::push_heap(heap.begin(), heap.end());
      }
      if (pick < 0 || (phase == 1 && !(bound[pick] > 0.0f))) break;
      in_active[pick] = 1;
      ++size;
      total += bound[pick];
      insert(pick);
    }
  }
  for (int i = 0; i < v && size < k; ++i)
    size = d::fill_from_plain(plain + static_cast<std::size_t>(voters[i]) * k, k, in_active, size);
}

}  // namespace detail
}  // namespace host
}  // namespace lynx
