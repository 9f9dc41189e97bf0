#pragma once
// lynx::block_score_experts: SPEC §3.2 for a batch whose rows a thread block holds, a warp per
// row: the batch-wide expert histogram in shared memory and every expert's exact rank.
//
// counts(j, e) = #{voting rows t : q[t, e] = -j}. H[e] = sum_j counts(j, e) * B^-j is a base-B
// number whose digits are below B, so comparing two H is comparing their digit vectors from bin 0
// down: exact, whatever B is. A token compares z only between experts of its own bin, where its
// support for both is the histogram minus the same one-hot digit, so inside a bin z-order is the
// order of the full histograms: one integer per expert, rank[e] = #{o : H[o] > H[e]}, carries it
// (detail/histogram_rank.hpp). So does any order code (block_order_codes): the decode kernels
// take H itself where it packs into 21 bits, or H without its last digit where every H has the
// same digit sum, which needs no O(N^2) comparisons.
//
// Like CUB's block primitives, the caller owns the shared memory: a TempStorage, which it may
// union with its own once the ranks (or order codes) are out.

#include <cuda_runtime.h>

#include <cstdint>

#include "../detail/config.hpp"
#include "../detail/device/warp_ops.cuh"
#include "../detail/histogram_rank.hpp"

namespace lynx {

namespace detail {

/// Histogram e's first `digits` digits in one integer, `bits` bits each, bin 0's highest; with
/// `sum`, the digits are also added to *sum (each count read once).
template <class Word, class CountFn>
__device__ __forceinline__ Word pack_digits(CountFn count, int e, int digits, int bits, int* sum = nullptr) {
  Word v = 0;
  for (int j = 0; j < digits; ++j) {
    const int c = count(j, e);
    v = (v << bits) | static_cast<Word>(c);
    if (sum) *sum += c;
  }
  return v;
}

/// block_rank_histograms' comparisons: out(e, rank) for each e < n, from one thread of the
/// block, then a synchronization.
template <int BlockThreads, class CountFn, class Out>
__device__ void block_rank_into(CountFn count, int n, int nbins, int num_rows, std::uint64_t* sort_key, Out out) {
  const int bits = histogram_digit_bits(num_rows);
  const bool packed = bits * nbins <= 64;
  if (packed)
    for (int e = threadIdx.x; e < n; e += BlockThreads) sort_key[e] = pack_digits<std::uint64_t>(count, e, nbins, bits);
  __syncthreads();
  // g threads per expert (a power of two within a warp): thread s of a group compares against
  // o = s, s + g, ..., and the group sums its counts with shuffles.
  int g = 1;
  while (g < 32 && 2 * g * n <= BlockThreads) g *= 2;
  const int s = static_cast<int>(threadIdx.x) % g;
  for (int base = 0; base < n; base += BlockThreads / g) {
    const int e = base + static_cast<int>(threadIdx.x) / g;
    int r = 0;
    if (e < n) {
      if (packed) {
        const std::uint64_t mine = sort_key[e];
        for (int o = s; o < n; o += g) r += sort_key[o] > mine ? 1 : 0;
      } else {
        for (int o = s; o < n; o += g) {
          int c = 0;
          for (int j = 0; j < nbins && c == 0; ++j) c = count(j, o) - count(j, e);
          r += c > 0 ? 1 : 0;
        }
      }
    }
    for (int w = g / 2; w > 0; w >>= 1) r += __shfl_xor_sync(full_mask, r, w);
    if (e < n && s == 0) out(e, r);
  }
  __syncthreads();
}

}  // namespace detail

/// Exact competition ranks of n histograms: rank[e] = #{o < n : H[o] > H[e]}, for counts given by
/// count(j, e) (j < nbins; each at most num_rows) anywhere in memory. Block-collective; sort_key
/// is shared memory for n keys. When every histogram packs into one 64-bit integer (digits of
/// bit_width(num_rows) bits), ranks compare those; otherwise digit by digit. Several threads
/// share each expert's comparisons when the block has more threads than experts.
template <int BlockThreads, class CountFn, class Rank>
__device__ void block_rank_histograms(CountFn count, int n, int nbins, int num_rows, std::uint64_t* sort_key,
                                      Rank* rank) {
  detail::block_rank_into<BlockThreads>(count, n, nbins, num_rows, sort_key,
                                        [rank](int e, int r) { rank[e] = static_cast<Rank>(r); });
}

/// An order code for each of n histograms (counts as in block_rank_histograms): code[e] below
/// 2^detail::order_code_bits, larger for a greater H, equal for an equal one, which is all that
/// a z top-k inside one bin needs (warp_z_topk_set). Where the digits pack into those bits
/// (detail::histograms_are_codes: the 3 bins of the default lynx parameters, beta 2, up to
/// 127 rows) the code is H itself, with no comparison. Where all but the last digit pack
/// (detail::leading_digits_are_codes: those 3 bins up to 1023 rows) and every histogram sums to
/// expert 0's total (checked: one block-wide vote), the code is H without its last digit, which
/// the others then decide. Otherwise it is detail::order_code_of_rank of the exact rank (N^2 /
/// BlockThreads compares a thread). Block-collective; sort_key as for block_rank_histograms.
template <int BlockThreads, class CountFn>
__device__ void block_order_codes(CountFn count, int n, int nbins, int num_rows, std::uint64_t* sort_key,
                                  std::uint32_t* code) {
  const int bits = detail::histogram_digit_bits(num_rows);
  if (detail::histograms_are_codes(nbins, num_rows)) {
    for (int e = threadIdx.x; e < n; e += BlockThreads) code[e] = detail::pack_digits<std::uint32_t>(count, e, nbins, bits);
    __syncthreads();
    return;
  }
  if (detail::leading_digits_are_codes(nbins, num_rows)) {
    int total0 = 0;  // expert 0's, the same read in every thread
    for (int j = 0; j < nbins; ++j) total0 += count(j, 0);
    bool same = true;
    for (int e = threadIdx.x; e < n; e += BlockThreads) {
      int total = count(nbins - 1, e);  // the leading digits add theirs as they are packed
      code[e] = detail::pack_digits<std::uint32_t>(count, e, nbins - 1, bits, &total);
      same = same && total == total0;
    }
    if (__syncthreads_and(same)) return;  // else the ranks overwrite the codes
  }
  detail::block_rank_into<BlockThreads>(count, n, nbins, num_rows, sort_key,
                                        [code](int e, int r) { code[e] = detail::order_code_of_rank(r); });
}

/// The batch-wide histogram of a block's rows, and the ranks or order codes. MaxN bounds N;
/// counts fit 16 bits (num_rows < 65536), two to a word, added with shared-memory atomics.
template <int MaxN, int BlockThreads>
class block_score_experts {
 public:
  struct TempStorage {
    std::uint32_t counts[max_bins * MaxN / 2];  // counter (j, e) is half (j * MaxN + e) of the words
    std::uint64_t sort_key[MaxN];
  };

