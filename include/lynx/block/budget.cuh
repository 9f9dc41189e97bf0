#pragma once
// lynx::block_budget: the budget policy's greedy choice of K (detail/budget.hpp) by one thread
// block: the host path's steps and ties, so the set is bitwise the host's.
//
// Gains are exact integer sums (detail/budget.hpp's gain grid), so no step depends on the order
// of their terms. The block computes the shares (a warp per token, token-major, in shared memory
// when they fit, else in the global scratch), inserts K0 by a top-k inside it, and adds each
// token's gain terms into the candidates' gains with shared-memory atomics. Then the steps, with
// no block-wide barrier: up to 32 * token_slots rows, the warps that own candidates keep their
// gains and every token's k best shares inside K in registers and meet once a step at named
// barrier 1; above that, the same warps keep the gains in shared memory, insert a token a
// thread and list the moved tokens, with two barriers a step at named barrier 1 too (one warp
// alone was 2.3-4.6x slower there at T 256 on an H200). So at any row count, a caller that
// composes block_budget must not use barrier 1 in those warps while it runs. A step is a (gain, id) argmax, the chosen
// expert's share inserted into each token's k best inside K, and, for each token whose k-th
// best moved (a few a step), every owner replacing that token's terms of its gains.

#include <cstdint>

#include "../detail/budget.hpp"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "../warp/budget.cuh"
#include "../warp/remap_topk.cuh"
#include "../warp/row.cuh"
#include "../warp/topk.cuh"

namespace lynx {

namespace detail {

/// The warp's best candidate of every lane's (g: its gain, c: its id, c < 0: none): the larger
/// gain, then the lower id, into g and c of every lane. Returns false when no lane has one.
/// packed: every g is below 2^47, so one 64-bit max of (g + 1, 0xFFFF - c) keys decides (its
/// high word first, warp_max_key); else the largest g, then the lowest id among its holders.
__device__ __forceinline__ bool warp_gain_argmax(bool packed, gain_t& g, int& c) {
  if (packed) {
    const std::uint64_t best = warp_max_key(gain_key(g, c));
    if (best == 0) return false;
    g = key_gain(best);
    c = key_expert(best);
    return true;
  }
  const std::uint64_t top = warp_max(c < 0 ? gain_t{0} : g + 1);
  if (top == 0) return false;
  int lowest = c >= 0 && g + 1 == top ? c : 0x7FFFFFFF;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const int other = __shfl_xor_sync(full_mask, lowest, o);
    lowest = other < lowest ? other : lowest;
  }
  g = top - 1;
  c = lowest;
  return true;
}

}  // namespace detail

/// Global scratch of one greedy: share[t * n + e] (token-major), top[t * k + j] (each token's
/// k best shares inside K, descending) and kth[t] (the k-th of them), used when the batch does
/// not fit in the TempStorage.
struct budget_scratch {
  float* share;
  float* top;
  float* kth;
};

/// MaxRows, ShareCapacity, TopCapacity: how many kth, share and top entries the TempStorage
/// holds; a batch that needs more keeps them in the global scratch (slower steps). The default
/// share capacity holds 64 rows of up to 128 experts (row stride 129), else 5,120 shares, so
/// that the fused kernels stay within 48 KB of static shared memory.
template <int MaxN, int K, int BlockThreads, int MaxRows = 512, int ShareCapacity = (MaxN <= 128 ? 64 * 129 : 5120),
          int TopCapacity = 2048>
class block_budget {
  static constexpr int warps = BlockThreads / 32;
  static constexpr int per_lane = MaxN / 32;  // a row's keys a lane holds; the gains a lane of one stepping warp keeps
  // The steps up to 32 * token_slots rows: warps with a thread per expert, as many as the block has.
  static constexpr int stepping_warps = MaxN / 32 < warps ? MaxN / 32 : warps;
  static constexpr int token_slots = 2;
  // Above 32 * token_slots rows: thread j of the stepping threads owns experts j, j + S, ...
  static constexpr int per_thread = (MaxN + BlockThreads - 1) / BlockThreads;
  static constexpr int max_moved = 64;  // a longer list: the next step sums every gain afresh
  using gain_t = detail::gain_t;

