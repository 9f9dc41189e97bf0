// topk_route with each model's own router (lynx::model_routings: DeepSeek-V3/R1, Kimi-K2,
// GLM-4.5, MiniMax-M2, DeepSeek-V2, ...), on the device (bf16 logits; CUDA-graph replay and CUDA
// events as device_timing.hpp says) for T in {1, 4, 16, 32, 64, 256}, beside plain top-k at the same
// (N, k); and route with Lynx's default for the model (default_params(model): budget 0.94 on the
// model's choice, the group limit kept) beside the same default on a plain router. The bias is
// a fixed pseudo-random vector (N(0, 0.5)), as a trained one is dense.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>

#include <random>
#include <string>
#include <vector>

#include <lynx/lynx.cuh>

#include "bench_inputs.hpp"
#include "device_timing.hpp"

namespace {

using lynx_bench::device_buffer;

void run_router_step(benchmark::State& state, lynx::model_routing m, bool own_router, bool lynx_step) {
  if (!lynx_bench::has_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int rows = static_cast<int>(state.range(0)), n = m.num_experts, k = m.top_k;
  const std::vector<__nv_bfloat16> host =
      lynx_bench::generator_logits<__nv_bfloat16>(lynx_bench::model_shape{m.name.data(), n, k, m.score}, rows);
  std::vector<float> bias(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& b : bias) b = d(rng);
  device_buffer logits(host.size() * 2), ids(static_cast<std::size_t>(rows) * k * 4),
      weights(static_cast<std::size_t>(rows) * k * 4), d_bias(static_cast<std::size_t>(n) * 4);
  cudaMemcpy(logits.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(d_bias.p, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice);
  lynx::route_params p = lynx_step ? lynx::default_params(m, d_bias.as<float>()) : lynx::model_params(m, d_bias.as<float>());
  if (!own_router) p.router = lynx::model_router{};
  const lynx::batch_ref<__nv_bfloat16, int> batch{logits.as<__nv_bfloat16>(), n, rows, rows, ids.as<int>(),
                                                  weights.as<float>()};
  const auto call = [&](void* ws, std::size_t& bytes, cudaStream_t s) {
    return lynx_step ? lynx::route(ws, bytes, batch, p, s) : lynx::topk_route(ws, bytes, batch, p, s);
  };
  std::size_t ws_bytes = 0;
  call(nullptr, ws_bytes, 0);
  device_buffer ws(ws_bytes);
  lynx_bench::time_graph(state, [&](cudaStream_t s) {
    std::size_t bytes = ws_bytes;
    return call(ws.p, bytes, s);
  });
}

const int registered_router = [] {
  for (const bool lynx_step : {false, true})
    for (const auto& m : lynx::model_routings)
      for (const bool own : {true, false}) {
        const std::string label = std::string("router/") + (lynx_step ? "route_default" : "topk_route") +
                                  (own ? "_model/" : "_plain/") + std::string(m.name) + "/bf16";
        auto* b = benchmark::RegisterBenchmark(label.c_str(), run_router_step, m, own, lynx_step);
        for (int t : lynx_bench::batch_sizes) b->Arg(t);
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
      }
  return 0;
}();

}  // namespace