  __device__ __forceinline__ block_score_experts(TempStorage& temp, int n, int nbins)
      : temp_(temp), n_(n), nbins_(nbins) {}

  /// Block-collective: zeroes the counts. Synchronize before add_row.
  __device__ __forceinline__ void init() {
    for (int i = threadIdx.x; i < nbins_ * MaxN / 2; i += BlockThreads) temp_.counts[i] = 0;
  }

  /// Warp-collective: adds one row's bins (warp_affinity_bin's q; lynx::no_vote counts nowhere).
  __device__ __forceinline__ void add_row(const std::int8_t (&q)[MaxN / 32]) {
#pragma unroll
    for (int i = 0; i < MaxN / 32; ++i) {
      const int e = detail::lane_id() + 32 * i, j = detail::bin_digit(q[i]);
      if (e < n_ && j >= 0 && j < nbins_)
        atomicAdd(temp_.counts + (j * MaxN + e) / 2, (e & 1) ? 0x10000u : 1u);
    }
  }

  /// Block-collective, after the adds and a synchronization: adds this block's counts into
  /// global counts[j * n + e] (zeroed by the caller), for a batch whose rows several blocks
  /// hold. Integer atomics: the sums do not depend on the order of the blocks.
  __device__ __forceinline__ void flush(std::int32_t* counts) const {
    for (int i = threadIdx.x; i < nbins_ * n_; i += BlockThreads) {
      const int c = count(i / n_, i % n_);
      if (c) atomicAdd(counts + i, c);
    }
  }

  /// Block-collective: this block's counts become the global ones that every block has
  /// flushed (read past L1: other blocks wrote them). Synchronize before ranks.
  __device__ __forceinline__ void load(const std::int32_t* counts) {
    for (int i = threadIdx.x; i < nbins_ * MaxN / 2; i += BlockThreads) {
      const int j = 2 * i / MaxN, e = 2 * i % MaxN;
      const std::uint32_t lo = e < n_ ? static_cast<std::uint32_t>(__ldcg(counts + j * n_ + e)) : 0u;
      const std::uint32_t hi = e + 1 < n_ ? static_cast<std::uint32_t>(__ldcg(counts + j * n_ + e + 1)) : 0u;
      temp_.counts[i] = lo | hi << 16;
    }
  }

  /// counts(j, e), after the adds and a synchronization.
  __device__ __forceinline__ int count(int j, int e) const {
    const std::uint32_t w = temp_.counts[(j * MaxN + e) / 2];
    return static_cast<int>((e & 1) ? w >> 16 : w & 0xFFFFu);
  }

  /// Block-collective, after the adds and a synchronization: code[e] for e < n
  /// (block_order_codes; shared or global memory). num_rows bounds every count.
  __device__ __forceinline__ void order_codes(int num_rows, std::uint32_t* code) {
    const block_score_experts& self = *this;
    block_order_codes<BlockThreads>([&](int j, int e) { return self.count(j, e); }, n_, nbins_, num_rows,
                                    temp_.sort_key, code);
  }

  /// Block-collective, after the adds and a synchronization: rank[e] for e < n (shared or
  /// global memory). num_rows bounds every count.
  template <class Rank>
  __device__ __forceinline__ void ranks(int num_rows, Rank* rank) {
    const block_score_experts& self = *this;
    block_rank_histograms<BlockThreads>([&](int j, int e) { return self.count(j, e); }, n_, nbins_, num_rows,
                                        temp_.sort_key, rank);
  }

 private:
  TempStorage& temp_;
  int n_, nbins_;
};

}  // namespace lynx
