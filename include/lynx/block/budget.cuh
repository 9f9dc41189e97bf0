#pragma once
// lynx::block_budget: the budget policy's greedy choice of K (detail/budget.hpp) by one thread
// block: the host path's steps, sums and ties, so the set is bitwise the host's.
//
// The objective, the batch's retained router mass, is a sum over tokens, and each expert's gain
// is a float sum over tokens in token order, by the thread that owns the expert: to stay the
// host's, it keeps that order. The block computes the shares (a warp per token, token-major, in
// shared memory when they fit), inserts K0 by a top-k inside it, and sums the batch's mass; then
// only the warps that hold candidates work, in rounds between named barriers of their own: every
// candidate's fresh sum, then the best joins K and every token's k best shares are updated.
// Where the shares are in shared memory a round is one step, taken by every stepping thread (a
// max over the warps' winners; the tokens updated in parallel). Where they are in global memory
// (T·N beyond the TempStorage), a round's sums are a long chain of global loads, so warp 0 takes
// the best and goes on with each next best whose sum the steps so far provably left unchanged
// (take_run). Grouping did not pay in shared memory (simulator: bench/README.md).

#include <cstdint>

#include "../detail/budget.hpp"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "../warp/remap_topk.cuh"
#include "../warp/row.cuh"
#include "../warp/topk.cuh"

namespace lynx {

/// Global scratch of one greedy: share[t * n + e] (token-major), top[t * k + j] (each token's
/// k best shares inside K, descending) and kth[t] (the k-th of them; used only beyond MaxRows
/// rows, in shared memory otherwise).
struct budget_scratch {
  float* share;
  float* top;
  float* kth;
};

/// MaxRows, ShareCapacity, TopCapacity: how many kth, share and top entries the TempStorage
/// holds; a batch that needs more keeps them in the global scratch (slower steps).
template <int MaxN, int K, int BlockThreads, int MaxRows = 512, int ShareCapacity = 5120, int TopCapacity = 2048>
class block_budget {
  static constexpr int warps = BlockThreads / 32;
  static constexpr int max_moved = 64;  // tokens a round may move before it must end
  static_assert(MaxN >= warps, "key[] holds each warp's best");

 public:
  struct TempStorage {
    float kth[MaxRows];            // each token's k-th best share inside K
    float share[ShareCapacity];    // share[t * n + e]
    float top[TopCapacity];        // top[t * k + j]
    std::uint64_t key[MaxN];       // a round's fresh gain key of each candidate, 0 for the others
                                   // (a step per round: each warp's best, in key[warp])
    int moved_row[max_moved];      // the tokens whose kth moved in the round,
    float moved_kth[max_moved];    // and their kth at its start
    float total;
    int voters, plain_unique, size, bulk, phase_done;
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
    if (threadIdx.x == 0) {  // counts: voters, plain unique experts; K0 with and without the anchors
      int voters = 0, unique = 0, size = 0, with_anchors = 0;
      for (int t = 0; t < rows; ++t) voters += votes[t];
      for (int w = 0; w < (n + 31) / 32; ++w) {
        unique += __popc(plain_set[w]);
        size += __popc(active[w]);
        with_anchors += __popc(active[w] | anchors[w]);
      }
      temp_.voters = voters;
      temp_.plain_unique = unique;
      const int limit = detail::budget_limit(p.budget_experts, p.budget_fraction, unique, n, k);
      temp_.bulk = with_anchors <= limit;  // then every anchor joins K0 at once
      temp_.size = temp_.bulk ? with_anchors : size;
      if (temp_.bulk)
        for (int w = 0; w < (n + 31) / 32; ++w) active[w] |= anchors[w];
    }
    __syncthreads();
    // Shared memory where the batch fits, else the global scratch: two instantiations of the
    // rest, so that every access has its address space (a generic pointer would cost each load).
    const bool fits = rows <= MaxRows && static_cast<std::size_t>(rows) * n <= ShareCapacity &&
                      static_cast<std::size_t>(rows) * k <= TopCapacity;
    if (fits)
      greedy(load_row, rows, votes, plain, p, anchors, active, temp_.share, temp_.top, temp_.kth, false);
    else
      greedy(load_row, rows, votes, plain, p, anchors, active, ws.share, ws.top, ws.kth, true);
    __syncthreads();
  }

