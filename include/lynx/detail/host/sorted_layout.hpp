#pragma once
// The host path's expert-sorted layout (sorted_layout.hpp's definition), a counting sort in
// slot order: the oracle that the kernels' layout is compared with.

#include <cstdint>
#include <vector>

#include "../../sorted_layout.hpp"

namespace lynx {
namespace host {
namespace detail {

/// Writes every requested array of `layout` for rows * k slots (ids == null: no slot takes part).
template <class IdT>
void sorted_layout_body(const IdT* ids, int rows, int k, int n, const sorted_layout_ref& out) {
  namespace d = lynx::detail;
  const int slots = rows * k, bs = out.block_size;
  std::vector<int> local(static_cast<std::size_t>(slots), -1), count(n, 0), start(n, 0), pstart(n, 0);
  for (int s = 0; s < slots && ids; ++s)
    if ((local[s] = d::layout_expert(ids[s], n, out.expert_map)) >= 0) ++count[local[s]];
  int total = 0, padded = 0, active = 0;
  for (int e = 0; e < n; ++e) {
    start[e] = total, pstart[e] = padded;
    if (count[e] > 0) {
      if (out.active_experts) out.active_experts[active] = e;
      if (out.expert_counts) out.expert_counts[active] = count[e];
      if (out.expert_offsets) out.expert_offsets[active] = total;
      if (out.expert_ids)
        for (int b = padded / bs; b < (padded + d::padded_run(count[e], bs)) / bs; ++b) out.expert_ids[b] = e;
      ++active;
    }
    total += count[e], padded += d::padded_run(count[e], bs);
  }
  for (int i = active; i < n; ++i) {
    if (out.active_experts) out.active_experts[i] = -1;
    if (out.expert_counts) out.expert_counts[i] = 0;
  }
  if (out.expert_offsets)
    for (int i = active; i <= n; ++i) out.expert_offsets[i] = total;
  if (out.num_active) *out.num_active = active;
  if (out.position_slot)
    for (int i = total; i < slots; ++i) out.position_slot[i] = -1;
  if (out.wants_vllm()) {
    const std::int64_t cap = vllm_sorted_capacity(slots, n, bs, out.pad_sorted_ids);
    if (out.sorted_token_ids)
      for (std::int64_t i = 0; i < cap; ++i) out.sorted_token_ids[i] = slots;  // vLLM's sentinel
    if (out.expert_ids)
      for (std::int64_t b = padded / bs; b < (cap + bs - 1) / bs; ++b) out.expert_ids[b] = -1;
    if (out.num_tokens_post_padded) *out.num_tokens_post_padded = padded;
  }
  // The slots in flat order, each at its expert's next place: stable by construction.
  std::vector<int> placed(n, 0);
  for (int s = 0; s < slots; ++s) {
    const int e = local[s];
    if (e < 0) {
      if (out.slot_position) out.slot_position[s] = -1;
      continue;
    }
    const int r = placed[e]++;
    if (out.slot_position) out.slot_position[s] = start[e] + r;
    if (out.position_slot) out.position_slot[start[e] + r] = s;
    if (out.sorted_token_ids) out.sorted_token_ids[pstart[e] + r] = s;
  }
}

}  // namespace detail
}  // namespace host
}  // namespace lynx
