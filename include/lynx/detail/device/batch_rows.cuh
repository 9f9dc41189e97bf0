#pragma once
// How the block- and device-level code reads a batch's rows and writes its results: for a
// typed batch_ref (what an engine's own kernel holds) and for any_batch, the library kernels'
// type-erased view. block_route and the kernels call batch_load / batch_emit / batch_emit_pad,
// so one body serves both.

#include <cstdint>
#include <type_traits>

#include "../../batch.hpp"
#include "../../half.hpp"
#include "../../params.hpp"
#include "../../warp/remap_topk.cuh"
#include "../../warp/row.cuh"

namespace lynx {
namespace detail {

/// The logit types a batch may hold, as a run-time tag.
enum class logit_type : std::uint8_t { f32, f16, bf16 };

template <class T>
constexpr logit_type logit_type_of() {
  if constexpr (std::is_same_v<T, float>) {
    return logit_type::f32;
  } else if constexpr (std::is_same_v<T, __half>) {
    return logit_type::f16;
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "logits: float, __half or __nv_bfloat16");
    return logit_type::bf16;
  }
}

/// A batch_ref with its logit and id types as run-time tags, which is what the library's kernels
/// take: each is then instantiated once per tier, not once per (T, IdT) pair a program routes.
/// A warp-uniform switch per row load and per row write is all it costs.
struct any_batch {
  const void* logits;
  std::int64_t row_stride;
  int num_rows;
  token_count valid;
  void* ids;
  float* weights;
  const std::uint8_t* pinned;
  logit_type type;
  bool ids64;

  template <class T, class IdT>
  static any_batch of(const batch_ref<T, IdT>& b) {
    static_assert(std::is_same_v<IdT, std::int32_t> || std::is_same_v<IdT, std::int64_t>, "ids: int32_t or int64_t");
    return {b.logits, b.row_stride, b.num_rows, b.valid, b.ids, b.weights, b.pinned, logit_type_of<T>(),
            std::is_same_v<IdT, std::int64_t>};
  }

  /// Warp-collective: row t into `row` (nothing if !valid).
  template <int MaxN>
  __device__ __forceinline__ void load(warp_row<MaxN>& row, int t, int n, bool valid) const {
    const std::int64_t at = t * row_stride;
    switch (type) {
      case logit_type::f32: row.load(static_cast<const float*>(logits) + at, n, valid); break;
      case logit_type::f16: row.load(static_cast<const __half*>(logits) + at, n, valid); break;
      default: row.load(static_cast<const __nv_bfloat16*>(logits) + at, n, valid); break;
    }
  }

  /// Warp-collective: row t's ids and weights from its chosen keys (warp_emit).
  template <int K>
  __device__ __forceinline__ void emit(int t, std::uint64_t chosen, int k, const route_params& p, float mass) const {
    const std::int64_t at = static_cast<std::int64_t>(t) * k;
    if (ids64)
      warp_emit<K>(chosen, k, p.score, p.renormalize, mass, static_cast<std::int64_t*>(ids) + at, weights + at);
    else
      warp_emit<K>(chosen, k, p.score, p.renormalize, mass, static_cast<std::int32_t*>(ids) + at, weights + at);
  }

  /// Warp-collective: row t as a row that does not vote (SPEC §5).
  __device__ __forceinline__ void emit_pad(int t, const int* pad, int k, const route_params& p) const {
    const std::int64_t at = static_cast<std::int64_t>(t) * k;
    if (ids64)
      warp_emit_pad(pad, k, p.pad_with_sentinel, p.sentinel_id, static_cast<std::int64_t*>(ids) + at, weights + at);
    else
      warp_emit_pad(pad, k, p.pad_with_sentinel, p.sentinel_id, static_cast<std::int32_t*>(ids) + at, weights + at);
  }
};

/// Warp-collective: row t of a batch into `row` (nothing if !valid).
template <int MaxN, class T, class IdT>
__device__ __forceinline__ void batch_load(const batch_ref<T, IdT>& b, warp_row<MaxN>& row, int t, int n, bool valid) {
  row.load(b.logits + t * b.row_stride, n, valid);
}
template <int MaxN>
__device__ __forceinline__ void batch_load(const any_batch& b, warp_row<MaxN>& row, int t, int n, bool valid) {
  b.load(row, t, n, valid);
}

/// Warp-collective: row t's ids and weights from its chosen keys (warp_emit).
template <int K, class T, class IdT>
__device__ __forceinline__ void batch_emit(const batch_ref<T, IdT>& b, int t, std::uint64_t chosen, int k,
                                           const route_params& p, float mass) {
  const std::int64_t at = static_cast<std::int64_t>(t) * k;
  warp_emit<K>(chosen, k, p.score, p.renormalize, mass, b.ids + at, b.weights + at);
}
template <int K>
__device__ __forceinline__ void batch_emit(const any_batch& b, int t, std::uint64_t chosen, int k, const route_params& p,
                                           float mass) {
  b.emit<K>(t, chosen, k, p, mass);
}

/// batch_emit with a model router's routed scaling factor (detail::scaled_emit): what a
/// router's rows write (the factor 1 leaves batch_emit's weights as they are).
template <int K, class Batch>
__device__ __forceinline__ void batch_emit_scaled(const Batch& b, int t, std::uint64_t chosen, int k,
                                                  const route_params& p, float mass) {
  const emit_scale e = scaled_emit(p, mass);
  route_params q = p;
  q.renormalize = e.renormalize;
  batch_emit<K>(b, t, chosen, k, q, e.mass);
}

/// Warp-collective: row t as a row that does not vote (SPEC §5).
template <class T, class IdT>
__device__ __forceinline__ void batch_emit_pad(const batch_ref<T, IdT>& b, int t, const int* pad, int k,
                                               const route_params& p) {
  const std::int64_t at = static_cast<std::int64_t>(t) * k;
  warp_emit_pad(pad, k, p.pad_with_sentinel, p.sentinel_id, b.ids + at, b.weights + at);
}
__device__ __forceinline__ void batch_emit_pad(const any_batch& b, int t, const int* pad, int k, const route_params& p) {
  b.emit_pad(t, pad, k, p);
}

}  // namespace detail
}  // namespace lynx
