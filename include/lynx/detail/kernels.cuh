#pragma once
// The kernels behind the device launchers. Each row-level step calls the same function as the
// host path (detail/row_math.hpp); only the batch-wide steps (histogram, rank, active-set
// flags, the never-worse decision) are written here. No atomics whose order matters: flags
// are plain byte stores of the value 1, histogram counts are integer adds.

#include <cub/block/block_histogram.cuh>
#include <cub/block/block_reduce.cuh>

#include <type_traits>

#include "../params.hpp"
#include "histogram_rank.hpp"
#include "row_math.hpp"

namespace lynx {
namespace detail {

inline constexpr int row_block_threads = 128;  // thread-per-row kernels
inline constexpr int warp_block_threads = 256;  // warp-per-row kernels

__device__ __forceinline__ int resolve_valid(token_count valid, int num_rows) {
  const int b = valid.device_ptr ? *valid.device_ptr : valid.value;
  return b < 0 ? 0 : (b > num_rows ? num_rows : b);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// SPEC §3.1, a warp per row: coalesced loads, an exact max, the shared per-element bin.
template <class T>
__global__ void affinity_bin_kernel(const T* logits, std::int64_t row_stride, int num_rows,
                                    token_count valid, int n, float alpha, int depth,
                                    std::int8_t* bins) {
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
  const int b = resolve_valid(valid, num_rows);
  for (int t = blockIdx.x * warps + threadIdx.x / 32; t < num_rows; t += gridDim.x * warps) {
    const T* row = logits + t * row_stride;
    float m = -INFINITY;
    if (t < b) {
      for (int e = lane; e < n; e += 32) m = fmaxf(m, load_logit(row, e));
      m = warp_max(m);
    }
    std::int8_t* out = bins + static_cast<std::int64_t>(t) * n;
    for (int e = lane; e < n; e += 32)
      out[e] = m == -INFINITY
                   ? no_vote
                   : static_cast<std::int8_t>(affinity_bin_of(load_logit(row, e), m, alpha, depth));
  }
}

/// SPEC §3.2, a block per expert: cub::BlockHistogram over the expert's column of bins.
/// Non-voting entries go to an extra bin that is never written out.
template <int BlockThreads, int Items>
__global__ void __launch_bounds__(BlockThreads)
    histogram_kernel(const std::int8_t* bins, int num_rows, int n, int nbins,
                     std::int32_t* counts) {
  using histogram_t = cub::BlockHistogram<std::uint8_t, BlockThreads, Items, max_bins + 1, cub::BLOCK_HISTO_ATOMIC>;
  __shared__ typename histogram_t::TempStorage temp;
  __shared__ unsigned int h[max_bins + 1];
  for (int e = blockIdx.x; e < n; e += gridDim.x) {
    histogram_t histogram(temp);
    histogram.InitHistogram(h);
    __syncthreads();
    for (int base = 0; base < num_rows; base += BlockThreads * Items) {
      std::uint8_t items[Items];
      for (int i = 0; i < Items; ++i) {
        const int t = base + threadIdx.x * Items + i;
        const int j = t < num_rows ? bin_digit(bins[static_cast<std::int64_t>(t) * n + e]) : -1;
        items[i] = static_cast<std::uint8_t>(j < 0 ? max_bins : j);
      }
      histogram.Composite(items, h);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < nbins; j += BlockThreads)
      counts[j * n + e] = static_cast<std::int32_t>(h[j]);
    __syncthreads();
  }
}

/// Exact competition rank of every expert (see histogram_rank.hpp): one block, all pairs.
__global__ void rank_kernel(const std::int32_t* counts, int n, int nbins, std::int32_t* ranks) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) ranks[e] = histogram_rank(counts, n, nbins, e);
}

/// SPEC §3.3 steps 1-2, a thread per row: the row's top-k by z joins the active set; its plain
/// top-k joins the plain set (for the never-worse guard) and gives the original mass.
template <class T, int MaxN>
__global__ void __launch_bounds__(row_block_threads)
    select_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid,
                  const std::int8_t* bins, const std::int32_t* ranks, int n, int k, scoring s,
                  bool renormalize, std::uint8_t* votes, std::uint8_t* in_active,
                  std::uint8_t* in_plain, float* row_mass) {
  __shared__ std::int32_t rank_s[MaxN];
  for (int e = threadIdx.x; e < n; e += blockDim.x) rank_s[e] = ranks[e];
  __syncthreads();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_rows) return;
  const std::int8_t* q = bins + static_cast<std::int64_t>(t) * n;
  const bool voting = t < resolve_valid(valid, num_rows) && q[0] != no_vote;
  votes[t] = voting ? 1 : 0;
  if (!voting) return;
  const T* row = logits + t * row_stride;
  std::uint64_t best[max_top_k];
  topk_clear(best, k);
  for (int e = 0; e < n; ++e) topk_push(best, k, z_key(q[e], rank_s[e], load_logit(row, e), e));
  for (int i = 0; i < k; ++i) in_active[key_expert(best[i])] = 1;
  plain_topk(row, n, k, best);
  for (int i = 0; i < k; ++i) in_plain[key_expert(best[i])] = 1;
  row_mass[t] = original_mass(row, n, row_max(row, n), best, k, s, renormalize);
}

