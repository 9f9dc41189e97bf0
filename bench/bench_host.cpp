// The host path at real model shapes (one CPU core): lynx::host::route with the default policy
// and with the paper's policy (lynx, the default alpha/beta and anchor), topk_route, and
// topk_route and the default policy with each model's own router.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "../examples/common/trace.hpp"
#include "bench_shapes.hpp"

namespace {

// Router logits with real statistics: the generator fitted to the FLAME decode trace (README),
// at the model's N and k; rows from the middle layer.
std::vector<float> logits_for(int rows, int n, int k) {
  lynx_examples::generator_options g;
  g.num_experts = n;
  g.top_k = k;
  g.batches = 1;
  g.batch_tokens = rows;
  const lynx_examples::trace tr = lynx_examples::generate_trace(g);
  const float* mid = tr.row(tr.layers / 2, 0);
  return std::vector<float>(mid, mid + static_cast<std::size_t>(rows) * n);
}

/// The timed loop: route (Lynx) or topk_route on `rows` rows of logits with p.
template <bool Lynx>
void time_calls(benchmark::State& state, const std::vector<float>& logits, int rows, const lynx::route_params& p) {
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

enum class which { topk, lynx_policy, default_policy };

template <which W>
void route_host(benchmark::State& state, lynx_bench::model_shape m) {
  const int rows = static_cast<int>(state.range(0));
  lynx::route_params p = lynx_bench::shape_params(m);
  if (W == which::lynx_policy) p.kind = lynx::policy::lynx;
  constexpr bool Lynx = W != which::topk;
  const auto logits = logits_for(rows, m.num_experts, m.top_k);
  time_calls<Lynx>(state, logits, rows, p);
}

// topk_route with each model's own router (lynx::model_routings), a fixed N(0, 0.5) bias; or
// route with Lynx's default for that router (default_params(model), docs/ROUTERS.md).
template <bool Lynx>
void router_host(benchmark::State& state, lynx::model_routing m) {
  const int rows = static_cast<int>(state.range(0));
  std::vector<float> bias(m.num_experts);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& b : bias) b = d(rng);
  const lynx::route_params p = Lynx ? lynx::default_params(m, bias.data()) : lynx::model_params(m, bias.data());
  const auto logits = logits_for(rows, m.num_experts, m.top_k);
  time_calls<Lynx>(state, logits, rows, p);
}

const int registered = [] {
  for (const auto& m : lynx::model_routings)
    for (int t : lynx_bench::batch_sizes) {
      benchmark::RegisterBenchmark((std::string("host/topk_route_model/") + std::string(m.name)).c_str(), router_host<false>, m)
          ->Arg(t);
      benchmark::RegisterBenchmark((std::string("host/route_model_default/") + std::string(m.name)).c_str(),
                                   router_host<true>, m)
          ->Arg(t);
    }
  for (const auto& m : lynx_bench::model_shapes)
    for (int t : lynx_bench::batch_sizes) {
      benchmark::RegisterBenchmark((std::string("host/route_default/") + m.name).c_str(), route_host<which::default_policy>, m)->Arg(t);
      benchmark::RegisterBenchmark((std::string("host/route_lynx/") + m.name).c_str(), route_host<which::lynx_policy>, m)->Arg(t);
      benchmark::RegisterBenchmark((std::string("host/topk_route/") + m.name).c_str(), route_host<which::topk>, m)->Arg(t);
    }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
