#pragma once
// The kernels behind the device launchers.
//
// Rows are processed a warp each (as vLLM's and TensorRT-LLM's routing kernels do): lane j
// holds the packed keys of experts j, j+32, ... in registers (MaxN/32 of them, MaxN being the
// compile-time tier), and a top-k is k rounds of a 64-bit warp max. Keys are unique, so the
// selection is exactly the host path's; per-element math comes from row_math.hpp, and the one
// long float sum uses the canonical butterfly order the host emulates. So ids and weights are
// bitwise the host path's.
//
// Two paths share these row functions: one kernel per stage (any size; the stage launchers),
// and, for decode sizes, one fused single-block kernel that runs the whole step. Active-set
// flags are uint32 set with atomicOr: the result does not depend on the order.

#include <cub/block/block_histogram.cuh>
#include <cub/block/block_reduce.cuh>

#include <type_traits>

#include "../params.hpp"
#include "budget.hpp"
#include "dispatch.hpp"
#include "histogram_rank.hpp"
#include "row_math.hpp"

namespace lynx {
namespace detail {

inline constexpr unsigned full_mask = 0xffffffffu;

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
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(full_mask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ std::uint64_t warp_max(std::uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const std::uint64_t w = __shfl_xor_sync(full_mask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// The butterfly of row_exp_sum: lane j's partial plus lane j^o's, own first.
__device__ __forceinline__ float warp_butterfly_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(full_mask, v, o);
  return v;
}

__device__ __forceinline__ void set_flag(std::uint32_t* flags, int e) { atomicOr(flags + e, 1u); }

/// Where a batch's per-expert flags and per-row results live (global or shared memory).
struct batch_state {
  std::uint32_t* in_active;
  std::uint32_t* in_plain;
  std::uint32_t* in_final;
  std::uint32_t* anchors;
  std::uint8_t* votes;
  float* row_mass;
};

/// Lane `lane`'s keys of a row (expert lane + 32 i; 0 past n) and the row max (warp-wide).
template <int MaxN, class T>
__device__ __forceinline__ float warp_row_keys(const T* row, int n, int lane,
                                               std::uint64_t (&keys)[MaxN / 32]) {
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < MaxN / 32; ++i) {
    const int e = lane + 32 * i;
    keys[i] = 0;
    if (e < n) {
      const float x = load_logit(row, e);
      keys[i] = logit_key(x, e);
      m = x > m ? x : m;
    }
  }
  return warp_max(m);
}

/// The k largest keys, descending, in every lane's `best`. Consumes `keys`.
template <int KPL>
__device__ __forceinline__ void warp_topk(std::uint64_t (&keys)[KPL], int k, std::uint64_t* best) {
  for (int r = 0; r < k; ++r) {
    std::uint64_t local = 0;
#pragma unroll
    for (int i = 0; i < KPL; ++i) local = keys[i] > local ? keys[i] : local;
    const std::uint64_t winner = warp_max(local);
    best[r] = winner;
#pragma unroll
    for (int i = 0; i < KPL; ++i)
      if (keys[i] == winner) keys[i] = 0;
  }
}

/// original_mass for a row, a warp: the canonical butterfly total (row_exp_sum's order) only
/// when "no renormalize" needs it. Every lane must call it; lane 0's result is the one to use.
template <class T>
__device__ __forceinline__ float warp_original_mass(const T* row, int n, float m, int lane,
                                                    const std::uint64_t* topk, const route_params& p) {
  if (p.renormalize) return 1.0f;
  const float total = p.score == scoring::softmax ? warp_butterfly_sum(lane_exp_sum(row, n, m, lane)) : 0.0f;
  return topk_mass(row, m, topk, p.top_k, p.score, total);
}

/// SPEC §3.1 for one row, a warp: the row max, then every expert's bin (lynx::no_vote when
/// the row does not vote).
template <class T>
__device__ __forceinline__ void bin_row(const T* row, int n, int lane, bool valid_row, float alpha,
                                        int depth, std::int8_t* out) {
  float m = -INFINITY;
  if (valid_row) {
    for (int e = lane; e < n; e += 32) {
      const float x = load_logit(row, e);
      m = x > m ? x : m;
    }
    m = warp_max(m);
  }
  for (int e = lane; e < n; e += 32)
    out[e] = m == -INFINITY ? no_vote
                            : static_cast<std::int8_t>(affinity_bin_of(load_logit(row, e), m, alpha, depth));
}

/// SPEC §3.3 steps 1-2 for one row, a warp: the row's contribution to the active set (its top-k
/// by z, its top-keep_k, or for a pinned row its plain top-k; its argmax with the anchor), its
/// plain top-k for the never-worse guard, and its original mass.
template <int MaxN, class T, class Rank>
__device__ void select_row(const T* row, int t, int lane, bool valid_row, const std::int8_t* q,
                           const Rank* rank, const route_params& p, const batch_state& st) {
  constexpr int KPL = MaxN / 32;
  const int n = p.num_experts, k = p.top_k;
  std::uint64_t keys[KPL], work[KPL], plain[max_top_k];
  const float m = valid_row ? warp_row_keys<MaxN>(row, n, lane, keys) : -INFINITY;
  if (lane == 0) st.votes[t] = m == -INFINITY ? 0 : 1;
  if (m == -INFINITY) return;
#pragma unroll
  for (int i = 0; i < KPL; ++i) work[i] = keys[i];
  warp_topk(work, k, plain);
  if (lane < k) set_flag(st.in_plain, key_expert(plain[lane]));
  const float mass = warp_original_mass(row, n, m, lane, plain, p);
  if (lane == 0) st.row_mass[t] = mass;
  if (p.pinned && p.pinned[t]) {
    if (lane < k) set_flag(st.in_active, key_expert(plain[lane]));
    return;
  }
  if (lane == 0 && (p.anchor_top1 || p.kind == policy::budget)) set_flag(st.anchors, key_expert(plain[0]));
  if (p.kind == policy::lynx) {
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int e = lane + 32 * i;
      work[i] = keys[i] ? (z_key_high(q[e], rank[e]) | keys[i]) : 0;
    }
    std::uint64_t best[max_top_k];
    warp_topk(work, k, best);
    if (lane < k) set_flag(st.in_active, key_expert(best[lane]));
  } else if (p.kind == policy::piggyback) {
    if (lane < p.keep_k) set_flag(st.in_active, key_expert(plain[lane]));
  }
}

/// SPEC §3.3 steps 3-4 for one voting row, a warp: its top-k by logit inside the active set
/// (filled from outside only if K is short), and its weights.
template <int MaxN, class T, class IdT>
__device__ void final_row(const T* row, int t, int lane, const route_params& p, const batch_state& st,
                          IdT* ids, float* weights) {
  constexpr int KPL = MaxN / 32;
  const int n = p.num_experts, k = p.top_k;
  std::uint64_t keys[KPL], best[max_top_k];
  const float m = warp_row_keys<MaxN>(row, n, lane, keys);
#pragma unroll
  for (int i = 0; i < KPL; ++i) {
    const int e = lane + 32 * i;
    if (keys[i]) keys[i] |= active_bit(st.in_active[e] != 0);
  }
  warp_topk(keys, k, best);
  if (lane < k) set_flag(st.in_final, key_expert(best[lane]));
  if (lane == 0)
    emit_row(row, best, k, p.score, p.renormalize, st.row_mass[t], ids + static_cast<std::int64_t>(t) * k,
             weights + static_cast<std::int64_t>(t) * k);
}

/// SPEC §4 for one row, a warp (topk_route): plain top-k and weights.
template <int MaxN, class T, class IdT>
__device__ void plain_row(const T* row, int t, int lane, bool valid_row, const route_params& p,
                          const batch_state& st, IdT* ids, float* weights) {
  constexpr int KPL = MaxN / 32;
  const int n = p.num_experts, k = p.top_k;
  std::uint64_t keys[KPL], best[max_top_k];
  const float m = valid_row ? warp_row_keys<MaxN>(row, n, lane, keys) : -INFINITY;
  if (lane == 0) st.votes[t] = m == -INFINITY ? 0 : 1;
  if (m == -INFINITY) return;
  warp_topk(keys, k, best);
  if (lane < k) set_flag(st.in_plain, key_expert(best[lane]));
  const float mass = warp_original_mass(row, n, m, lane, best, p);
  if (lane == 0)
    emit_row(row, best, k, p.score, p.renormalize, mass, ids + static_cast<std::int64_t>(t) * k,
             weights + static_cast<std::int64_t>(t) * k);
}

/// SPEC §3.3 step 5 and §5, the block-wide part: if the final choices touch more experts than
/// plain top-k, voting rows take their plain top-k; the pad ids come from the set the batch
/// loads. Every thread of the block must call it; results in the __shared__ outputs.
template <int BlockThreads>
__device__ void decide(const batch_state& st, const route_params& p, bool* fallback, int* pad) {
  using reduce_t = cub::BlockReduce<int, BlockThreads>;
  __shared__ typename reduce_t::TempStorage temp;
  const int n = p.num_experts;
  int local = 0;  // plain count in the low 16 bits, final count in the high ones (n <= 1024)
  for (int e = threadIdx.x; e < n; e += BlockThreads)
    local += (st.in_plain[e] != 0) + ((st.in_final[e] != 0) << 16);
  const int total = reduce_t(temp).Sum(local);
  if (threadIdx.x == 0) {
    *fallback = (total >> 16) > (total & 0xFFFF);
    pad_ids(*fallback ? st.in_plain : st.in_final, n, p.top_k, pad);
  }
  __syncthreads();
}

/// After decide(): a non-voting row gets the pad ids (or the sentinel), weight 0; a voting row
/// of a batch that falls back gets its plain top-k. A warp per row.
template <int MaxN, class T, class IdT>
__device__ void finish_row(const T* row, int t, int lane, const route_params& p, const batch_state& st,
                           bool fallback, const int* pad, IdT* ids, float* weights) {
  const int k = p.top_k;
  IdT* row_ids = ids + static_cast<std::int64_t>(t) * k;
  float* row_weights = weights + static_cast<std::int64_t>(t) * k;
  if (!st.votes[t]) {
    if (lane == 0) emit_pad_row(pad, k, p.pad_with_sentinel, p.sentinel_id, row_ids, row_weights);
  } else if (fallback) {
    std::uint64_t keys[MaxN / 32], best[max_top_k];
    const float m = warp_row_keys<MaxN>(row, p.num_experts, lane, keys);
    warp_topk(keys, k, best);
    if (lane == 0) emit_row(row, best, k, p.score, p.renormalize, st.row_mass[t], row_ids, row_weights);
  }
}

/// The budget policy's greedy (budget.hpp) by one block of at least N threads: the same steps
/// as the host path. Gains are summed over tokens in order by one thread per expert, so they
/// are bitwise the host's; a block max picks each step's expert. All threads must call it.
template <int BlockThreads, class T>
__device__ void budget_block(const T* logits, std::int64_t row_stride, int num_rows, const route_params& p,
                             const batch_state& st, float* share, float* top) {
  using reduce_t = cub::BlockReduce<std::uint64_t, BlockThreads>;
  __shared__ typename reduce_t::TempStorage temp;
  __shared__ std::uint64_t best_s;
  __shared__ float best_gain_s;
  __shared__ int voters_s, plain_unique_s;
  const int n = p.num_experts, k = p.top_k;
  if (threadIdx.x == 0) {
    voters_s = 0;
    plain_unique_s = 0;
    for (int t = 0; t < num_rows; ++t) voters_s += st.votes[t];
    for (int e = 0; e < n; ++e) plain_unique_s += st.in_plain[e] != 0;
  }
  // share[e * rows + t] (expert-major: a thread's gain loop reads one contiguous column).
  for (int t = threadIdx.x; t < num_rows; t += BlockThreads) {
    for (int i = 0; i < k; ++i) top[static_cast<std::size_t>(t) * k + i] = 0.0f;
    if (!st.votes[t]) continue;
    const T* row = logits + t * row_stride;
    const float m = row_max(row, n);
    std::uint64_t plain[max_top_k];
    plain_topk(row, n, k, plain);
    const float sum = plain_activation_sum(row, m, plain, k, p.score);
    for (int e = 0; e < n; ++e)
      share[static_cast<std::size_t>(e) * num_rows + t] = activation(load_logit(row, e), m, p.score) / sum;
  }
  __syncthreads();
  const auto gain_of = [&](int e) {
    float g = 0.0f;
    for (int t = 0; t < num_rows; ++t)
      if (st.votes[t])
        g += share_gain(share[static_cast<std::size_t>(e) * num_rows + t], top[static_cast<std::size_t>(t) * k + k - 1]);
    return g;
  };
  const auto add = [&](int e) {  // all threads
    for (int t = threadIdx.x; t < num_rows; t += BlockThreads)
      if (st.votes[t]) share_insert(&top[static_cast<std::size_t>(t) * k], k, share[static_cast<std::size_t>(e) * num_rows + t]);
    __syncthreads();
  };
  // K0: the pinned experts, plus the anchors when all of them fit in the limit (the greedy
  // would take every anchor first anyway), inserted at once; then the batch's mass token by
  // token, in the host's order.
  __shared__ int size_s, bulk_s;
  __shared__ float total_s;
  const int limit = budget_limit(p.budget_experts, p.budget_fraction, plain_unique_s, n, k);
  if (threadIdx.x == 0) {
    int size = 0, with_anchors = 0;
    for (int e = 0; e < n; ++e) {
      size += st.in_active[e] ? 1 : 0;
      with_anchors += (st.in_active[e] || st.anchors[e]) ? 1 : 0;
    }
    bulk_s = with_anchors <= limit;
    size_s = bulk_s ? with_anchors : size;
    if (bulk_s)
      for (int e = 0; e < n; ++e)
        if (st.anchors[e]) st.in_active[e] = 1;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < num_rows; t += BlockThreads)
    if (st.votes[t])
      for (int e = 0; e < n; ++e)
        if (st.in_active[e]) share_insert(&top[static_cast<std::size_t>(t) * k], k, share[static_cast<std::size_t>(e) * num_rows + t]);
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int t = 0; t < num_rows; ++t)
      if (st.votes[t])
        for (int j = 0; j < k; ++j) total += top[static_cast<std::size_t>(t) * k + j];
    total_s = total;
  }
  __syncthreads();
  int size = size_s;
  float total = total_s;  // meaningful in thread 0 from here on
  const bool bulk = bulk_s != 0;
  const float target = p.budget_mass * static_cast<float>(voters_s);
  for (int phase = bulk ? 1 : 0; phase < 2; ++phase)
    for (;;) {
      std::uint64_t key = 0;
      float g = 0.0f;
      const int e = threadIdx.x;
      if (e < n && !st.in_active[e] && (phase == 1 || st.anchors[e])) {
        g = gain_of(e);
        key = gain_key(g, e);
      }
      const std::uint64_t best = reduce_t(temp).Reduce(key, max_op{});
      if (threadIdx.x == 0) {
        // As the host's greedy: never stop below k experts (rows would fill from outside K).
        const bool mass_reached = phase == 1 && size >= k && p.budget_mass > 0.0f && !(total < target);
        best_s = (size >= limit || mass_reached) ? 0 : best;
      }
      __syncthreads();
      if (best_s != 0 && key == best_s) best_gain_s = g;
      __syncthreads();
      const std::uint64_t chosen = best_s;
      const float chosen_gain = best_gain_s;
      if (chosen == 0 || (phase == 1 && !(chosen_gain > 0.0f))) break;
      const int c = key_expert(chosen);
      if (threadIdx.x == 0) {
        st.in_active[c] = 1;
        total += chosen_gain;
      }
      ++size;
      add(c);
    }
  if (threadIdx.x == 0 && size < k)  // the gains vanished below k experts (underflow): rare
    for (int t = 0; t < num_rows && size < k; ++t)
      if (st.votes[t]) {
        std::uint64_t plain[max_top_k];
        plain_topk(logits + t * row_stride, n, k, plain);
        size = fill_from_plain(plain, k, st.in_active, size);
      }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------
// One kernel per stage (any size).

template <class T>
__global__ void __launch_bounds__(warp_block_threads)
    affinity_bin_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid,
                        int n, float alpha, int depth, std::int8_t* bins) {
  const int t = blockIdx.x * (warp_block_threads / 32) + threadIdx.x / 32;
  if (t >= num_rows) return;
  bin_row(logits + t * row_stride, n, threadIdx.x & 31, t < resolve_valid(valid, num_rows), alpha, depth,
          bins + static_cast<std::int64_t>(t) * n);
}

