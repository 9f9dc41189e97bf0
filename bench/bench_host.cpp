// The host path at real model shapes (one CPU core): lynx::host::route and topk_route.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "bench_shapes.hpp"

namespace {

std::vector<float> logits_for(int rows, int n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(rows) * n);
  for (float& x : v) x = normal(rng);
  return v;
}

template <bool Lynx>
void route_host(benchmark::State& state, lynx_bench::model_shape m) {
  const int rows = static_cast<int>(state.range(0));
  const lynx::route_params p = lynx_bench::shape_params(m);
  const auto logits = logits_for(rows, m.num_experts);
  std::vector<int> ids(static_cast<std::size_t>(rows) * p.top_k);
  std::vector<float> w(ids.size());
  for (auto _ : state) {
    const lynx::status s = Lynx ? lynx::host::route(logits.data(), p.num_experts, rows, rows, p, ids.data(), w.data())
                                : lynx::host::topk_route(logits.data(), p.num_experts, rows, rows, p, ids.data(), w.data());
    if (s != lynx::status::success) state.SkipWithError(lynx::status_string(s));
    benchmark::DoNotOptimize(ids.data());
    benchmark::ClobberMemory();
  }
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(rows) * state.iterations(), benchmark::Counter::kIsRate);
}

const int registered = [] {
  for (const auto& m : lynx_bench::model_shapes)
    for (int t : lynx_bench::batch_sizes) {
      benchmark::RegisterBenchmark((std::string("host/route/") + m.name).c_str(), route_host<true>, m)->Arg(t);
      benchmark::RegisterBenchmark((std::string("host/topk_route/") + m.name).c_str(), route_host<false>, m)->Arg(t);
    }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