 public:
  struct TempStorage {
    float kth[MaxRows];          // each token's k-th best share inside K
    float share[ShareCapacity];  // share[t * stride + e], stride = n | 1 (odd: a column is conflict-free)
    float top[TopCapacity];      // top[j * rows + t]: token t's j-th best share inside K
    gain_t gain[MaxN];           // every expert's gain for K0, summed by the block
    gain_t total;                // the batch's retained mass for K0
    gain_t target;               // the mass mode's target for it (budget_mass times the voters)
    int limit;                   // the count limit (budget_limit)
    int size, bulk;
    std::uint64_t slot_key[2][stepping_warps];  // up to 32 * token_slots rows: each stepping warp's
                                                // best candidate of a step (gain_key, 0: none);
                                                // two sets, steps alternate
    gain_t warp_gain[stepping_warps];           // above: each stepping warp's best gain,
    int warp_best[stepping_warps];              // and its id (-1: none)
    int moved_count[2];                   // above 32 * token_slots rows: the tokens whose k-th
    int moved_row[2][max_moved];          // moved in a step (two steps' lists alternate, one
    float moved_kth[2][max_moved];        // read while the next is written), their k-th before
  };

  __device__ __forceinline__ explicit block_budget(TempStorage& temp) : temp_(temp) {}

  /// Block-collective. Rows t < num_rows with votes[t] take part; load_row(row, t) loads row t
  /// into a warp_row<MaxN> (warp-collective), and its plain top-k keys are plain[t * k + r].
  /// With a model router (docs/ROUTERS.md) the row is the router's (warp/router.cuh: choice
  /// keys on the kept groups, max = the first choice's score) and plain its choice P.
  /// Reads the plain and anchor bit sets; grows `active` (on entry: K0's pinned experts) to the
  /// budget's K. Synchronizes before it returns.
  template <class RowLoader>
  __device__ void run(RowLoader load_row, int num_rows, const std::uint8_t* votes, const std::uint64_t* plain,
                      const route_params& p, const std::uint32_t* plain_set, const std::uint32_t* anchors,
                      std::uint32_t* active, budget_scratch ws) {
    const int n = p.num_experts, k = p.top_k, rows = num_rows;
    if (threadIdx.x < 32) {  // warp 0 counts: voters, the limit, K0 (with the anchors when they fit)
      int voters = 0;
      for (int t = threadIdx.x; t < rows; t += 32) voters += votes[t];
      const budget_counts c = warp_budget_counts(voters, p, plain_set, anchors, active);
      if (threadIdx.x == 0) {
        temp_.limit = c.limit;
        temp_.target = detail::to_gain(p.budget_mass * static_cast<float>(c.voters));
        temp_.bulk = c.bulk;
        temp_.size = c.size;
        temp_.total = 0;
        temp_.moved_count[0] = temp_.moved_count[1] = 0;  // the first step updates nothing
      }
    }
    for (int e = threadIdx.x; e < MaxN; e += BlockThreads) temp_.gain[e] = 0;
    __syncthreads();
    // Shared memory where the batch fits, else the global scratch: two instantiations of the
    // rest, so that every access has its address space (a generic pointer would cost each load).
    const int stride = n | 1;
    const bool fits = rows <= MaxRows && static_cast<std::size_t>(rows) * stride <= ShareCapacity &&
                      static_cast<std::size_t>(rows) * k <= TopCapacity;
    if (fits)
      greedy(load_row, rows, votes, plain, p, anchors, active, temp_.share, stride, temp_.top, temp_.kth);
    else
      greedy(load_row, rows, votes, plain, p, anchors, active, ws.share, n, ws.top, ws.kth);
    __syncthreads();
  }

