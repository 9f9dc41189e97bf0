#pragma once
// The per-call view of one batch (cuCollections' *_ref idea): what changes every decode step,
// small enough that the kernels take it by value (the launchers and the host path take a
// const reference). route_params holds what the
// model and the policy fix; this holds the data.

#include <cstdint>

#include "detail/config.hpp"

namespace lynx {

/// The number of valid rows B: an immediate, or a device pointer that a CUDA graph replay
/// may change without re-capture (FlashInfer style). Rows B .. num_rows-1 are padding.
/// A count given by pointer must point somewhere: a null one is rejected (null_pointer) in any
/// call with rows, not read as 0 (an engine whose count buffer was never set would otherwise
/// keep stale ids in every replay).
struct token_count {
  int value = 0;
  bool by_pointer = false;  // given by pointer (device_ptr, possibly null), not by value
  const int* device_ptr = nullptr;
  LYNX_HD token_count(int v) : value(v) {}                                 // NOLINT: an int converts implicitly
  LYNX_HD token_count(const int* p) : by_pointer(true), device_ptr(p) {}  // NOLINT
  /// B clamped to [0, num_rows]. Dereferences device_ptr: call it where that memory lives
  /// (in a kernel for the launchers, on the host for lynx::host).
  LYNX_HD int rows(int num_rows) const {
    const int b = device_ptr ? *device_ptr : value;
    return b < 0 ? 0 : (b > num_rows ? num_rows : b);
  }
};

/// One batch (a kernel may build one too): router logits [num_rows x N] (row-major, row_stride >= N) in, ids and fp32
/// weights [num_rows x k] out. Non-owning; device memory for the launchers and kernels, host
/// memory for lynx::host.
template <class T, class IdT>
struct batch_ref {
  const T* logits = nullptr;
  std::int64_t row_stride = 0;
  int num_rows = 0;
  token_count valid = 0;
  IdT* ids = nullptr;
  float* weights = nullptr;
  /// Optional per-row mask: nonzero rows (prefill or chunked-prefill tokens in the same step)
  /// keep their plain top-k; their experts join K, so the other tokens may use them. A budget
  /// limit counts them, and when they alone exceed it, K is just them.
  const std::uint8_t* pinned = nullptr;
};

}  // namespace lynx
