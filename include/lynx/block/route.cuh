#pragma once
// lynx::block_route: the whole Lynx step (SPEC §3, every policy, §5's padding) for a batch that
// one thread block holds, a warp per row: the composition of the warp- and block-level
// functions that lynx::route's fused kernel runs, for a caller's own kernel too (a router-GEMM
// epilogue, a persistent MoE kernel: examples/router_lynx.cu). Phases are separated by
// __syncthreads; the sets, votes, masses, histogram and order codes stay in the caller's shared
// memory (TempStorage); each row's plain top-k keys and the budget policy's shares live in
// global scratch that only this block touches.

#include <cstdint>

#include "../detail/device/batch_rows.cuh"
#include "../detail/device/warp_ops.cuh"
#include "../detail/row_math.hpp"
#include "../params.hpp"
#include "../warp/affinity_bin.cuh"
#include "../warp/budget.cuh"
#include "../warp/remap_topk.cuh"
#include "../warp/router.cuh"
#include "../warp/row.cuh"
#include "../warp/topk.cuh"
#include "active_set.cuh"
#include "budget.cuh"
#include "score_experts.cuh"

namespace lynx {

/// block_route's global scratch: plain[t * k + r] (each row's plain top-k keys), and for the
/// budget policy its shares (block_budget).
struct route_scratch {
  std::uint64_t* plain;   // num_rows * k
  budget_scratch budget;  // budget policy only: share num_rows * n, top num_rows * k, kth num_rows
};

namespace detail {

__device__ __forceinline__ bool is_pinned(const std::uint8_t* pinned, int t) { return pinned && pinned[t]; }

/// SPEC §3.3 steps 1-2 for one voting row (the plain top-k already known): its share of K.
/// A pinned row brings its plain top-k; other rows their argmax as an anchor (with the
/// anchor, and always for the budget policy), their top-keep_k (piggyback), or their z top-k
/// (lynx; given as a callable, since the bins and order codes live in different places).
template <int K, class ZTopk>
__device__ __forceinline__ void select_row(std::uint64_t plain, bool pinned, const route_params& p,
                                           std::uint32_t* active, std::uint32_t* anchors, ZTopk z_topk) {
  const int k = p.top_k;
  if (pinned) {
    mark_topk(active, plain, k);
    return;
  }
  if (lane_id() == 0 && (p.anchor_top1 || p.kind == policy::budget)) set_bit(anchors, key_expert(plain));
  if (p.kind == policy::lynx) mark_topk(active, z_topk(), k);
  else if (p.kind == policy::piggyback) mark_topk(active, plain, p.keep_k);
}

}  // namespace detail

/// MaxN, K: the tier (N <= MaxN, k <= K); BlockThreads: the block's threads. At most MaxRows
/// rows (votes and masses are in shared memory).
template <int MaxN, int K, int BlockThreads, int MaxRows = 512>
class block_route {
  using score_t = block_score_experts<MaxN, BlockThreads>;
  using sets_t = block_active_set<MaxN, BlockThreads>;
  using budget_t = block_budget<MaxN, K, BlockThreads>;

 public:
  struct TempStorage {
    union {
      typename score_t::TempStorage score;    // lynx policy
      typename budget_t::TempStorage budget;  // budget policy
    } policy;
    typename sets_t::TempStorage sets;
    std::uint32_t code[MaxN];  // the experts' order codes (block_order_codes)
    std::uint8_t votes[MaxRows];
    float mass[MaxRows];
  };

  __device__ __forceinline__ explicit block_route(TempStorage& temp) : temp_(temp) {}