 private:
  /// After the counts: the shares, K0's insertion, the first gains and mass, the steps and the
  /// fill, with share (row stride `stride`), top and kth in one memory space.
  template <class RowLoader>
  __device__ __forceinline__ void greedy(RowLoader& load_row, int rows, const std::uint8_t* votes,
                                         const std::uint64_t* plain, const route_params& p,
                                         const std::uint32_t* anchors, std::uint32_t* active, float* share,
                                         int stride, float* top_all, float* kth) {
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id(), warp = threadIdx.x / 32;
    // Shares and K0's insertion, a warp per voting token: K0's best shares are those of the
    // token's best logits inside K0 (exp_f32 and scaled_sigmoid are monotone), as on the host.
    // Then the token's terms of every gain and of the batch's mass.
    for (int t = warp; t < rows; t += warps) {
      float* st = share + static_cast<std::size_t>(t) * stride;
      if (!votes[t]) {  // zero shares and kth: every gain term of the row is 0, as if it were skipped
        for (int e = lane; e < n; e += 32) st[e] = 0.0f;
        if (lane < k) top_all[static_cast<std::size_t>(lane) * rows + t] = 0.0f;
        if (lane == 0) kth[t] = 0.0f;
        continue;
      }
      warp_row<MaxN> row;
      load_row(row, t);
      // A share from a key of the row (0: outside a router's kept groups, so -inf), over the
      // row's plain sum (a router's: over P; a plain row's sum is at least 1).
      const std::uint64_t pk = lane < k ? plain[static_cast<std::size_t>(t) * k + lane] : 0;
      const row_shares share_of = warp_row_shares<K>(row.max, pk, k, p);
#pragma unroll
      for (int i = 0; i < per_lane; ++i) {
        const int e = warp_row<MaxN>::expert(i);
        if (e < n) st[e] = share_of(row.key[i]);
      }
      // K0's members insert their shares, the best k of them (with a router's row, a member
      // outside the kept groups has no key there and a share of 0). K0 is small (the pinned
      // experts and anchors), so the rounds end when no member is left.
      const std::uint64_t best = warp_topk_in<K, true>(row, active, pk, k);
      float top = 0.0f;
      if (lane < k && best) {
        const float s = share_of(best);
        top = s > 0.0f ? s : 0.0f;  // share_insert never takes 0 or NaN
      }
      if (lane < k) top_all[static_cast<std::size_t>(lane) * rows + t] = top;
      const float kt = __shfl_sync(detail::full_mask, top, k - 1);
      if (lane == 0) kth[t] = kt;
      // The shares again, as this lane wrote them (kept in registers, they would spill).
#pragma unroll
      for (int i = 0; i < per_lane; ++i) {
        const int e = warp_row<MaxN>::expert(i);
        const gain_t g = e < n ? detail::share_gain(st[e], kt) : gain_t{0};
        if (g) atomicAdd(reinterpret_cast<unsigned long long*>(&temp_.gain[e]), g);
      }
      const gain_t mass = warp_sum64(lane < k ? detail::to_gain(top) : gain_t{0});
      if (lane == 0 && mass) atomicAdd(reinterpret_cast<unsigned long long*>(&temp_.total), mass);
    }
    __syncthreads();
    // Gains only shrink: if every one fits in 47 bits now (shares are at most 1, so up to 2^15
    // rows), a 64-bit (gain, id) key orders them to the end (gain_key); decided for the whole
    // block. The register-resident steps take only such keys; wider gains step in shared memory.
    gain_t most = 0;
    for (int e = threadIdx.x; e < MaxN; e += BlockThreads) most = temp_.gain[e] > most ? temp_.gain[e] : most;
    const bool packed = __syncthreads_and(most < (gain_t{1} << 47));
    int size = 0;
    if (rows <= 32 * token_slots && packed) {
      if (warp < stepping_warps) size = steps_resident(rows, p, anchors, active, share, stride, top_all, kth);
    } else {
      size = steps_block(packed, rows, p, anchors, active, share, stride, top_all, kth);
    }
    // The gains vanished below k experts (every share left underflows): K takes the rows' plain
    // top-k in turn, as the host's fill_from_plain. (Thread 0 set every bit of the steps.)
    if (threadIdx.x == 0 && size < k)
      for (int t = 0; t < rows && size < k; ++t)
        if (votes[t])
          for (int r = 0; r < k && size < k; ++r) {
            const int e = detail::key_expert(plain[static_cast<std::size_t>(t) * k + r]);
            if (!detail::test_bit(active, e)) {
              detail::set_bit(active, e);
              ++size;
            }
          }
  }