/// SPEC §3.2, a block per expert: cub::BlockHistogram over the expert's column of bins.
/// Non-voting entries go to an extra bin that is never written out.
template <int BlockThreads, int Items>
__global__ void __launch_bounds__(BlockThreads)
    histogram_kernel(const std::int8_t* bins, int num_rows, int n, int nbins, std::int32_t* counts) {
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
    for (int j = threadIdx.x; j < nbins; j += BlockThreads) counts[j * n + e] = static_cast<std::int32_t>(h[j]);
    __syncthreads();
  }
}

/// Exact competition rank of every expert (histogram_rank.hpp): one block, all pairs.
__global__ void rank_kernel(const std::int32_t* counts, int n, int nbins, std::int32_t* ranks) {
  for (int e = threadIdx.x; e < n; e += blockDim.x) ranks[e] = histogram_rank(counts, n, nbins, e);
}

template <class T, int MaxN>
__global__ void __launch_bounds__(warp_block_threads)
    select_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid,
                  const std::int8_t* bins, const std::int32_t* ranks, route_params p, batch_state st) {
  __shared__ std::int32_t rank_s[MaxN];
  if (p.kind == policy::lynx)
    for (int e = threadIdx.x; e < p.num_experts; e += blockDim.x) rank_s[e] = ranks[e];
  __syncthreads();
  const int t = blockIdx.x * (warp_block_threads / 32) + threadIdx.x / 32;
  if (t >= num_rows) return;
  select_row<MaxN>(logits + t * row_stride, t, threadIdx.x & 31, t < resolve_valid(valid, num_rows),
                   bins + static_cast<std::int64_t>(t) * p.num_experts, rank_s, p, st);
}

