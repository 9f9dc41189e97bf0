#pragma once
// The batch-wide expert histogram (SPEC §3.2) and its exact order.
//
// counts[j * n + e] = #{voting t : q[t,e] = -j}. H[e] = sum_j counts[j][e] * B^-j is a base-B
// number whose digits are below B, so comparing two H values is comparing their digit vectors
// lexicographically from bin 0 down: exact, whatever B is.
//
// Why a rank is enough for remap_topk: a token compares z only between experts of its own bin
// q (z's integer part decides otherwise), and its support for both is the histogram minus the
// same one-hot digit at q. So, inside a bin, z-order is the order of the full histograms, and
// one integer per expert, rank[e] = #{o : H[o] > H[e]}, carries it.

#include <cstdint>

#include "config.hpp"
#include "row_math.hpp"

namespace lynx {
namespace detail {

/// Lexicographic H[a] > H[b] over bins 0 .. nbins-1.
template <class Count>
LYNX_HD bool histogram_greater(const Count* counts, int n, int nbins, int a, int b) {
  for (int j = 0; j < nbins; ++j) {
    const Count ca = counts[j * n + a], cb = counts[j * n + b];
    if (ca != cb) return ca > cb;
  }
  return false;
}

/// Competition rank of expert e: how many experts have a strictly greater histogram.
template <class Count>
LYNX_HD int histogram_rank(const Count* counts, int n, int nbins, int e) {
  int r = 0;
  for (int o = 0; o < n; ++o) r += histogram_greater(counts, n, nbins, o, e) ? 1 : 0;
  return r;
}

/// Bits of one histogram digit: every count is at most num_rows.
LYNX_HD int histogram_digit_bits(int num_rows) {
  int bits = 1;
  while (bits < 31 && (1 << bits) <= num_rows) ++bits;
  return bits;
}

/// Whether nbins digits of histogram_digit_bits(num_rows) pack into an order code
/// (order_code_bits, row_math.hpp): then the packed histogram is its own code, no rank needed.
LYNX_HD bool histograms_are_codes(int nbins, int num_rows) {
  return histogram_digit_bits(num_rows) * nbins <= order_code_bits;
}

/// Whether the histograms pack into order codes once their last digit is left out (more rows
/// than histograms_are_codes allows: the default lynx parameters' 3 bins up to 1023 rows). That
/// is exact where every histogram sums to one total, as the library's do (SPEC §3.1 gives every
/// expert of a voting row a bin): the last digit is the total minus the others, so histograms
/// with equal leading digits are equal. block_order_codes checks the totals.
LYNX_HD bool leading_digits_are_codes(int nbins, int num_rows) {
  return nbins > 1 && histograms_are_codes(nbins - 1, num_rows);
}

/// Histogram digit j (bin -j) of a bin value, or -1 for a non-voting or malformed entry.
LYNX_HD int bin_digit(std::int8_t q) {
  return (q > 0 || q < -max_bin_depth) ? -1 : -static_cast<int>(q);
}

}  // namespace detail
}  // namespace lynx