  /// The steps up to 32 * token_slots rows (gains packed), by stepping_warps warps with one
  /// named barrier (id 1) a step. Thread j of them keeps the gains of experts j, j + S, ...
  /// (S = their threads) in registers, and every warp keeps every token's k best shares inside
  /// K in registers (lane l: tokens l, l + 32, ...), so each warp inserts the chosen expert's
  /// share on its own and knows which tokens moved without another barrier. A step: each warp's
  /// best (gain, id) key to a slot (two sets of slots, alternating, so one barrier a step
  /// suffices); the barrier; every thread reads the slots' keys and takes their max (the
  /// host's argmax: the larger gain, then the lower id), and every warp inserts its share (the
  /// second token slot only above 32 rows); for each token whose k-th moved, every thread
  /// replaces that token's terms of its gains (an exact sum: the fresh gains). As the host's:
  /// to the limit, or in mass mode to the target, but not below k experts. Returns K's size.
  __device__ __forceinline__ int steps_resident(int rows, const route_params& p, const std::uint32_t* anchors,
                                                std::uint32_t* active, const float* share, int stride,
                                                const float* top_all, const float* kth_all) {
    constexpr int threads = 32 * stepping_warps, owned = (MaxN + threads - 1) / threads;
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id(), warp = threadIdx.x / 32;
    gain_t gain[owned];
    // Bit i: expert threadIdx.x + threads * i is in K or beyond N (closed), or an anchor.
    std::uint32_t closed = 0, anchored = 0;
#pragma unroll
    for (int i = 0; i < owned; ++i) {
      const int e = threadIdx.x + threads * i;
      gain[i] = e < n ? temp_.gain[e] : gain_t{0};
      if (e >= n || detail::test_bit(active, e)) closed |= 1u << i;
      if (e < n && detail::test_bit(anchors, e)) anchored |= 1u << i;
    }
    float top[token_slots][K], kth[token_slots];
#pragma unroll
    for (int r = 0; r < token_slots; ++r) {
      const int t = lane + 32 * r;
      kth[r] = t < rows ? kth_all[t] : 0.0f;
#pragma unroll
      for (int j = 0; j < K; ++j) top[r][j] = t < rows && j < k ? top_all[static_cast<std::size_t>(j) * rows + t] : 0.0f;
    }
    const gain_t target = temp_.target;
    const int limit = temp_.limit;
    gain_t total = temp_.total;
    int size = temp_.size, slot = 0;
    for (int phase = temp_.bulk ? 1 : 0; phase < 2; ++phase) {
      while (!(size >= limit || (phase == 1 && size >= k && p.budget_mass > 0.0f && !(total < target)))) {
        const std::uint32_t open = (phase == 1 ? ~0u : anchored) & ~closed;
        gain_t g = 0;  // this thread's best candidate (ascending ids: the first of equal gains)
        int c = -1;
#pragma unroll
        for (int i = 0; i < owned; ++i)
          if (((open >> i) & 1u) && (c < 0 || gain[i] > g)) g = gain[i], c = threadIdx.x + threads * i;
        // The warp's best key in its slot (0: none); the warps' best is the max of the slots.
        const std::uint64_t key = detail::warp_max_key(detail::gain_key(g, c));
        if (lane == 0) temp_.slot_key[slot][warp] = key;
        asm volatile("bar.sync 1, %0;" ::"n"(threads) : "memory");
        const std::uint64_t best = slots_max(temp_.slot_key[slot]);
        g = best ? detail::key_gain(best) : 0;
        c = best ? detail::key_expert(best) : -1;
        slot ^= 1;
        if (c < 0 || (phase == 1 && g == 0)) break;
        if (c % threads == threadIdx.x) closed |= 1u << (c / threads);
        if (threadIdx.x == 0) detail::set_bit(active, c);
        total += g;
        ++size;
#pragma unroll
        for (int r = 0; r < token_slots; ++r) {
          if (r > 0 && rows <= 32 * r) break;  // no token in this slot (uniform)
          const int t = lane + 32 * r;
          const float was = kth[r];
          if (t < rows) {
            const float s = share[static_cast<std::size_t>(t) * stride + c];
            if (s > was) kth[r] = detail::share_insert_k<K>(top[r], 1, k, s);
          }
          // For each token whose k-th moved, every thread replaces its terms of the gains. Two
          // tokens an iteration below 1024 threads (their shuffles and share reads overlap); at
          // 1024 threads (64 registers) the second token's state spills, so one.
          const unsigned moved = __ballot_sync(detail::full_mask, kth[r] != was);
          if constexpr (BlockThreads < 1024) {
#pragma unroll 1
            for (unsigned m = moved; m != 0;) {
              const int a = __ffs(m) - 1;
              m &= m - 1;
              const bool two = m != 0;  // uniform
              const int b = two ? __ffs(m) - 1 : a;
              m &= m - 1;
              const float wa = __shfl_sync(detail::full_mask, was, a), va = __shfl_sync(detail::full_mask, kth[r], a);
              const float wb = __shfl_sync(detail::full_mask, was, b), vb = __shfl_sync(detail::full_mask, kth[r], b);
              const float* sa = share + static_cast<std::size_t>(32 * r + a) * stride;
              const float* sb = share + static_cast<std::size_t>(32 * r + b) * stride;
#pragma unroll
              for (int i = 0; i < owned; ++i) {
                const int e = threadIdx.x + threads * i;
                if (e < n) {
                  const float ha = sa[e], hb = sb[e];
                  const gain_t da = detail::share_gain(ha, wa) - detail::share_gain(ha, va);
                  const gain_t db = two ? detail::share_gain(hb, wb) - detail::share_gain(hb, vb) : gain_t{0};
                  gain[i] -= da + db;
                }
              }
            }
          } else {
#pragma unroll 1
            for (unsigned m = moved; m != 0; m &= m - 1) {
              const int from = __ffs(m) - 1;
              const float w = __shfl_sync(detail::full_mask, was, from), v = __shfl_sync(detail::full_mask, kth[r], from);
              const float* st = share + static_cast<std::size_t>(32 * r + from) * stride;
#pragma unroll
              for (int i = 0; i < owned; ++i) {
                const int e = threadIdx.x + threads * i;
                if (e < n) {
                  const float sh = st[e];
                  gain[i] -= detail::share_gain(sh, w) - detail::share_gain(sh, v);
                }
              }
            }
          }
        }
      }
    }
    return size;
  }

