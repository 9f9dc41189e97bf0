// Routing plus the expert-sorted layout (vLLM's moe_align_block_size arrays and the compact
// active-expert list), timed as device_timing.hpp says, at the benchmark shapes for T in
// {1, 4, 16, 32, 64, 256}, bf16 logits, block_size 16:
//   route            lynx::route alone (default policy; the baseline of the targets)
//   route_sorted     lynx::route writing the layout in the same launch
//   route+layout     lynx::route, then lynx::sorted_layout (the same block code, a launch of its own)
//   route+align      lynx::route, then align_kernel.cuh's kernel: a separate alignment kernel of
//                    the same output written the straightforward way (a thread per expert scans
//                    every slot; one thread scans the offsets), as engines run moe_align_block_size
// and the same four for topk_route. Each benchmark checks once, before timing, that its arrays
// equal route_sorted's (topk_route_sorted's); a mismatch skips it with an error.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <vector>

#include <lynx/lynx.cuh>

#include "align_kernel.cuh"
#include "bench_inputs.hpp"
#include "bench_shapes.hpp"
#include "device_timing.hpp"

namespace {

using lynx_bench::device_buffer;

constexpr int block_size = 16;
/// Every array of one layout in device memory.
struct layout_arrays {
  int slots, cap, max_blocks;
  device_buffer num_active, active, counts, offsets, slot_pos, pos_slot, sorted, blocks, post;
  lynx::sorted_layout_ref ref;
  layout_arrays(int rows, int k, int n)
      : slots(rows * k),
        cap(static_cast<int>(lynx::vllm_sorted_capacity(slots, n, block_size))),
        max_blocks(static_cast<int>(lynx::vllm_block_capacity(slots, n, block_size))),
        num_active(4), active(4 * n), counts(4 * n), offsets(4 * (n + 1)), slot_pos(4 * slots), pos_slot(4 * slots),
        sorted(4 * cap), blocks(4 * max_blocks), post(4) {
    ref.num_active = num_active.as<int>(), ref.active_experts = active.as<int>(), ref.expert_counts = counts.as<int>();
    ref.expert_offsets = offsets.as<int>(), ref.slot_position = slot_pos.as<int>(), ref.position_slot = pos_slot.as<int>();
    ref.block_size = block_size, ref.sorted_token_ids = sorted.as<int>(), ref.expert_ids = blocks.as<int>();
    ref.num_tokens_post_padded = post.as<int>();
  }
  std::vector<int> download(int n) const {
    std::vector<int> all;
    const auto add = [&](const device_buffer& b, std::size_t count) {
      std::vector<int> v(count);
      cudaMemcpy(v.data(), b.p, count * 4, cudaMemcpyDeviceToHost);
      all.insert(all.end(), v.begin(), v.end());
    };
    add(num_active, 1), add(active, n), add(counts, n), add(offsets, n + 1), add(slot_pos, slots);
    add(pos_slot, slots), add(sorted, cap), add(blocks, max_blocks), add(post, 1);
    return all;
  }
};

enum class variant { alone, sorted, then_layout, then_align };

void run_layout(benchmark::State& state, lynx_bench::model_shape m, bool plain, variant v) {
  if (!lynx_bench::has_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int rows = static_cast<int>(state.range(0)), n = m.num_experts, k = m.top_k;
  const lynx::route_params p = lynx_bench::shape_params(m);
  const std::vector<__nv_bfloat16> host = lynx_bench::generator_logits<__nv_bfloat16>(m, rows);
  device_buffer logits(host.size() * 2), ids(static_cast<std::size_t>(rows) * k * 4), weights(static_cast<std::size_t>(rows) * k * 4);
  cudaMemcpy(logits.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
  const lynx::batch_ref<__nv_bfloat16, int> batch{logits.as<__nv_bfloat16>(), n, rows, rows, ids.as<int>(),
                                                  weights.as<float>()};
  std::size_t ws_bytes = 0, other = 0;
  lynx::route(nullptr, ws_bytes, batch, p);
  lynx::topk_route(nullptr, other, batch, p);
  device_buffer ws(std::max(ws_bytes, other));
  ws_bytes = std::max(ws_bytes, other);
  layout_arrays out(rows, k, n), reference(rows, k, n);
  const auto routing = [&](cudaStream_t s, const lynx::sorted_layout_ref& layout) {
    std::size_t bytes = ws_bytes;
    return plain ? lynx::topk_route(ws.p, bytes, batch, p, layout, s) : lynx::route(ws.p, bytes, batch, p, layout, s);
  };
  const auto op = [&](cudaStream_t s) -> cudaError_t {
    switch (v) {
      case variant::alone: return routing(s, lynx::sorted_layout_ref{});
      case variant::sorted: return routing(s, out.ref);
      case variant::then_layout:
        if (const cudaError_t e = routing(s, lynx::sorted_layout_ref{}); e != cudaSuccess) return e;
        return lynx::sorted_layout(ids.as<int>(), rows, k, n, out.ref, s);
      case variant::then_align:
        if (const cudaError_t e = routing(s, lynx::sorted_layout_ref{}); e != cudaSuccess) return e;
        lynx_bench::align_kernel<><<<1, lynx_bench::align_threads, 0, s>>>(ids.as<int>(), out.slots, n, out.cap, out.max_blocks, out.ref);
        return cudaGetLastError();
    }
    return cudaErrorInvalidValue;
  };
  if (v != variant::alone) {  // the same arrays as the one-launch layout, or no timing
    if (routing(0, reference.ref) != cudaSuccess || op(0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      state.SkipWithError("operation failed");
      return;
    }
    if (out.download(n) != reference.download(n)) {
      state.SkipWithError("layout differs from the one-launch layout");
      return;
    }
  }
  lynx_bench::time_graph(state, op);
}

const int registered_sorted_layout = [] {
  const std::pair<variant, const char*> variants[] = {{variant::alone, ""},
                                                      {variant::sorted, "_sorted"},
                                                      {variant::then_layout, "+layout"},
                                                      {variant::then_align, "+align"}};
  for (const auto& m : lynx_bench::model_shapes)
    for (const bool plain : {false, true})
      for (const auto& [v, suffix] : variants) {
        const std::string label =
            std::string("layout/") + (plain ? "topk_route" : "route") + suffix + "/" + m.name + "/bf16";
        auto* b = benchmark::RegisterBenchmark(label.c_str(), run_layout, m, plain, v);
        for (int t : lynx_bench::batch_sizes) b->Arg(t);
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
      }
  return 0;
}();

}  // namespace