  /// Block-collective: routes the batch (a batch_ref, or the library's any_batch) with p,
  /// writing every row's ids and weights. batch.num_rows <= MaxRows, N <= MaxN, k <= K. As with
  /// CUB's block primitives, reusing the TempStorage (another run, or the caller's own data in
  /// a union with it) needs a __syncthreads() after this returns: its last phase still reads it.
  /// p is taken as given: pass effective_params(p) (params.hpp, on the host) for what
  /// lynx::route runs, which at k = 1 skips the bins or the greedy with the same results.
  template <class Batch>
  __device__ __forceinline__ void run(const Batch& batch, const route_params& p, route_scratch scratch) {
    if (p.router.plain())
      run_plain(batch, p, scratch);
    else
      run_router(batch, p, scratch);
  }

  /// run, for a caller that knows its router is plain (p.router.plain()) or is not: one of the
  /// two bodies in its kernel, so the registers of the other do not count (the library's fused
  /// kernel is instantiated once for each).
  template <class Batch>
  __device__ __forceinline__ void run_plain(const Batch& batch, const route_params& p, route_scratch scratch) {
    using detail::lane_id;
    constexpr int warps = BlockThreads / 32;
    const int n = p.num_experts, k = p.top_k, lane = lane_id(), warp = threadIdx.x / 32;
    const int rows = batch.num_rows, depth = detail::bin_depth(p.beta);
    const int b = batch.valid.rows(rows);
    const bool lynx_policy = p.kind == policy::lynx;
    sets_t sets(temp_.sets);
    score_t score(temp_.policy.score, n, depth + 1);
    begin(sets, score, lynx_policy, b, rows);
    if (b == 1) {  // uniform: one valid row, no batch-wide phase (run_one_row)
      run_one_row<false>(batch, p, scratch, sets);
      return;
    }
    // With at most a valid row per warp (B, not T: the padding rows past B are no warp's
    // work), each warp keeps its row and plain top-k in registers from phase to phase (up to
    // 256 experts: 8 keys a lane); otherwise each phase loads its rows again (the caller's
    // logits, and the plain keys from the scratch). Not for the budget policy: its greedy needs
    // those registers (complete_set).
    const bool resident = MaxN <= 256 && b <= warps && p.kind != policy::budget;
    warp_row<MaxN> kept;
    std::uint64_t kept_plain = 0;
    // Where kept is not read again (a phase that loads its rows, or a new row of the first),
    // clearing it ends its live range, so its registers serve the row in hand (no spill at
    // sm_90); a constant costs no register.
    const auto forget_kept = [&] {
      kept = warp_row<MaxN>{};
      kept_plain = 0;
    };
    const auto for_voting_rows = [&](bool keep, auto&& f) {
      for (int t = warp; t < b; t += warps) {  // the padding rows do not vote
        if (!temp_.votes[t]) continue;
        if (keep) {
          f(t, kept, kept_plain);
        } else {
          forget_kept();
          warp_row<MaxN> row;
          detail::batch_load(batch, row, t, n, true);
          f(t, row, lane < k ? scratch.plain[static_cast<std::size_t>(t) * k + lane] : std::uint64_t{0});
        }
      }
    };
    // Every row: its plain top-k (kept for the final top-k), mass, plain experts, bins.
    for (int t = warp; t < b; t += warps) {
      forget_kept();  // resident: this warp's only row
      warp_row<MaxN> row;
      detail::batch_load(batch, row, t, n, true);
      if (lane == 0) temp_.votes[t] = row.votes();
      if (!row.votes()) continue;
      const std::uint64_t plain = warp_topk<K>(row.key, k);
      if (lane < k) scratch.plain[static_cast<std::size_t>(t) * k + lane] = plain;
      if (resident) kept = row, kept_plain = plain;
      mark_topk(sets.plain(), plain, k);
      const float mass = warp_row_mass<K>(row, plain, k, p.score, p.renormalize);
      if (lane == 0) temp_.mass[t] = mass;
      if (lynx_policy) {
        std::int8_t q[MaxN / 32];
        warp_affinity_bin(row, p.alpha, depth, q);
        score.add_row(q);
      } else {
        detail::select_row<K>(plain, detail::is_pinned(batch.pinned, t), p, sets.active(), sets.anchors(),
                              [] { return std::uint64_t{0}; });
      }
    }
    __syncthreads();
    if (lynx_policy) {  // the order codes (the packed histograms, or ranks), then every row's z top-k
      score.order_codes(b, temp_.code);
      for_voting_rows(resident, [&](int t, const warp_row<MaxN>& row, std::uint64_t plain) {
        detail::select_row<K>(plain, detail::is_pinned(batch.pinned, t), p, sets.active(), sets.anchors(), [&] {
          std::int8_t q[MaxN / 32];
          warp_affinity_bin(row, p.alpha, depth, q);
          return warp_z_topk_set<K>(row, q, order_codes{temp_.code}, plain, k, p.alpha, depth);
        });
      });
      __syncthreads();
    }
    // Every voting row's top-k inside K and its weights, then the decision.
    const auto tail = [&](bool keep) {
      for_voting_rows(keep, [&](int t, const warp_row<MaxN>& row, std::uint64_t plain) {
        const std::uint64_t chosen = warp_topk_in<K>(row, sets.active(), plain, k);
        mark_topk(sets.final_set(), chosen, k);
        detail::batch_emit<K>(batch, t, chosen, k, p, temp_.mass[t]);
      });
      // The fallback (rare) reads the plain keys from the scratch: kept through the decision,
      // they would spill at 1024 threads.
      finish(batch, sets, p, [&](int t) {
        const std::uint64_t plain = lane < k ? scratch.plain[static_cast<std::size_t>(t) * k + lane] : 0;
        detail::batch_emit<K>(batch, t, plain, k, p, temp_.mass[t]);
      });
    };
    complete_set(
        sets, rows, p, scratch, [&](warp_row<MaxN>& row, int t) { detail::batch_load(batch, row, t, n, true); },
        tail, resident);
  }