template <class T>
__global__ void __launch_bounds__(1024)
    budget_kernel(const T* logits, std::int64_t row_stride, int num_rows, route_params p, batch_state st,
                  float* share, float* top) {
  budget_block<1024>(logits, row_stride, num_rows, p, st, share, top);
}

/// The top-1 anchor for the lynx and piggyback policies: every voting row's argmax joins K.
__global__ void merge_flags_kernel(const std::uint32_t* from, int n, std::uint32_t* into) {
  for (int e = threadIdx.x; e < n; e += blockDim.x)
    if (from[e]) into[e] = 1;
}

template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(warp_block_threads)
    final_kernel(const T* logits, std::int64_t row_stride, int num_rows, route_params p, batch_state st,
                 IdT* ids, float* weights) {
  const int t = blockIdx.x * (warp_block_threads / 32) + threadIdx.x / 32;
  if (t >= num_rows || !st.votes[t]) return;
  final_row<MaxN>(logits + t * row_stride, t, threadIdx.x & 31, p, st, ids, weights);
}

template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(warp_block_threads)
    plain_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid, route_params p,
                 batch_state st, IdT* ids, float* weights) {
  const int t = blockIdx.x * (warp_block_threads / 32) + threadIdx.x / 32;
  if (t >= num_rows) return;
  plain_row<MaxN>(logits + t * row_stride, t, threadIdx.x & 31, t < resolve_valid(valid, num_rows), p, st, ids,
                  weights);
}

