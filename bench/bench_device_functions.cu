// The public device functions in isolation (the design card's microbenchmark kernels), at the
// benchmark shapes for T in {1, 4, 16, 32, 64, 256}, fp32 logits, beside the launchers in the same
// binary:
// - warp_topk: a warp per row (warp_row::load + warp_topk<K>), rows across blocks, as topk_route
//   and the fused kernel's first phase run it;
// - block_score: one block bins every row (warp_affinity_bin), counts the batch-wide histogram
//   (block_score_experts::add_row) and ranks the experts (block_score_experts::ranks);
// - block_order: the same, with the experts' order codes instead of the ranks
//   (block_score_experts::order_codes), as the fused kernel's lynx policy does.
// The tier is the one lynx::route dispatches for the shape.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include <lynx/lynx.cuh>

#include "bench_inputs.hpp"
#include "bench_shapes.hpp"
#include "device_timing.hpp"

namespace {

namespace d = lynx::detail;

constexpr int topk_block_threads = 256;

template <int MaxN, int K>
__global__ void __launch_bounds__(topk_block_threads)
    warp_topk_bench_kernel(const float* logits, int n, int rows, int k, std::uint64_t* out) {
  const int t = blockIdx.x * (topk_block_threads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (t >= rows) return;
  lynx::warp_row<MaxN> row;
  row.load(logits + static_cast<std::int64_t>(t) * n, n, true);
  const std::uint64_t key = lynx::warp_topk<K>(row.key, k);
  if (d::lane_id() < k) out[static_cast<std::int64_t>(t) * k + d::lane_id()] = key;
}

template <int MaxN, int Threads>
__global__ void __launch_bounds__(Threads, 1)
    block_score_bench_kernel(const float* logits, int n, int rows, float alpha, int depth, bool codes,
                             std::int32_t* ranks) {
  using score_t = lynx::block_score_experts<MaxN, Threads>;
  __shared__ typename score_t::TempStorage temp;
  score_t score(temp, n, depth + 1);
  score.init();
  __syncthreads();
  for (int t = static_cast<int>(threadIdx.x) / 32; t < rows; t += Threads / 32) {
    lynx::warp_row<MaxN> row;
    row.load(logits + static_cast<std::int64_t>(t) * n, n, true);
    std::int8_t q[MaxN / 32];
    lynx::warp_affinity_bin(row, alpha, depth, q);
    score.add_row(q);
  }
  __syncthreads();
  if (codes)
    score.order_codes(rows, reinterpret_cast<std::uint32_t*>(ranks));
  else
    score.ranks(rows, ranks);
}

enum class fn { warp_topk, block_score, block_order };

void run_device_function(benchmark::State& state, lynx_bench::model_shape m, fn which) {
  if (!lynx_bench::has_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int rows = static_cast<int>(state.range(0)), n = m.num_experts, k = m.top_k;
  const lynx::route_params p = lynx_bench::shape_params(m);
  const std::vector<float> host = lynx_bench::generator_logits(m, rows);
  lynx_bench::device_buffer logits(sizeof(float) * rows * n), keys(sizeof(std::uint64_t) * rows * k),
      ranks(sizeof(std::int32_t) * n);
  cudaMemcpy(logits.p, host.data(), sizeof(float) * rows * n, cudaMemcpyHostToDevice);
  const float* L = logits.as<float>();
  const int depth = d::bin_depth(p.beta);
  lynx_bench::time_graph(state, [&](cudaStream_t s) -> cudaError_t {
    return d::dispatch_tier<d::fused_max_experts>(d::choose_tier(n, k), [&](auto max_n, auto max_k) {
      constexpr int MaxN = decltype(max_n)::value, K = decltype(max_k)::value;
      if (which == fn::warp_topk)
        warp_topk_bench_kernel<MaxN, K><<<(rows + 7) / 8, topk_block_threads, 0, s>>>(L, n, rows, k,
                                                                                     keys.as<std::uint64_t>());
      else
        block_score_bench_kernel<MaxN, d::fused_threads(MaxN)>
            <<<1, d::fused_threads(MaxN), 0, s>>>(L, n, rows, p.alpha, depth, which == fn::block_order,
                                                  ranks.as<std::int32_t>());
      return cudaGetLastError();
    });
  });
}

const int registered_device_functions = [] {
  for (const auto& m : lynx_bench::model_shapes)
    for (const auto& [which, name] : {std::pair{fn::warp_topk, "warp_topk"}, std::pair{fn::block_score, "block_score"},
                                      std::pair{fn::block_order, "block_order"}}) {
      const std::string label = std::string("device_fn/") + name + "/" + m.name + "/fp32";
      auto* b = benchmark::RegisterBenchmark(label.c_str(), run_device_function, m, which);
      for (int t : lynx_bench::batch_sizes) b->Arg(t);
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  return 0;
}();

}  // namespace