  /// run with a model router (docs/ROUTERS.md): the same phases on each row's router row
  /// (warp/router.cuh), its choice P in place of the plain top-k (scratch.plain holds P's choice
  /// keys), the weights from the logits, scaled.
  template <class Batch>
  __device__ __forceinline__ void run_router(const Batch& batch, const route_params& p, route_scratch scratch) {
    using detail::lane_id;
    constexpr int warps = BlockThreads / 32;
    const model_router& r = p.router;
    const int n = p.num_experts, k = p.top_k, lane = lane_id(), warp = threadIdx.x / 32;
    const int rows = batch.num_rows, depth = detail::bin_depth(p.beta);
    const int b = batch.valid.rows(rows);
    const bool lynx_policy = p.kind == policy::lynx;
    sets_t sets(temp_.sets);
    score_t score(temp_.policy.score, n, depth + 1);
    begin(sets, score, lynx_policy, b, rows);
    if (b == 1) {  // uniform, as run_plain's
      run_one_row<true>(batch, p, scratch, sets);
      return;
    }
    // As run's: with at most a valid row per warp, the logits, P and the kept groups stay in
    // registers; otherwise each phase loads the row again and selects its groups again. Not
    // for the budget policy, as run's.
    const bool resident = MaxN <= 256 && b <= warps && p.kind != policy::budget;
    warp_row<MaxN> kept;
    std::uint64_t kept_plain = 0;
    std::uint32_t kept_groups = 0;
    const auto forget_kept = [&] {  // as run_plain's
      kept = warp_row<MaxN>{};
      kept_plain = 0;
      kept_groups = 0;
    };
    const auto plain_of = [&](int t) {
      return lane < k ? scratch.plain[static_cast<std::size_t>(t) * k + lane] : std::uint64_t{0};
    };
    // f(t, logits, router row, P) for every voting row.
    const auto for_voting_rows = [&](bool keep, auto&& f) {
      for (int t = warp; t < b; t += warps) {  // the padding rows do not vote
        if (!temp_.votes[t]) continue;
        warp_row<MaxN> choice;
        if (keep) {
          warp_choice_keys(kept, n, r, kept_groups, choice);
          choice.max = key_logit(topk_slot(kept_plain, 0));
          f(t, kept, choice, kept_plain);
        } else {
          forget_kept();
          warp_row<MaxN> row;
          detail::batch_load(batch, row, t, n, true);
          warp_router_choice(row, n, r, choice);
          const std::uint64_t plain = plain_of(t);
          choice.max = key_logit(topk_slot(plain, 0));
          f(t, row, choice, plain);
        }
      }
    };
    // Every row: its choice P, mass, P's experts, bins (lynx) or its share of K.
    for (int t = warp; t < b; t += warps) {
      forget_kept();  // resident: this warp's only row
      warp_row<MaxN> row;
      detail::batch_load(batch, row, t, n, true);
      if (lane == 0) temp_.votes[t] = row.votes();
      if (!row.votes()) continue;
      warp_row<MaxN> choice;
      const std::uint32_t groups = warp_router_choice(row, n, r, choice);
      const std::uint64_t plain = warp_router_plain<K>(choice, k);
      if (lane < k) scratch.plain[static_cast<std::size_t>(t) * k + lane] = plain;
      if (resident) kept = row, kept_plain = plain, kept_groups = groups;
      mark_topk(sets.plain(), plain, k);
      const float mass = warp_row_mass<K>(row, warp_by_logit<K>(row, plain, k), k, p.score, p.renormalize);
      if (lane == 0) temp_.mass[t] = mass;
      if (lynx_policy) {
        std::int8_t q[MaxN / 32];
        warp_router_bins(choice, n, p.alpha, depth, q);
        score.add_row(q);
      } else {
        detail::select_row<K>(plain, detail::is_pinned(batch.pinned, t), p, sets.active(), sets.anchors(),
                              [] { return std::uint64_t{0}; });
      }
    }
    __syncthreads();
    if (lynx_policy) {  // the order codes, then every row's z top-k inside its kept groups
      score.order_codes(b, temp_.code);
      for_voting_rows(resident, [&](int t, const warp_row<MaxN>&, const warp_row<MaxN>& choice, std::uint64_t plain) {
        detail::select_row<K>(plain, detail::is_pinned(batch.pinned, t), p, sets.active(), sets.anchors(), [&] {
          std::int8_t q[MaxN / 32];
          warp_router_bins(choice, n, p.alpha, depth, q);
          return warp_z_topk_set<K>(choice, q, order_codes{temp_.code}, plain, k, p.alpha, depth);
        });
      });
      __syncthreads();
    }
    // Every voting row's top-k inside K (and its groups, or relaxed) and its weights, then the
    // decision.
    const auto tail = [&](bool keep) {
      for_voting_rows(keep, [&](int t, const warp_row<MaxN>& row, const warp_row<MaxN>& choice, std::uint64_t plain) {
        const std::uint64_t chosen =
            warp_router_topk_in<K>(row, choice, r, sets.active(), plain, k, detail::is_pinned(batch.pinned, t));
        mark_topk(sets.final_set(), chosen, k);
        detail::batch_emit_scaled<K>(batch, t, warp_by_logit<K>(row, chosen, k), k, p, temp_.mass[t]);
      });
      finish(batch, sets, p, [&](int t) {  // the fallback loads its rows again, as run_plain's
        warp_row<MaxN> row;
        detail::batch_load(batch, row, t, n, true);
        detail::batch_emit_scaled<K>(batch, t, warp_by_logit<K>(row, plain_of(t), k), k, p, temp_.mass[t]);
      });
    };
    complete_set(
        sets, rows, p, scratch,
        [&](warp_row<MaxN>& choice, int t) {
          warp_row<MaxN> row;
          detail::batch_load(batch, row, t, n, true);
          warp_router_choice(row, n, r, choice);
          choice.max = key_logit(scratch.plain[static_cast<std::size_t>(t) * k]);
        },
        tail, resident);
  }

