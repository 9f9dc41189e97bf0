#pragma once
// Workspace carving for the device launchers (CUB style: the caller allocates, we slice).

#include <cstddef>
#include <cstdint>

#include "config.hpp"

namespace lynx {
namespace detail {

inline constexpr std::size_t workspace_alignment = 256;

inline std::size_t align_up(std::size_t x) {
  return (x + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
}

/// Bump allocator over a caller-owned buffer; with a null buffer it only measures. As CUB
/// does, it aligns the buffer's start itself, so any pointer works, and the size it reports
/// includes the slack for that.
struct workspace_carver {
  char* base;             // the caller's buffer aligned up (null: measuring)
  std::size_t skip = 0;   // bytes from the caller's pointer to base
  std::size_t used = 0;   // bytes taken from base
  explicit workspace_carver(void* workspace)
      : base(static_cast<char*>(workspace)),
        skip(workspace ? align_up(reinterpret_cast<std::uintptr_t>(workspace)) -
                             reinterpret_cast<std::uintptr_t>(workspace)
                       : 0) {
    if (base) base += skip;
  }
  template <class T>
  T* take(std::size_t count) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += align_up(count * sizeof(T));
    return p;
  }
  /// What a size query reports: enough for every region from any starting address.
  std::size_t required_bytes() const { return used + workspace_alignment - 1; }
  /// Whether a buffer of `bytes` at the caller's pointer holds every region.
  bool fits(std::size_t bytes) const { return bytes >= skip + used; }
};

/// remap_topk's scratch: per-expert flags (active, plain, final, anchor; uint32 for atomicOr),
/// per-row vote and mass, and for the budget policy the expert-by-token shares and each
/// token's k best.
struct remap_workspace {
  std::uint32_t* flags;  // 4 * n, zeroed by the launcher before use
  std::uint8_t* votes;   // num_rows
  float* row_mass;       // num_rows
  float* share;          // n * num_rows (budget only)
  float* top;            // num_rows * k (budget only)
  int n;
  remap_workspace(workspace_carver& c, int num_rows, int n, int k, bool budget)
      : flags(c.take<std::uint32_t>(4 * static_cast<std::size_t>(n))),
        votes(c.take<std::uint8_t>(num_rows)),
        row_mass(c.take<float>(num_rows)),
        share(c.take<float>(budget ? static_cast<std::size_t>(num_rows) * n : 0)),
        top(c.take<float>(budget ? static_cast<std::size_t>(num_rows) * k : 0)),
        n(n) {}
  std::uint32_t* in_active() const { return flags; }
  std::uint32_t* in_plain() const { return flags + n; }
  std::uint32_t* in_final() const { return flags + 2 * n; }
  std::uint32_t* anchors() const { return flags + 3 * n; }
};

/// topk_route's scratch: the plain flags and the votes (it only pads).
struct topk_workspace {
  std::uint32_t* in_plain;  // n, zeroed by the launcher before use
  std::uint8_t* votes;      // num_rows
  topk_workspace(workspace_carver& c, int num_rows, int n)
      : in_plain(c.take<std::uint32_t>(n)), votes(c.take<std::uint8_t>(num_rows)) {}
};

/// route's scratch: the stage outputs, then remap_topk's scratch. The fused path uses only
/// bins (lynx) and the budget scratch.
struct route_workspace {
  std::int8_t* bins;     // num_rows * n
  std::int32_t* counts;  // max_bins * n
  std::int32_t* ranks;   // n
  remap_workspace remap;
  route_workspace(workspace_carver& c, int num_rows, int n, int k, bool lynx, bool budget)
      : bins(c.take<std::int8_t>(lynx ? static_cast<std::size_t>(num_rows) * n : 0)),
        counts(c.take<std::int32_t>(lynx ? static_cast<std::size_t>(max_bins) * n : 0)),
        ranks(c.take<std::int32_t>(lynx ? n : 0)),
        remap(c, num_rows, n, k, budget) {}
};

}  // namespace detail
}  // namespace lynx