 private:
  /// After the counts: the shares, K0's insertion, the batch's mass, the steps and the fill,
  /// with share, top and kth in one memory space.
  template <class RowLoader>
  __device__ __forceinline__ void greedy(RowLoader& load_row, int rows, const std::uint8_t* votes,
                                         const std::uint64_t* plain, const route_params& p,
                                         const std::uint32_t* anchors, std::uint32_t* active, float* share,
                                         float* top_all, float* kth, bool many_steps) {
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id(), warp = threadIdx.x / 32;
    const bool biased = p.router.bias != nullptr;
    int size = temp_.size;
    // Shares and K0's insertion, a warp per voting token: K0's best shares are those of the
    // token's best logits inside K0 (exp_f32 and scaled_sigmoid are monotone), as on the host.
    for (int t = warp; t < rows; t += warps) {
      if (!votes[t]) {  // zero shares and kth: every gain term of the row is +0, as if it were skipped
        for (int e = lane; e < n; e += 32) share[static_cast<std::size_t>(t) * n + e] = 0.0f;
        if (lane < k) top_all[static_cast<std::size_t>(t) * k + lane] = 0.0f;
        if (lane == 0) kth[t] = 0.0f;
        continue;
      }
      warp_row<MaxN> row;
      load_row(row, t);
      // A share from a key of the row (0: outside a router's kept groups, so -inf), over the
      // row's plain sum (a router's: over P; a plain row's sum is at least 1).
      const auto value = [&](std::uint64_t key) {
        return detail::share_value(key ? key_logit(key) : -INFINITY, row.max, p.score, biased);
      };
      const std::uint64_t pk = lane < k ? plain[static_cast<std::size_t>(t) * k + lane] : 0;
      const float act_p = lane < k ? value(pk) : 0.0f;
      float sum = 0.0f;  // plain_activation_sum, in plain key order
#pragma unroll
      for (int r = 0; r < K; ++r) {
        const float v = __shfl_sync(detail::full_mask, act_p, r);
        if (r < k) sum += v;
      }
      const auto share_of = [&](std::uint64_t key) { return detail::select_f32(sum > 0.0f, value(key) / sum, 0.0f); };
      float* st = share + static_cast<std::size_t>(t) * n;
#pragma unroll
      for (int i = 0; i < MaxN / 32; ++i) {
        const int e = warp_row<MaxN>::expert(i);
        if (e < n) st[e] = share_of(row.key[i]);
      }
      // K0's members lead; only they insert their shares (with a router's row, a member outside
      // the kept groups has no key there and a share of 0).
      const std::uint64_t best = warp_topk_in<K>(row, active, pk, k);
      float top = 0.0f;
      if (lane < k && best && detail::test_bit(active, detail::key_expert(best))) {
        const float sh = share_of(best);
        top = sh > 0.0f ? sh : 0.0f;  // share_insert never takes 0 or NaN
      }
      if (lane < k) top_all[static_cast<std::size_t>(t) * k + lane] = top;
      if (lane == k - 1) kth[t] = top;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the batch's retained mass, token by token as the host sums it
      float total = 0.0f;
      for (int t = 0; t < rows; ++t)
        if (votes[t])
          for (int j = 0; j < k; ++j) total += top_all[static_cast<std::size_t>(t) * k + j];
      temp_.total = total;
    }
    __syncthreads();
    // The rounds, by the warps that hold candidates (a thread per expert); the others wait at
    // the caller's barrier. Between them, a named barrier of just those warps.
    const int stepping = n < BlockThreads ? (n + 31) / 32 : warps, threads = 32 * stepping;
    if (warp >= stepping) return;
    const auto barrier = [threads] { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); };
    float total = temp_.total;
    const int limit = detail::budget_limit(p.budget_experts, p.budget_fraction, temp_.plain_unique, n, k);
    const float target = p.budget_mass * static_cast<float>(temp_.voters);
    for (int phase = temp_.bulk ? 1 : 0; phase < 2; ++phase)
      for (;;) {
        // As the host's: to the limit, or in mass mode to the target, but not below k experts
        // (the fill follows where the gains vanish first).
        if (stops(size, total, phase, limit, target, p)) break;
        std::uint64_t mine = 0;  // (a step per round: the best of this thread's candidates)
        for (int e = threadIdx.x; e < n; e += threads) {  // every candidate's fresh gain
          std::uint64_t key = 0;
          if (!detail::test_bit(active, e) && (phase == 1 || detail::test_bit(anchors, e))) {
            float g = 0.0f;  // non-voting rows add +0 (zero shares and kth), which changes no sum
            const float* se = share + e;
            int t = 0;
            for (; t + 8 <= rows; t += 8) {  // eight tokens' loads issued before their sums
              float s8[8], k8[8];
#pragma unroll
              for (int u = 0; u < 8; ++u) s8[u] = se[static_cast<std::size_t>(t + u) * n];
#pragma unroll
              for (int u = 0; u < 8; ++u) k8[u] = kth[t + u];
#pragma unroll
              for (int u = 0; u < 8; ++u) g += detail::share_gain(s8[u], k8[u]);
            }
            for (; t < rows; ++t) g += detail::share_gain(se[static_cast<std::size_t>(t) * n], kth[t]);
            key = detail::gain_key(g, e);
          }
          if (many_steps) temp_.key[e] = key;
          else mine = key > mine ? key : mine;
        }
        if (!many_steps) {  // each warp's best
          mine = detail::warp_max(mine);
          if (lane == 0) temp_.key[warp] = mine;
        }
        barrier();
        if (!many_steps) {  // one step: every thread takes the best of the warps' own
          std::uint64_t best = 0;
          for (int w = 0; w < stepping; ++w) best = temp_.key[w] > best ? temp_.key[w] : best;
          const float gain = detail::unordered_float(static_cast<std::uint32_t>(best >> 16));
          if (best == 0 || (phase == 1 && !(gain > 0.0f))) break;
          const int c = detail::key_expert(best);
          if (threadIdx.x == 0) detail::set_bit(active, c);
          ++size;
          total += gain;
          for (int t = threadIdx.x; t < rows; t += threads) {  // every token's k best shares inside K
            const float sh = share[static_cast<std::size_t>(t) * n + c];
            if (sh > kth[t]) {
              float* tt = top_all + static_cast<std::size_t>(t) * k;
              detail::share_insert(tt, k, sh);
              kth[t] = tt[k - 1];
            }
          }
          barrier();
          continue;
        }
        if (warp == 0) take_run(rows, phase, limit, target, p, share, top_all, kth, active, size, total);
        barrier();
        size = temp_.size;
        total = temp_.total;
        if (temp_.phase_done) break;
      }
    // The gains vanished below k experts (every share left underflows): K takes the rows' plain
    // top-k in turn, as the host's fill_from_plain.
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