 private:
  // The outline both bodies share; what differs (the row each phase sees, the weights) comes
  // in as callables. The first loop stays in each body: as a helper taking the row by a
  // callable, the router's 512-thread MaxN 256 kernel spilled 4 B at sm_90.

  /// run_plain or run_router (Router) for a batch with one valid row (B = 1: single-stream
  /// decoding, or a graph replay whose batch shrank to one), by warp 0 alone: a single token is
  /// never remapped (SPEC §3.3: its support terms are zero, so its z top-k is its plain top-k,
  /// or a router's choice P, and so is every policy's choice but the budget's), and the
  /// budget's greedy for one token needs no other warp (warp_budget_row, on the row as the
  /// policy sees it: a router's choice keys), nor runs at all when its K surely holds the plain
  /// top-k (warp_budget_keeps_plain: all but rows whose shares tie on the gain grid at the
  /// plain k-th). The rows past it are padding; the decision and
  /// their pad ids are finish's, as for any batch, so every output is the general path's bitwise.
  template <bool Router, class Batch>
  __device__ __forceinline__ void run_one_row(const Batch& batch, const route_params& p, route_scratch scratch,
                                              sets_t& sets) {
    const int n = p.num_experts, k = p.top_k, lane = detail::lane_id();
    const bool pinned = detail::is_pinned(batch.pinned, 0);
    if (threadIdx.x < 32) {
      warp_row<MaxN> row;
      detail::batch_load(batch, row, 0, n, true);
      if (lane == 0) temp_.votes[0] = row.votes();
      if (row.votes()) {
        // The row as the policy sees it (a router's choice keys; else the row) and its plain
        // top-k (a router's choice P), kept in the scratch for finish's fallback.
        warp_row<MaxN> choice;
        std::uint64_t plain;
        if constexpr (Router) {
          warp_router_choice(row, n, p.router, choice);
          plain = warp_router_plain<K>(choice, k);
        } else {
          plain = warp_topk<K>(row.key, k);
        }
        if (lane < k) scratch.plain[lane] = plain;
        mark_topk(sets.plain(), plain, k);
        const std::uint64_t plain_by_logit = by_logit<Router>(row, plain, k);  // the mass's and weights' keys
        const float mass = warp_row_mass<K>(row, plain_by_logit, k, p.score, p.renormalize);
        if (lane == 0) temp_.mass[0] = mass;
        std::uint64_t chosen = plain, weighted;  // weighted: chosen by logit
        // A single token keeps its plain top-k (P) under every policy but the budget's, and
        // under the budget's too when its K surely holds them (then K itself is not needed:
        // only the row's choice and the plain set are read after).
        const auto budget_keeps_plain = [&] {  // on the row as the policy sees it
          if constexpr (Router) return warp_budget_keeps_plain<K>(choice, plain, k, p);
          else return warp_budget_keeps_plain<K>(row, plain, k, p);
        };
        if (p.kind != policy::budget || budget_keeps_plain()) {
          weighted = plain_by_logit;
        } else {
          detail::select_row<K>(plain, pinned, p, sets.active(), sets.anchors(), [] { return std::uint64_t{0}; });
          if constexpr (Router) {
            warp_budget_row<K>(choice, plain, p, sets.plain(), sets.anchors(), sets.active());
            chosen = warp_router_topk_in<K>(row, choice, p.router, sets.active(), plain, k, pinned);
          } else {
            warp_budget_row<K>(row, plain, p, sets.plain(), sets.anchors(), sets.active());
            chosen = warp_topk_in<K>(row, sets.active(), plain, k);
          }
          weighted = by_logit<Router>(row, chosen, k);
        }
        mark_topk(sets.final_set(), chosen, k);
        emit<Router>(batch, 0, weighted, k, p, mass);
      }
    }
    finish(batch, sets, p, [&](int t) {  // the plain top-k, as the general paths' fallbacks write it
      const std::uint64_t plain = lane < k ? scratch.plain[static_cast<std::size_t>(t) * k + lane] : 0;
      warp_row<MaxN> row;  // a router's logits, for its weights' keys
      if constexpr (Router) detail::batch_load(batch, row, t, n, true);
      emit<Router>(batch, t, by_logit<Router>(row, plain, k), k, p, temp_.mass[t]);
    });
  }