  /// The steps above 32 * token_slots rows, by the warps that own candidates (thread j:
  /// experts j, j + S, ..., S stepping threads; the others return at once) between named
  /// barriers (id 1) of their own. A step: every thread replaces its candidates' terms of the
  /// tokens the last step moved (all of its gains summed afresh when that list overflowed) and
  /// keeps its best; each warp's best to shared memory; barrier; every thread takes the best of
  /// the warps' (the host's argmax), and the tokens (a thread each) insert its share into their
  /// k best inside K, listing those whose k-th moved; barrier. As the host's: to the limit, or
  /// in mass mode to the target, but not below k experts. Returns K's size (thread 0's).
  __device__ __forceinline__ int steps_block(bool packed, int rows, const route_params& p, const std::uint32_t* anchors,
                                             std::uint32_t* active, const float* share, int stride, float* top_all,
                                             float* kth) {
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id(), warp = threadIdx.x / 32;
    const int stepping = n < BlockThreads ? (n + 31) / 32 : warps, threads = 32 * stepping;
    if (warp >= stepping) return 0;
    const auto barrier = [threads] { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); };
    // temp_.gain[e], fresh at every step, is thread e % threads's own (shared memory rather than
    // registers: in registers they spill at 1024 threads, sm_90).
    gain_t* const gain = temp_.gain;
    gain_t* const warp_gain = temp_.warp_gain;  // stepping <= stepping_warps
    int* const warp_best = temp_.warp_best;
    // The uniform state (the mass, the limits) stays in shared memory: registers are scarce at
    // 1024 threads. Thread 0 adds each step's gain to the mass after the first barrier; every
    // thread reads it after the second.
    int size = temp_.size, step = 0;  // step: the steps taken (its parity picks the moved list)
    for (int phase = temp_.bulk ? 1 : 0; phase < 2; ++phase) {
      std::uint32_t open = 0;  // bit j: expert threadIdx.x + threads * j is a candidate of this phase
#pragma unroll
      for (int j = 0; j < per_thread; ++j) {
        const int e = threadIdx.x + threads * j;
        if (e < n && !detail::test_bit(active, e) && (phase == 1 || detail::test_bit(anchors, e))) open |= 1u << j;
      }
      while (!(size >= temp_.limit ||
               (phase == 1 && size >= k && p.budget_mass > 0.0f && !(temp_.total < temp_.target)))) {
        // The last step's moved tokens: each replaces its terms of every gain.
        const int list = step & 1, moved = temp_.moved_count[list];
        if (moved <= max_moved) {
#pragma unroll 1  // a few tokens a step; unrolled, their temporaries would spill at 64 registers
          for (int i = 0; i < moved; ++i) {
            const int t = temp_.moved_row[list][i];
            const float was = temp_.moved_kth[list][i], now = kth[t];
            const float* st = share + static_cast<std::size_t>(t) * stride;
#pragma unroll
            for (int j = 0; j < per_thread; ++j) {
              const int e = threadIdx.x + threads * j;
              if (e < n) {
                const float s = st[e];
                gain[e] -= detail::share_gain(s, was) - detail::share_gain(s, now);
              }
            }
          }
        } else {  // too many to list: every gain afresh (an exact sum: the same in any order)
#pragma unroll
          for (int j = 0; j < per_thread; ++j) {
            const int e = threadIdx.x + threads * j;
            gain_t g = 0;
            if (e < n) {
#pragma unroll 1
              for (int t = 0; t < rows; ++t) g += detail::share_gain(share[static_cast<std::size_t>(t) * stride + e], kth[t]);
              gain[e] = g;
            }
          }
        }
        gain_t g = 0;  // this thread's best candidate (ascending ids: the first of equal gains)
        int c = -1;
#pragma unroll
        for (int j = 0; j < per_thread; ++j) {
          const int e = threadIdx.x + threads * j;
          if ((open >> j) & 1u) {  // open: e < n
            const gain_t ge = gain[e];
            if (c < 0 || ge > g) g = ge, c = e;
          }
        }
        detail::warp_gain_argmax(packed, g, c);
        if (lane == 0) {
          warp_gain[warp] = g;
          warp_best[warp] = c;
        }
        barrier();
        g = 0;
        c = -1;
#pragma unroll 1
        for (int w = 0; w < stepping; ++w) {  // the host's argmax: the larger gain, then the lower id
          const int cw = warp_best[w];
          const gain_t gw = warp_gain[w];
          if (cw >= 0 && (c < 0 || detail::gain_before(gw, cw, g, c))) g = gw, c = cw;
        }
        // The list just applied is empty again (read before the barrier above): a step that
        // ends the phase leaves the next phase's first step nothing to apply twice.
        if (threadIdx.x == 0) temp_.moved_count[list] = 0;
        if (c < 0 || (phase == 1 && g == 0)) break;
        if (threadIdx.x == (c % threads)) open &= ~(1u << (c / threads));
        if (threadIdx.x == 0) {
          detail::set_bit(active, c);
          temp_.total += g;
        }
        ++size;
        const int next = list ^ 1;
        // Every token's k best shares inside K (a thread each); the moved ones are listed.
#pragma unroll 1
        for (int t = threadIdx.x; t < rows; t += threads) {
          const float s = share[static_cast<std::size_t>(t) * stride + c], was = kth[t];
          if (s > was) {
            const float now = detail::share_insert_k<K>(top_all + t, rows, k, s);
            if (now != was) {
              kth[t] = now;
              const int at = atomicAdd(&temp_.moved_count[next], 1);
              if (at < max_moved) {
                temp_.moved_row[next][at] = t;
                temp_.moved_kth[next][at] = was;
              }
            }
          }
        }
        ++step;
        barrier();
      }
      barrier();  // a step that ended the phase: its warp results are read before the next writes
    }
    return size;
  }

  /// The largest of the stepping warps' slot keys, read by every thread: every load first,
  /// then a tree of 64-bit maxes (depth log2 of the warps, not a chain). (A warp max of them,
  /// a lane a slot, cost more in GPGPU-Sim at four slots: before sm_80 a warp max is a
  /// butterfly of shuffles.)
  static __device__ __forceinline__ std::uint64_t slots_max(const std::uint64_t* slot) {
    std::uint64_t v[stepping_warps];
#pragma unroll
    for (int w = 0; w < stepping_warps; ++w) v[w] = slot[w];
#pragma unroll
    for (int half = 1; half < stepping_warps; half *= 2)
#pragma unroll
      for (int w = 0; w + half < stepping_warps; w += 2 * half) v[w] = v[w + half] > v[w] ? v[w + half] : v[w];
    return v[0];
  }

  static __device__ __forceinline__ gain_t warp_sum64(gain_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::full_mask, v, o);
    return v;
  }

  TempStorage& temp_;
};

}  // namespace lynx
