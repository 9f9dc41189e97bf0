#pragma once
// The kernels behind the device launchers. Each row-level step calls the same function as the
// host path (detail/row_math.hpp); only the batch-wide steps (histogram, rank, active-set
// flags, the never-worse decision) are written here. No atomics whose order matters: flags
// are plain byte stores of the value 1, histogram counts are integer adds.

#include <cub/block/block_histogram.cuh>
#include <cub/block/block_reduce.cuh>

#include <type_traits>

#include "../params.hpp"
#include "budget.hpp"
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

struct max_op {
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a > b ? a : b;
  }
};

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

/// SPEC §3.3 steps 1-2, a thread per row: the row's contribution to the active set (its top-k
/// by z, its top-keep_k, or for a pinned row its plain top-k; its argmax with the anchor), its
/// plain top-k for the never-worse guard, and its original mass.
template <class T, int MaxN>
__global__ void __launch_bounds__(row_block_threads)
    select_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid,
                  const std::int8_t* bins, const std::int32_t* ranks, route_params p,
                  std::uint8_t* votes, std::uint8_t* in_active, std::uint8_t* in_plain,
                  std::uint8_t* anchors, float* row_mass) {
  __shared__ std::int32_t rank_s[MaxN];
  const int n = p.num_experts, k = p.top_k;
  if (p.kind == policy::lynx)
    for (int e = threadIdx.x; e < n; e += blockDim.x) rank_s[e] = ranks[e];
  __syncthreads();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_rows) return;
  const T* row = logits + t * row_stride;
  const float m = t < resolve_valid(valid, num_rows) ? row_max(row, n) : -INFINITY;
  votes[t] = m == -INFINITY ? 0 : 1;
  if (m == -INFINITY) return;
  std::uint64_t plain[max_top_k], best[max_top_k];
  plain_topk(row, n, k, plain);
  for (int i = 0; i < k; ++i) in_plain[key_expert(plain[i])] = 1;
  row_mass[t] = original_mass(row, n, m, plain, k, p.score, p.renormalize);
  if (p.pinned && p.pinned[t]) {
    for (int i = 0; i < k; ++i) in_active[key_expert(plain[i])] = 1;
    return;
  }
  if (p.anchor_top1 || p.kind == policy::budget) anchors[key_expert(plain[0])] = 1;
  if (p.kind == policy::lynx) {
    const std::int8_t* q = bins + static_cast<std::int64_t>(t) * n;
    topk_clear(best, k);
    for (int e = 0; e < n; ++e) topk_push(best, k, z_key(q[e], rank_s[e], load_logit(row, e), e));
    for (int i = 0; i < k; ++i) in_active[key_expert(best[i])] = 1;
  } else if (p.kind == policy::piggyback) {
    for (int i = 0; i < p.keep_k; ++i) in_active[key_expert(plain[i])] = 1;
  }
}

/// The budget policy's greedy (detail/budget.hpp) in one block: the same steps as the host
/// path. Gains are summed over tokens in order by one thread per expert, so they are bitwise
/// the host's; a block max picks the step's expert.
template <class T>
__global__ void __launch_bounds__(1024)
    budget_kernel(const T* logits, std::int64_t row_stride, int num_rows, route_params p,
                  const std::uint8_t* votes, const std::uint8_t* anchors,
                  const std::uint8_t* in_plain, std::uint8_t* in_active, float* share, float* top) {
  using reduce_t = cub::BlockReduce<std::uint64_t, 1024>;
  __shared__ typename reduce_t::TempStorage temp;
  __shared__ std::uint64_t best_s;
  __shared__ float best_gain_s;
  __shared__ int voters_s, plain_unique_s;
  const int n = p.num_experts, k = p.top_k;
  if (threadIdx.x == 0) {
    voters_s = 0;
    plain_unique_s = 0;
    for (int t = 0; t < num_rows; ++t) voters_s += votes[t];
    for (int e = 0; e < n; ++e) plain_unique_s += in_plain[e];
  }
  for (int t = threadIdx.x; t < num_rows; t += blockDim.x) {
    if (!votes[t]) continue;
    const T* row = logits + t * row_stride;
    const float m = row_max(row, n);
    std::uint64_t plain[max_top_k];
    plain_topk(row, n, k, plain);
    const float sum = plain_activation_sum(row, m, plain, k, p.score);
    for (int e = 0; e < n; ++e)
      share[static_cast<std::size_t>(t) * n + e] = activation(load_logit(row, e), m, p.score) / sum;
    for (int i = 0; i < k; ++i) top[static_cast<std::size_t>(t) * k + i] = 0.0f;
  }
  __syncthreads();
  const auto gain_of = [&](int e) {
    float g = 0.0f;
    for (int t = 0; t < num_rows; ++t)
      if (votes[t])
        g += share_gain(share[static_cast<std::size_t>(t) * n + e], top[static_cast<std::size_t>(t) * k + k - 1]);
    return g;
  };
  const auto add = [&](int e) {  // all threads; best_gain_s already holds e's gain
    for (int t = threadIdx.x; t < num_rows; t += blockDim.x)
      if (votes[t]) share_insert(&top[static_cast<std::size_t>(t) * k], k, share[static_cast<std::size_t>(t) * n + e]);
    __syncthreads();
  };
  int size = 0;
  float total = 0.0f;  // meaningful in thread 0
  for (int e = 0; e < n; ++e) {  // pinned experts, in id order, as the host adds them
    if (!in_active[e]) continue;
    if (threadIdx.x == 0) total += gain_of(e);
    ++size;
    __syncthreads();
    add(e);
  }
  const int limit = budget_limit(p.budget_experts, p.budget_fraction, plain_unique_s, n, k);
  const float target = p.budget_mass * static_cast<float>(voters_s);
  for (int phase = 0; phase < 2; ++phase)
    for (;;) {
      std::uint64_t key = 0;
      float g = 0.0f;
      const int e = threadIdx.x;
      if (e < n && !in_active[e] && (phase == 1 || anchors[e])) {
        g = gain_of(e);
        key = gain_key(g, e);
      }
      const std::uint64_t best = reduce_t(temp).Reduce(key, max_op{});
      if (threadIdx.x == 0) {
        best_s = best;
        const bool mass_reached = phase == 1 && p.budget_mass > 0.0f && !(total < target);
        if (size >= limit || mass_reached || best == 0) best_s = 0;
      }
      __syncthreads();
      if (best_s != 0 && key == best_s) best_gain_s = g;
      __syncthreads();
      const std::uint64_t chosen = best_s;
      if (chosen == 0 || (phase == 1 && !(best_gain_s > 0.0f))) break;
      const int c = key_expert(chosen);
      if (threadIdx.x == 0) {
        in_active[c] = 1;
        total += best_gain_s;
      }
      ++size;
      add(c);
    }
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
  final_topk(row, n, k, active_s, best);
  for (int i = 0; i < k; ++i) in_final[key_expert(best[i])] = 1;
  emit_row(row, row_max(row, n), best, k, s, renormalize, row_mass[t],
           ids + static_cast<std::int64_t>(t) * k, weights + static_cast<std::int64_t>(t) * k);
}

/// The top-1 anchor for the lynx and piggyback policies: every voting row's argmax joins K.
__global__ void merge_flags_kernel(const std::uint8_t* from, int n, std::uint8_t* into) {
  for (int e = threadIdx.x; e < n; e += blockDim.x)
    if (from[e]) into[e] = 1;
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