/// SPEC §3.3 steps 3-4: each voting row's top-k by logit inside the active set, and weights.
template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(row_block_threads)
    final_kernel(const T* logits, std::int64_t row_stride, int num_rows, int n, int k, scoring s,
                 bool renormalize, const std::uint8_t* votes, const std::uint8_t* in_active,
                 const float* row_mass, std::uint8_t* in_final, IdT* ids, float* weights) {
  __shared__ std::uint8_t active_s[MaxN];
  for (int e = threadIdx.x; e < n; e += blockDim.x) active_s[e] = in_active[e];
  __syncthreads();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_rows || !votes[t]) return;
  const T* row = logits + t * row_stride;
  std::uint64_t best[max_top_k];
  topk_clear(best, k);
  for (int e = 0; e < n; ++e)
    if (active_s[e]) topk_push(best, k, logit_key(load_logit(row, e), e));
  for (int i = 0; i < k; ++i) in_final[key_expert(best[i])] = 1;
  emit_row(row, row_max(row, n), best, k, s, renormalize, row_mass[t],
           ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
}

/// SPEC §4 for topk_route: each voting row's plain top-k and weights.
template <class T, class IdT>
__global__ void __launch_bounds__(row_block_threads)
    plain_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid, int n,
                 int k, scoring s, bool renormalize, std::uint8_t* votes, std::uint8_t* in_plain,
                 IdT* ids, float* weights) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_rows) return;
  const T* row = logits + t * row_stride;
  const float m = t < resolve_valid(valid, num_rows) ? row_max(row, n) : -INFINITY;
  votes[t] = m == -INFINITY ? 0 : 1;
  if (m == -INFINITY) return;
  std::uint64_t best[max_top_k];
  plain_topk(row, n, k, best);
  for (int i = 0; i < k; ++i) in_plain[key_expert(best[i])] = 1;
  emit_row(row, m, best, k, s, renormalize, original_mass(row, n, m, best, k, s, renormalize),
           ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
}

/// SPEC §3.3 step 5 and §5. Every block re-derives the batch decision from the flags (N
/// bytes, cheaper than another launch): if the final choices touch more experts than plain
/// top-k, voting rows take their plain top-k. Non-voting rows get the pad ids of the set the
/// batch loads. topk_route passes in_final == in_plain, so it only pads.
template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(row_block_threads)
    finish_kernel(const T* logits, std::int64_t row_stride, int num_rows, int n, int k, scoring s,
                  bool renormalize, bool pad_with_sentinel, int sentinel_id,
                  const std::uint8_t* votes, const std::uint8_t* in_plain,
                  const std::uint8_t* in_final, const float* row_mass, IdT* ids, float* weights) {
  using reduce_t = cub::BlockReduce<int, row_block_threads>;
  __shared__ typename reduce_t::TempStorage temp;
  __shared__ std::uint8_t loaded_s[MaxN];
  __shared__ int pad_s[max_top_k];
  __shared__ bool fallback_s;
  int local = 0;  // plain count in the low 16 bits, final count in the high ones (n <= 1024)
  for (int e = threadIdx.x; e < n; e += blockDim.x) local += in_plain[e] + (in_final[e] << 16);
  const int total = reduce_t(temp).Sum(local);
  if (threadIdx.x == 0) fallback_s = (total >> 16) > (total & 0xFFFF);
  __syncthreads();
  const bool fallback = fallback_s;
  for (int e = threadIdx.x; e < n; e += blockDim.x)
    loaded_s[e] = fallback ? in_plain[e] : in_final[e];
  __syncthreads();
  if (threadIdx.x == 0) pad_ids(loaded_s, n, k, pad_s);
  __syncthreads();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_rows) return;
  IdT* row_ids = ids + static_cast<std::int64_t>(t) * k;
  float* row_weights = weights + static_cast<std::int64_t>(t) * k;
  if (!votes[t]) {
    emit_pad_row(pad_s, k, pad_with_sentinel, sentinel_id, row_ids, row_weights);
  } else if (fallback) {
    const T* row = logits + t * row_stride;
    std::uint64_t best[max_top_k];
    plain_topk(row, n, k, best);
    emit_row(row, row_max(row, n), best, k, s, renormalize, row_mass[t], row_ids, row_weights);
  }
}

/// Runtime N -> compile-time bound for the shared-memory tables (one dispatch point).
template <class F>
cudaError_t dispatch_experts(int n, F&& f) {
  if (n <= 128) return f(std::integral_constant<int, 128>{});
  if (n <= 512) return f(std::integral_constant<int, 512>{});
  return f(std::integral_constant<int, max_experts>{});
}

inline int row_blocks(int num_rows) { return (num_rows + row_block_threads - 1) / row_block_threads; }

inline cudaError_t to_cuda_error(status s) {
  return s == status::success ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace detail
}  // namespace lynx