  static __device__ __forceinline__ bool stops(int size, float total, int phase, int limit, float target,
                                               const route_params& p) {
    return size >= limit || (phase == 1 && size >= p.top_k && p.budget_mass > 0.0f && !(total < target));
  }

  /// One round's steps, by warp 0, from the round's fresh keys (temp_.key): the best candidate
  /// joins K, and so does each next best while its gain is provably still fresh, so that the
  /// steps are the host's one-at-a-time greedy exactly. Every other gain can only have
  /// shrunk (each term share_gain(s, kth) falls as kth grows, and fp32 addition is monotone), so
  /// the next key of the round is the next step's argmax if its own sum is unchanged: it is when
  /// none of the tokens whose kth moved in this round had a positive term in it (its other terms
  /// are those of the round's sum, and a term that was +0 stays +0). The moved tokens and
  /// their kth at the round's start are kept in a short list; a full list ends the round.
  /// Leaves size, total and whether the phase ended in temp_.
  __device__ __forceinline__ void take_run(int rows, int phase, int limit, float target, const route_params& p,
                                           const float* share, float* top_all, float* kth, std::uint32_t* active,
                                           int size, float total) {
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id();
    const bool tracked = rows <= 32 * 32;  // a bit per token in `moved`; else a step per round
    std::uint64_t mine = 0;                // the best key among this lane's experts (e % 32 == lane)
    for (int e = lane; e < n; e += 32) mine = temp_.key[e] > mine ? temp_.key[e] : mine;
    std::uint32_t moved = 0;  // bit j: token lane + 32 j is on the list
    int listed = 0;           // tokens whose kth moved (may pass max_moved: then the round ends)
    bool done = false;
    for (int step = 0;; ++step) {
      const std::uint64_t best = detail::warp_max(mine);
      const float gain = detail::unordered_float(static_cast<std::uint32_t>(best >> 16));
      if (best == 0 || (phase == 1 && !(gain > 0.0f))) {
        done = true;
        break;
      }
      const int c = detail::key_expert(best);
      if (step > 0) {
        if (!tracked || listed > max_moved || stops(size, total, phase, limit, target, p)) break;
        bool fresh = true;
        for (int i = lane; i < listed; i += 32)
          fresh &= !(share[static_cast<std::size_t>(temp_.moved_row[i]) * n + c] > temp_.moved_kth[i]);
        if (!__all_sync(detail::full_mask, fresh)) break;
      }
      if (lane == 0) detail::set_bit(active, c);
      ++size;
      total += gain;
      for (int j = 0; 32 * j < rows; ++j) {  // every token's k best shares inside K (a lane's own tokens)
        const int t = lane + 32 * j;
        bool listing = false;
        float was = 0.0f;
        if (t < rows) {
          const float sh = share[static_cast<std::size_t>(t) * n + c];
          was = kth[t];
          if (sh > was) {
            float* tt = top_all + static_cast<std::size_t>(t) * k;
            detail::share_insert(tt, k, sh);
            kth[t] = tt[k - 1];
            listing = tracked && tt[k - 1] != was && !((moved >> (j & 31)) & 1u);
          }
        }
        const unsigned ballot = __ballot_sync(detail::full_mask, listing);
        if (listing) {
          const int at = listed + __popc(ballot & ((1u << lane) - 1u));
          if (at < max_moved) {
            temp_.moved_row[at] = t;
            temp_.moved_kth[at] = was;
          }
          moved |= 1u << (j & 31);
        }
        listed += __popc(ballot);
      }
      if (!tracked) break;
      if (lane == (c & 31)) {  // c leaves the candidates
        temp_.key[c] = 0;
        mine = 0;
        for (int e = lane; e < n; e += 32) mine = temp_.key[e] > mine ? temp_.key[e] : mine;
      }
      __syncwarp();
    }
    if (lane == 0) {
      temp_.size = size;
      temp_.total = total;
      temp_.phase_done = done;
    }
  }

  TempStorage& temp_;
};

}  // namespace lynx