  /// A router's chosen keys (choice scores) re-keyed by their logits, as its mass and weights
  /// take them; a plain row's keys are its logits already.
  template <bool Router>
  static __device__ __forceinline__ std::uint64_t by_logit(const warp_row<MaxN>& row, std::uint64_t keys, int k) {
    if constexpr (Router) return warp_by_logit<K>(row, keys, k);
    else return keys;
  }

  /// A voting row's ids and weights from its chosen keys by logit: a router's weights scaled.
  template <bool Router, class Batch>
  static __device__ __forceinline__ void emit(const Batch& batch, int t, std::uint64_t keys, int k,
                                              const route_params& p, float mass) {
    if constexpr (Router) detail::batch_emit_scaled<K>(batch, t, keys, k, p, mass);
    else detail::batch_emit<K>(batch, t, keys, k, p, mass);
  }

  /// Clears the sets (and the lynx policy's histogram) and the votes of the padding rows (b
  /// and on: no warp's work; they do not vote).
  __device__ __forceinline__ void begin(sets_t& sets, score_t& score, bool lynx_policy, int b, int rows) {
    sets.init();
    if (lynx_policy) score.init();
    for (int t = b + static_cast<int>(threadIdx.x); t < rows; t += BlockThreads) temp_.votes[t] = 0;
    __syncthreads();
  }