/// Every block re-derives the batch decision from the flags (N words, cheaper than another
/// launch), then finishes its rows. topk_route passes in_final == in_plain: it only pads.
template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(warp_block_threads)
    finish_kernel(const T* logits, std::int64_t row_stride, int num_rows, route_params p, batch_state st,
                  IdT* ids, float* weights) {
  __shared__ bool fallback_s;
  __shared__ int pad_s[max_top_k];
  decide<warp_block_threads>(st, p, &fallback_s, pad_s);
  const int t = blockIdx.x * (warp_block_threads / 32) + threadIdx.x / 32;
  if (t >= num_rows) return;
  finish_row<MaxN>(logits + t * row_stride, t, threadIdx.x & 31, p, st, fallback_s, pad_s, ids, weights);
}

// ---------------------------------------------------------------------------------------
// The fused path: the whole step in one block, for num_rows <= 512 and N <= 512. Phases are
// separated by __syncthreads instead of kernel boundaries; flags, votes, masses, counts and
// ranks stay in shared memory. Scratch that does not fit (bins, budget shares) is in the
// workspace, written and read by this block only.

template <class T, class IdT, int MaxN>
__global__ void __launch_bounds__(fused_threads)
    fused_route_kernel(const T* logits, std::int64_t row_stride, int num_rows, token_count valid,
                       route_params p, std::int8_t* bins, float* share, float* top, IdT* ids,
                       float* weights) {
  __shared__ std::uint16_t counts_s[max_bins * MaxN];  // < 65536 rows, so uint16 is exact
  __shared__ std::int16_t rank_s[MaxN];
  __shared__ std::uint32_t flags_s[4 * MaxN];
  __shared__ std::uint8_t votes_s[fused_max_rows];
  __shared__ float mass_s[fused_max_rows];
  __shared__ bool fallback_s;
  __shared__ int pad_s[max_top_k];
  const int n = p.num_experts, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  constexpr int warps = fused_threads / 32;
  const int b = resolve_valid(valid, num_rows);
  const batch_state st{flags_s, flags_s + MaxN, flags_s + 2 * MaxN, flags_s + 3 * MaxN, votes_s, mass_s};
  for (int i = threadIdx.x; i < 4 * MaxN; i += fused_threads) flags_s[i] = 0;
  if (p.kind == policy::lynx) {
    const int depth = bin_depth(p.beta), nbins = depth + 1;
    for (int i = threadIdx.x; i < nbins * n; i += fused_threads) counts_s[i] = 0;
    for (int t = warp; t < num_rows; t += warps)
      bin_row(logits + t * row_stride, n, lane, t < b, p.alpha, depth, bins + static_cast<std::int64_t>(t) * n);
    __syncthreads();
    for (int e = threadIdx.x; e < n; e += fused_threads)  // each thread owns one expert's column
      for (int t = 0; t < num_rows; ++t) {
        const int j = bin_digit(bins[static_cast<std::int64_t>(t) * n + e]);
        if (j >= 0 && j < nbins) ++counts_s[j * n + e];
      }
    __syncthreads();
    for (int e = threadIdx.x; e < n; e += fused_threads)
      rank_s[e] = static_cast<std::int16_t>(histogram_rank(counts_s, n, nbins, e));
  }
  __syncthreads();
  for (int t = warp; t < num_rows; t += warps)
    select_row<MaxN>(logits + t * row_stride, t, lane, t < b, bins + static_cast<std::int64_t>(t) * n, rank_s, p, st);
  __syncthreads();
  if (p.kind == policy::budget) {
    budget_block<fused_threads>(logits, row_stride, num_rows, p, st, share, top);
  } else if (p.anchor_top1) {
    for (int e = threadIdx.x; e < n; e += fused_threads)
      if (st.anchors[e]) st.in_active[e] = 1;
  }
  __syncthreads();
  for (int t = warp; t < num_rows; t += warps)
    if (votes_s[t]) final_row<MaxN>(logits + t * row_stride, t, lane, p, st, ids, weights);
  __syncthreads();
  decide<fused_threads>(st, p, &fallback_s, pad_s);
  for (int t = warp; t < num_rows; t += warps)
    finish_row<MaxN>(logits + t * row_stride, t, lane, p, st, fallback_s, pad_s, ids, weights);
}

}  // namespace detail
}  // namespace lynx
