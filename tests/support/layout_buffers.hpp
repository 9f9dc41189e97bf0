#pragma once
// Every array of one sorted layout in host memory, for the layout tests (host and device).

#include <cstdint>
#include <vector>

#include <lynx/sorted_layout.hpp>

namespace lynx_test {

/// Every array of one layout, sized for rows * k slots over n experts, filled with a canary
/// (a value no array should keep) so that an entry left unwritten shows.
struct layout_buffers {
  static constexpr std::int32_t canary = -777;
  std::vector<std::int32_t> num_active, active, counts, offsets, slot_pos, pos_slot, sorted, blocks, post;
  lynx::sorted_layout_ref ref;
  layout_buffers(int rows, int k, int n, int block_size, const std::int32_t* map = nullptr, bool pad_sorted = false) {
    const std::int64_t slots = static_cast<std::int64_t>(rows) * k;
    num_active.assign(1, canary), active.assign(n, canary), counts.assign(n, canary), offsets.assign(n + 1, canary);
    slot_pos.assign(slots, canary), pos_slot.assign(slots, canary), post.assign(1, canary);
    if (block_size > 0) {
      sorted.assign(lynx::vllm_sorted_capacity(slots, n, block_size, pad_sorted), canary);
      blocks.assign(lynx::vllm_block_capacity(slots, n, block_size, pad_sorted), canary);
    }
    ref.expert_map = map;
    ref.num_active = num_active.data(), ref.active_experts = active.data(), ref.expert_counts = counts.data();
    ref.expert_offsets = offsets.data(), ref.slot_position = slot_pos.data(), ref.position_slot = pos_slot.data();
    ref.block_size = block_size, ref.pad_sorted_ids = pad_sorted;
    if (block_size > 0)
      ref.sorted_token_ids = sorted.data(), ref.expert_ids = blocks.data(), ref.num_tokens_post_padded = post.data();
  }
  bool operator==(const layout_buffers& o) const {
    return num_active == o.num_active && active == o.active && counts == o.counts && offsets == o.offsets &&
           slot_pos == o.slot_pos && pos_slot == o.pos_slot && sorted == o.sorted && blocks == o.blocks &&
           post == o.post;
  }
};

}  // namespace lynx_test
