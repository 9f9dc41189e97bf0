#pragma once
// The host path's row loads and the batch-wide counting: each row loaded once into sanitized
// floats (a branch-free loop that compilers vectorize), its bins, its softmax total in the
// warp's canonical order, and the histogram and exact ranks of score_experts.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "../histogram_rank.hpp"
#include "../row_math.hpp"
#include "simd.hpp"

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

}  // namespace detail
}  // namespace host
}  // namespace lynx
