#pragma once
// Workspace carving for the device launchers (CUB style: the caller allocates, we slice).

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../../params.hpp"
#include "dispatch.hpp"

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

/// Words of one expert bit set in global scratch (any N up to max_experts).
inline constexpr int set_words = max_experts / 32;

/// remap_topk's scratch: the four expert bit sets (active, plain, final, anchors; zeroed by
/// the launcher before use, then set with atomicOr), each row's vote, original mass and plain
/// top-k keys, and for the budget policy the token-by-expert shares, each token's k best shares
/// inside K, and the k-th of them.
struct remap_workspace {
  std::uint32_t* sets;    // 4 * set_words
  std::uint8_t* votes;    // num_rows
  float* row_mass;        // num_rows
  std::uint64_t* plain;   // num_rows * k
  float* share;           // num_rows * n (budget only)
  float* top;             // num_rows * k (budget only)
  float* kth;             // num_rows (budget only)
  remap_workspace(workspace_carver& c, int num_rows, int n, int k, bool budget)
      : sets(c.take<std::uint32_t>(4 * set_words)),
        votes(c.take<std::uint8_t>(num_rows)),
        row_mass(c.take<float>(num_rows)),
        plain(c.take<std::uint64_t>(static_cast<std::size_t>(num_rows) * k)),
        share(c.take<float>(budget ? static_cast<std::size_t>(num_rows) * n : 0)),
        top(c.take<float>(budget ? static_cast<std::size_t>(num_rows) * k : 0)),
        kth(c.take<float>(budget ? num_rows : 0)) {}
  LYNX_HD std::uint32_t* active() const { return sets; }
  LYNX_HD std::uint32_t* plain_set() const { return sets + set_words; }
  LYNX_HD std::uint32_t* final_set() const { return sets + 2 * set_words; }
  LYNX_HD std::uint32_t* anchors() const { return sets + 3 * set_words; }
};

/// topk_route's scratch: the plain bit set and the count of finished blocks (zeroed by the
/// launcher), and the votes (the last block pads the rows that do not vote).
struct topk_workspace {
  std::uint32_t* state;  // set_words of the plain set, then the block counter
  std::uint8_t* votes;   // num_rows
  topk_workspace(workspace_carver& c, int num_rows)
      : state(c.take<std::uint32_t>(set_words + 1)), votes(c.take<std::uint8_t>(num_rows)) {}
  LYNX_HD std::uint32_t* plain_set() const { return state; }
  LYNX_HD std::uint32_t* blocks_done() const { return state + set_words; }
};

/// The grid path's global state, zeroed by the launcher in one memset: two counters (barrier
/// arrivals, finished blocks), the sets K, plain and final, and the lynx policy's counts.
struct grid_state {
  std::uint32_t* words;
  LYNX_HD static std::size_t size_words(int n, int nbins) {
    return 2 + 3 * set_words + static_cast<std::size_t>(nbins) * n;
  }
  LYNX_HD unsigned int* arrived() const { return words; }
  LYNX_HD unsigned int* done() const { return words + 1; }
  LYNX_HD std::uint32_t* active() const { return words + 2; }
  LYNX_HD std::uint32_t* plain_set() const { return words + 2 + set_words; }
  LYNX_HD std::uint32_t* final_set() const { return words + 2 + 2 * set_words; }
  LYNX_HD std::int32_t* counts() const { return reinterpret_cast<std::int32_t*>(words + 2 + 3 * set_words); }
};

/// route's scratch: the stage outputs of the per-stage path (lynx policy), then remap_topk's
/// scratch, then the grid path's state (where the policy and tier allow it at any row count:
/// grid_route_tier, so that the size grows with the rows). The
/// fused path uses the plain keys and the budget scratch.
struct route_workspace {
  std::int8_t* bins;     // num_rows * n
  std::int32_t* counts;  // max_bins * n
  std::int32_t* ranks;   // n
  remap_workspace remap;
  grid_state grid;       // grid_state::size_words(n, nbins) words, or null
  route_workspace(workspace_carver& c, int num_rows, int n, int k, bool lynx, bool budget, std::size_t grid_words = 0)
      : bins(c.take<std::int8_t>(lynx ? static_cast<std::size_t>(num_rows) * n : 0)),
        counts(c.take<std::int32_t>(lynx ? static_cast<std::size_t>(max_bins) * n : 0)),
        ranks(c.take<std::int32_t>(lynx ? n : 0)),
        remap(c, num_rows, n, k, budget),
        grid{grid_words ? c.take<std::uint32_t>(grid_words) : nullptr} {}
  /// What lynx::route carves for a call with p (for the policy it runs: effective_params).
  route_workspace(workspace_carver& c, int num_rows, const route_params& p)
      : route_workspace(c, num_rows, effective_params(p), runs{}) {}
  static std::size_t grid_words(const route_params& p) { return grid_words_of(effective_params(p)); }
  /// The histogram digits the grid path counts (none for the piggyback policy).
  static int grid_bins(const route_params& p) { return grid_bins_of(effective_params(p)); }

 private:
  struct runs {};  // q is already effective_params' result
  route_workspace(workspace_carver& c, int num_rows, const route_params& q, runs)
      : route_workspace(c, num_rows, q.num_experts, q.top_k, q.kind == policy::lynx, q.kind == policy::budget,
                        grid_words_of(q)) {}
  static std::size_t grid_words_of(const route_params& q) {
    return grid_route_tier(q) ? grid_state::size_words(q.num_experts, grid_bins_of(q)) : 0;
  }
  static int grid_bins_of(const route_params& q) { return q.kind == policy::lynx ? bin_depth(q.beta) + 1 : 0; }
};

}  // namespace detail
}  // namespace lynx
