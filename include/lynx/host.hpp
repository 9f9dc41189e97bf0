#pragma once
// The host path: the same stages and results as the device launchers, on host memory.
// It is the test oracle for the kernels and a real router for CPU engines. Per-element math
// comes from detail/row_math.hpp, which the kernels share, so ids and weights agree bitwise
// (SPEC §5); detail/host/bodies.hpp says how the host organises the work, and
// detail/host/simd.hpp how each call picks AVX2 + FMA code or portable code (bitwise the same
// results). __half and __nv_bfloat16 logits need <lynx/half.hpp>.
//
// Unlike the device launchers, host functions allocate their scratch on the heap.

#include <cstdint>

#include "batch.hpp"
#include "detail/host/bodies.hpp"
#include "detail/host/router_route.hpp"
#include "detail/host/sorted_layout.hpp"
#include "params.hpp"
#include "sorted_layout.hpp"

namespace lynx {
namespace host {

/// SPEC §3.1. Writes bins[t * N + e] for every row t < num_rows; rows that do not vote
/// (t >= num_valid, or no finite logit) are filled with lynx::no_vote.
template <class T>
status affinity_bin(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                    const route_params& p, std::int8_t* bins) {
  if (const status s = check(p, num_rows, row_stride, num_valid, {logits, bins});
      s != status::success)
    return s;
  if (num_valid == 0) return status::success;  // B = 0: nothing to do
  detail::affinity_bin_body_dispatch(logits, row_stride, num_rows, num_valid, p, bins);
  return status::success;
}

/// SPEC §3.2. counts[j * N + e] (j < histogram_bins(p)) and the exact rank of every expert
/// (0 = greatest H; equal histograms share a rank). counts and ranks are per expert, so they
/// are required and written even for zero rows (an empty batch's histogram: all zero).
inline status score_experts(const std::int8_t* bins, int num_rows, const route_params& p,
                            std::int32_t* counts, std::int32_t* ranks) {
  if (const status s = check(p, num_rows, p.num_experts, num_rows, {bins}); s != status::success)
    return s;
  if (const status s = check_pointers({counts, ranks}); s != status::success) return s;
  detail::score_experts_body_dispatch(bins, num_rows, p, counts, ranks);
  return status::success;
}

/// The valid row count of a host call: a pointer count is read as host memory and clamped to
/// [0, num_rows], as the kernels clamp a device one. Whether a call routes at all is has_rows's,
/// as for the launchers: a host count of 0 writes nothing; a pointer count routes every row,
/// all of them padding (SPEC §5) where it reads 0, as the kernels write them in a graph replay.
inline int valid_rows(token_count valid, int num_rows) {
  return valid.rows(num_rows);
}

/// SPEC §3.3 (and the never-worse guard, step 5), from the bins and ranks of the previous
/// stages (only the lynx policy reads them; others may pass null). The policy as given: unlike
/// the device launcher, no effective_params rewrite, so the anchored lynx policy at k = 1 still
/// needs them (this is the tests' reference for the full policy). Writes the batch's ids and
/// weights [num_rows x k]; non-voting rows as SPEC §5 says. The bins must be affinity_bin's for
/// the same logits and parameters. A model router (p.router, bias in host memory) is taken by
/// the policies that read no bins (docs/ROUTERS.md); the lynx policy takes one through route.
template <class T, class IdT>
status remap_topk(const batch_ref<T, IdT>& batch, const std::int8_t* bins, const std::int32_t* ranks,
                  const route_params& p) {
  const bool needs_scores = p.kind == policy::lynx;
  if (const status s = check(p, batch.num_rows, batch.row_stride, batch.valid,
                             {batch.logits, batch.ids, batch.weights,
                              needs_scores ? static_cast<const void*>(bins) : batch.logits,
                              needs_scores ? static_cast<const void*>(ranks) : batch.logits});
      s != status::success)
    return s;
  if (const status s = check_staged_router(p); s != status::success) return s;
  if (!has_rows(batch.num_rows, batch.valid)) return status::success;
  const int num_valid = valid_rows(batch.valid, batch.num_rows);
  if (!p.router.plain()) {
    detail::router_route_body_dispatch(batch.logits, batch.row_stride, batch.num_rows, num_valid, p, batch.pinned, batch.ids,
                              batch.weights);
    return status::success;
  }
  detail::remap_topk_body_dispatch(batch.logits, batch.row_stride, batch.num_rows, num_valid, bins, ranks, p,
                                   batch.pinned, batch.ids, batch.weights);
  return status::success;
}

template <class T, class IdT>
status remap_topk(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                  const std::int8_t* bins, const std::int32_t* ranks, const route_params& p,
                  IdT* ids, float* weights) {
  return remap_topk(batch_ref<T, IdT>{logits, row_stride, num_rows, num_valid, ids, weights}, bins, ranks, p);
}

/// The whole Lynx step: affinity_bin, score_experts, remap_topk (the same results, with each
/// row loaded once). With a model router (p.router, bias in host memory), every policy on its
/// choice scores and groups, as docs/ROUTERS.md defines. With k = 1, a policy whose K holds
/// every token's top-1 runs as piggyback with keep_k 1 (effective_params; the same results).
template <class T, class IdT>
status route(const batch_ref<T, IdT>& batch, const route_params& p) {
  if (const status s = check(p, batch.num_rows, batch.row_stride, batch.valid, {batch.logits, batch.ids, batch.weights});
      s != status::success)
    return s;
  const route_params q = lynx::effective_params(p);  // k = 1: piggyback where it is the same
  if (q.kind != policy::lynx)  // the other policies need no bins or scores
    return remap_topk(batch, nullptr, nullptr, q);
  if (!has_rows(batch.num_rows, batch.valid)) return status::success;
  const int num_valid = valid_rows(batch.valid, batch.num_rows);
  if (!q.router.plain()) {  // a model router's own choice scores and groups (docs/ROUTERS.md)
    detail::router_route_body_dispatch(batch.logits, batch.row_stride, batch.num_rows, num_valid, q, batch.pinned, batch.ids,
                              batch.weights);
    return status::success;
  }
  detail::route_body_dispatch(batch.logits, batch.row_stride, batch.num_rows, num_valid, q, batch.pinned, batch.ids,
                              batch.weights);
  return status::success;
}

template <class T, class IdT>
status route(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
             const route_params& p, IdT* ids, float* weights) {
  return route(batch_ref<T, IdT>{logits, row_stride, num_rows, num_valid, ids, weights}, p);
}

/// SPEC §4, the baseline router: plain top-k with the model's weighting, or the model's own
/// router where p.router describes one (bias in host memory); non-voting rows as SPEC §5 says
/// (the set the batch loads is the union of the voting rows' top-k).
/// (batch.pinned is ignored: every row keeps its plain top-k.)
template <class T, class IdT>
status topk_route(const batch_ref<T, IdT>& batch, const route_params& p) {
  if (const status s = check(p, batch.num_rows, batch.row_stride, batch.valid, {batch.logits, batch.ids, batch.weights});
      s != status::success)
    return s;
  if (!has_rows(batch.num_rows, batch.valid)) return status::success;
  const int num_valid = valid_rows(batch.valid, batch.num_rows);
  detail::topk_route_body_dispatch(batch.logits, batch.row_stride, batch.num_rows, num_valid, p, batch.ids,
                                   batch.weights);
  return status::success;
}

template <class T, class IdT>
status topk_route(const T* logits, std::int64_t row_stride, int num_rows, int num_valid,
                  const route_params& p, IdT* ids, float* weights) {
  return topk_route(batch_ref<T, IdT>{logits, row_stride, num_rows, num_valid, ids, weights}, p);
}

/// The expert-sorted layout (sorted_layout.hpp) of ids [num_rows x k] over n experts, the
/// layout the device launchers write. ids == null: no slot takes part (the layout of a call
/// with a host count B = 0, which writes no ids).
template <class IdT>
status sorted_layout(const IdT* ids, int num_rows, int k, int n, const sorted_layout_ref& layout) {
  if (n < 1 || n > max_experts) return status::invalid_num_experts;
  if (k < 1 || k > max_top_k) return status::invalid_top_k;
  if (num_rows < 0) return status::invalid_num_rows;
  if (!layout_fits(layout, num_rows, k, n)) return status::invalid_layout;
  detail::sorted_layout_body(ids, num_rows, k, n, layout);
  return status::success;
}

namespace detail {
/// A router call (route or topk_route), then the sorted layout of the ids it wrote (of none
/// when a host count B = 0: the routers write no ids then). A bad layout is rejected before routing.
template <class Router, class T, class IdT>
status route_then_layout(Router&& router, const batch_ref<T, IdT>& batch, const route_params& p,
                         const sorted_layout_ref& layout) {
  if (!layout_fits(layout, batch.num_rows, p.top_k, p.num_experts) && check(p) == status::success)
    return status::invalid_layout;
  if (const status s = router(batch, p); s != status::success) return s;
  const bool routed = has_rows(batch.num_rows, batch.valid);
  return host::sorted_layout(routed ? batch.ids : nullptr, batch.num_rows, p.top_k, p.num_experts, layout);
}
}  // namespace detail

/// route, then the sorted layout of its ids: what lynx::route writes with a sorted_layout_ref.
template <class T, class IdT>
status route(const batch_ref<T, IdT>& batch, const route_params& p, const sorted_layout_ref& layout) {
  return detail::route_then_layout([](const auto& b, const auto& q) { return host::route(b, q); }, batch, p, layout);
}

/// topk_route, then the sorted layout of its ids (as lynx::topk_route writes it).
template <class T, class IdT>
status topk_route(const batch_ref<T, IdT>& batch, const route_params& p, const sorted_layout_ref& layout) {
  return detail::route_then_layout([](const auto& b, const auto& q) { return host::topk_route(b, q); }, batch, p,
                                   layout);
}

}  // namespace host
}  // namespace lynx