  /// K's last step, then tail(keep): the budget's greedy (load_row(row, t) gives row t as the
  /// policy sees it), or the top-1 anchors added. Each branch runs its own copy of the tail, so
  /// that the rows a body keeps in registers (resident) are dead during the greedy, which is
  /// the hottest code at 64 registers a thread (the budget policy keeps none).
  template <class LoadRow, class Tail>
  __device__ __forceinline__ void complete_set(sets_t& sets, int rows, const route_params& p,
                                               route_scratch scratch, LoadRow&& load_row, Tail&& tail,
                                               bool resident) {
    if (p.kind == policy::budget) {
      budget_t(temp_.policy.budget)
          .run(load_row, rows, temp_.votes, scratch.plain, p, sets.plain(), sets.anchors(), sets.active(),
               scratch.budget);
      tail(false);
    } else {
      if (p.anchor_top1) {
        sets.merge_anchors();
        __syncthreads();
      }
      tail(resident);
    }
  }

  /// After the final choices: the never-worse decision, the pad ids of the rows that do not
  /// vote, and on fallback emit_plain(t) for every voting row.
  template <class Batch, class EmitPlain>
  __device__ __forceinline__ void finish(const Batch& batch, sets_t& sets, const route_params& p,
                                         EmitPlain&& emit_plain) {
    constexpr int warps = BlockThreads / 32;
    const int k = p.top_k;
    // Warp 0 (the decision's) looks for a row that takes the pad ids: most batches have none,
    // and then the decision skips their prefix sums.
    bool pads = false;
    if (threadIdx.x < 32 && !p.pad_with_sentinel)
      for (int t = static_cast<int>(threadIdx.x); t < batch.num_rows; t += 32) pads |= !temp_.votes[t];
    __syncthreads();
    const auto decision = sets.decide(p.num_experts, k, pads);
    for (int t = static_cast<int>(threadIdx.x) / 32; t < batch.num_rows; t += warps) {
      if (!temp_.votes[t]) detail::batch_emit_pad(batch, t, decision.pad_ids(), k, p);
      else if (decision.fallback()) emit_plain(t);
    }
  }

  TempStorage& temp_;
};

}  // namespace lynx
