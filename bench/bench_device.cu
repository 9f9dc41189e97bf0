// Device time of each stage, the composed step and topk_route at real model shapes, for T in
// {1, 4, 16, 32, 64, 256} and bf16/fp32 logits, timed as device_timing.hpp says (CUDA graph of
// back-to-back launches, CUDA events). bench_device_functions.cu adds the device functions in
// isolation to the same binary. Every launcher that writes ids and weights is checked against
// the host path after its timing.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <lynx/lynx.cuh>

#include "bench_inputs.hpp"
#include "bench_shapes.hpp"
#include "device_timing.hpp"

namespace {

using lynx_bench::device_buffer;
using lynx_bench::has_device;
using lynx_bench::time_graph;

enum class op { affinity_bin, score_experts, remap_topk, route_default, route_lynx, route_grid, route_fused, topk_route };

template <class T>
void run_launcher(benchmark::State& state, lynx_bench::model_shape m, op which) {
  if (!has_device()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int rows = static_cast<int>(state.range(0)), n = m.num_experts;
  lynx::route_params p = lynx_bench::shape_params(m);
  if (which != op::route_default) p.kind = lynx::policy::lynx;
  // route_grid / route_fused: the paper's policy forced onto the grid path (skipped where it
  // does not apply) or the one-block path; route_lynx takes route's own choice between them.
  const std::vector<T> host = lynx_bench::generator_logits<T>(m, rows);
  device_buffer logits(host.size() * sizeof(T)), ids(static_cast<std::size_t>(rows) * p.top_k * sizeof(int)),
      weights(static_cast<std::size_t>(rows) * p.top_k * sizeof(float)), bins(static_cast<std::size_t>(rows) * n),
      counts(static_cast<std::size_t>(lynx::max_bins) * n * 4), ranks(static_cast<std::size_t>(n) * 4);
  cudaMemcpy(logits.p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  std::size_t ws_bytes = 0, a = 0;
  lynx::route<T, int>(nullptr, ws_bytes, nullptr, n, rows, rows, p, nullptr, nullptr);
  lynx::topk_route<T, int>(nullptr, a, nullptr, n, rows, rows, p, nullptr, nullptr);
  ws_bytes = std::max(ws_bytes, a);
  lynx::remap_topk<T, int>(nullptr, a, nullptr, n, rows, rows, nullptr, nullptr, p, nullptr, nullptr);
  ws_bytes = std::max(ws_bytes, a);
  device_buffer ws(ws_bytes);
  const T* L = logits.as<T>();
  // Inputs for the later stages come from running the earlier ones once.
  lynx::affinity_bin(L, n, rows, rows, p, bins.as<std::int8_t>());
  lynx::score_experts(bins.as<std::int8_t>(), rows, p, counts.as<std::int32_t>(), ranks.as<std::int32_t>());
  cudaDeviceSynchronize();
  time_graph(state, [&](cudaStream_t s) -> cudaError_t {
    std::size_t bytes = ws_bytes;
    switch (which) {
      case op::affinity_bin: return lynx::affinity_bin(L, n, rows, rows, p, bins.as<std::int8_t>(), s);
      case op::score_experts:
        return lynx::score_experts(bins.as<std::int8_t>(), rows, p, counts.as<std::int32_t>(), ranks.as<std::int32_t>(), s);
      case op::remap_topk:
        return lynx::remap_topk(ws.p, bytes, L, n, rows, rows, bins.as<std::int8_t>(), ranks.as<std::int32_t>(), p,
                                ids.as<int>(), weights.as<float>(), s);
      case op::route_default:
      case op::route_lynx: return lynx::route(ws.p, bytes, L, n, rows, rows, p, ids.as<int>(), weights.as<float>(), s);
      case op::route_grid:
      case op::route_fused:
        return lynx::detail::route_with(which == op::route_grid ? lynx::detail::decode_choice::grid
                                                                : lynx::detail::decode_choice::fused,
                                        ws.p, bytes,
                                        lynx::batch_ref<T, int>{L, n, rows, rows, ids.as<int>(), weights.as<float>()}, p,
                                        lynx::sorted_layout_ref{}, s);
      case op::topk_route: return lynx::topk_route(ws.p, bytes, L, n, rows, rows, p, ids.as<int>(), weights.as<float>(), s);
    }
    return cudaErrorInvalidValue;
  }, [&]() -> const char* {
    if (which == op::affinity_bin || which == op::score_experts) return nullptr;  // no ids (the device tests check them)
    // remap_topk from the device stages' bins and ranks is route's result (bitwise the host's).
    const std::size_t slots = static_cast<std::size_t>(rows) * p.top_k;
    std::vector<int> got(slots), want(slots);
    std::vector<float> got_w(slots), want_w(slots);
    cudaMemcpy(got.data(), ids.p, slots * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(got_w.data(), weights.p, slots * sizeof(float), cudaMemcpyDeviceToHost);
    const lynx::batch_ref<T, int> hb{host.data(), n, rows, rows, want.data(), want_w.data()};
    if ((which == op::topk_route ? lynx::host::topk_route(hb, p) : lynx::host::route(hb, p)) != lynx::status::success)
      return "host path failed";
    if (got != want) return "ids differ from the host path's";
    for (std::size_t i = 0; i < slots; ++i)
      if (!(std::fabs(got_w[i] - want_w[i]) <= 2e-6f)) return "weights differ from the host path's";
    return nullptr;
  });
}

const int registered_launchers = [] {
  const std::pair<op, const char*> ops[] = {{op::affinity_bin, "affinity_bin"}, {op::score_experts, "score_experts"},
                                            {op::remap_topk, "remap_topk"},     {op::route_lynx, "route_lynx"},
                                            {op::route_default, "route_default"}, {op::route_grid, "route_grid"},
                                            {op::route_fused, "route_fused"},
                                            {op::topk_route, "topk_route"}};
  for (const auto& m : lynx_bench::model_shapes)
    for (const auto& [which, name] : ops)
      for (const bool bf16 : {true, false}) {
        const std::string label = std::string("device/") + name + "/" + m.name + (bf16 ? "/bf16" : "/fp32");
        auto* b = bf16 ? benchmark::RegisterBenchmark(label.c_str(), run_launcher<__nv_bfloat16>, m, which)
                       : benchmark::RegisterBenchmark(label.c_str(), run_launcher<float>, m, which);
        for (int t : lynx_bench::batch_sizes) b->Arg(t);
        b->UseManualTime()->Unit(benchmark::kMicrosecond);
      }
  return 0;
}();

}  // namespace

namespace lynx_one_call {
int run(int argc, char** argv);  // one_call.cu, in this program's unit
}

// Google Benchmark's main, or with --one-call first, one routing call and nothing else
// (one_call.cu: for cycle-level simulators and ncu).
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--one-call") return lynx_one_call::run(argc - 1, argv + 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
