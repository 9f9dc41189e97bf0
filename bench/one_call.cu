// lynx_one_call: exactly one routing call on the device, at a model shape, and nothing else on
// the GPU (no thrust, no warm-up): what a cycle-level simulator's total cycle count should
// measure. The CMake build runs it as `lynx_bench_device --one-call ARGS` (this file is part of
// that program's unit, LYNX_ONE_CALL_NO_MAIN, so its kernels are compiled once for both);
// compiled alone (a simulator's build) it is the program `lynx_one_call ARGS`. Logits come
// from the built-in generator (its last layer) at the shape's N; the call's ids and weights
// (within 2e-6) are checked against the host path. On a GPU it also prints the
// CUDA-event time of the one call (cold: launch overhead included; lynx_bench_device is the
// benchmark).
//
//   lynx_one_call ENTRY N K T [lynx|budget [MODEL]]   (lynx_bench_device --one-call ENTRY ...)
//                                              ENTRY: route | topk_route | route_sorted |
//                                              topk_route_sorted (the call also writes the
//                                              sorted layout, block_size 16, every array;
//                                              checked against the host path too) |
//                                              route+align | topk_route+align (the call, then
//                                              align_kernel.cuh's separate kernel for the same
//                                              arrays) | route_grid (route forced onto the
//                                              grid path: lynx::detail::route_with)
//                                              MODEL: a name of lynx::model_routings: its own
//                                              router (a normal(0, 0.5) correction bias where
//                                              it has one, as bench_router.cu's), N and K
//                                              its own (the N K given are ignored)
//   LYNX_ONE_CALL_VALID=B (environment): only rows 0..B-1 are valid, the rest padding (so the
//   call pads them); B = T without it. LYNX_ONE_CALL_BETA=b: the lynx policy's beta (default 2;
//   the Qwen2 preset's is 4).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <lynx/lynx.cuh>

#include "../examples/common/trace.hpp"
#include "align_kernel.cuh"

namespace lynx_one_call {

/// The program: argv[1..] are ENTRY N K T [policy [MODEL]].
int run(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: lynx_one_call (or lynx_bench_device --one-call) route|topk_route|route_sorted|topk_route_sorted|route+align|topk_route+align|route_grid N K T [lynx|budget [MODEL]]\n");
    return 2;
  }
  const auto model = argc > 6 ? lynx::find_model(argv[6]) : std::nullopt;
  if (argc > 6 && !model) {
    std::fprintf(stderr, "unknown model %s\n", argv[6]);
    return 2;
  }
  const bool topk = std::strncmp(argv[1], "topk_route", 10) == 0, align = std::strstr(argv[1], "+align") != nullptr,
             sorted = align || std::strstr(argv[1], "_sorted") != nullptr,
             grid = std::strcmp(argv[1], "route_grid") == 0;
  const int n = model ? model->num_experts : std::atoi(argv[2]), k = model ? model->top_k : std::atoi(argv[3]),
            rows = std::atoi(argv[4]);
  const char* valid_env = std::getenv("LYNX_ONE_CALL_VALID");
  const int valid = valid_env ? std::atoi(valid_env) : rows;
  lynx::route_params p = lynx::default_params(n, k);
  p.renormalize = true;
  std::vector<float> bias;
  float* d_bias = nullptr;
  if (model) {
    if (model->biased) {
      std::mt19937 rng(1);
      std::normal_distribution<float> d(0.0f, 0.5f);
      for (int e = 0; e < n; ++e) bias.push_back(d(rng));
      cudaMalloc(&d_bias, sizeof(float) * n);
      cudaMemcpy(d_bias, bias.data(), sizeof(float) * n, cudaMemcpyHostToDevice);
    }
    p = topk ? lynx::model_params(*model, d_bias) : lynx::default_params(*model, d_bias);
  }
  if (argc > 5 && std::strcmp(argv[5], "lynx") == 0) p.kind = lynx::policy::lynx;
  if (const char* beta = std::getenv("LYNX_ONE_CALL_BETA")) p.beta = std::atoi(beta);
  lynx_examples::generator_options g;
  g.layers = 8;
  g.batches = 1;
  g.batch_tokens = rows;
  g.num_experts = n;
  g.top_k = k;
  const auto tr = lynx_examples::generate_trace(g);
  const float* host_logits = tr.logits.data() + static_cast<std::size_t>(7) * rows * n;  // the peaked last layer

  std::size_t bytes = 0;
  const cudaError_t query = topk ? lynx::topk_route<float, int>(nullptr, bytes, nullptr, n, rows, rows, p, nullptr, nullptr)
                                 : lynx::route<float, int>(nullptr, bytes, nullptr, n, rows, rows, p, nullptr, nullptr);
  if (query != cudaSuccess) {
    std::fprintf(stderr, "workspace query: %s\n", cudaGetErrorString(query));
    return 1;
  }
  float *logits = nullptr, *weights = nullptr;
  int* ids = nullptr;
  void* ws = nullptr;
  cudaMalloc(&logits, sizeof(float) * rows * n);
  cudaMalloc(&weights, sizeof(float) * rows * k);
  cudaMalloc(&ids, sizeof(int) * rows * k);
  cudaMalloc(&ws, bytes);
  cudaMemcpy(logits, host_logits, sizeof(float) * rows * n, cudaMemcpyHostToDevice);
  // The sorted layout's arrays, one allocation: sizes of sorted_layout.hpp, block_size 16.
  const int slots = rows * k, bs = 16, cap = static_cast<int>(lynx::vllm_sorted_capacity(slots, n, bs)),
            blocks = static_cast<int>(lynx::vllm_block_capacity(slots, n, bs));
  const int sizes[] = {1, n, n, n + 1, slots, slots, cap, blocks, 1};
  int total = 0;
  for (int c : sizes) total += c;
  int* arrays = nullptr;
  if (sorted) cudaMalloc(&arrays, sizeof(int) * total);
  std::vector<int> host_arrays(total, -9);
  const auto carve = [&](int* base) {
    lynx::sorted_layout_ref r;
    if (!sorted) return r;
    int* at = base;
    int** fields[] = {&r.num_active, &r.active_experts, &r.expert_counts, &r.expert_offsets, &r.slot_position,
                      &r.position_slot, &r.sorted_token_ids, &r.expert_ids, &r.num_tokens_post_padded};
    for (int i = 0; i < 9; ++i) *fields[i] = at, at += sizes[i];
    r.block_size = bs;
    return r;
  };
  const lynx::sorted_layout_ref layout = carve(arrays), host_layout = carve(host_arrays.data());
  const lynx::batch_ref<float, int> batch{logits, n, rows, valid, ids, weights};
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  const lynx::sorted_layout_ref in_call = align ? lynx::sorted_layout_ref{} : layout;
  const auto choice = grid ? lynx::detail::decode_choice::grid : lynx::detail::decode_choice::automatic;
  cudaError_t e = topk ? lynx::topk_route(ws, bytes, batch, p, in_call)
                       : lynx::detail::route_with(choice, ws, bytes, batch, p, in_call, cudaStream_t{});
  if (e == cudaSuccess && align) {
    lynx_bench::align_kernel<><<<1, lynx_bench::align_threads>>>(ids, slots, n, cap, blocks, layout);
    e = cudaGetLastError();
  }
  cudaEventRecord(stop);
  if (e != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "call: %s\n", cudaGetErrorString(e != cudaSuccess ? e : cudaGetLastError()));
    return 1;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  std::vector<int> got(static_cast<std::size_t>(rows) * k), want(got.size());
  std::vector<float> got_w(got.size()), want_w(got.size());
  cudaMemcpy(got.data(), ids, sizeof(int) * got.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(got_w.data(), weights, sizeof(float) * got_w.size(), cudaMemcpyDeviceToHost);
  if (model && model->biased) p.router.bias = bias.data();  // the host path reads host memory
  const lynx::batch_ref<float, int> host_batch{host_logits, n, rows, valid, want.data(), want_w.data()};
  const lynx::status s = topk ? lynx::host::topk_route(host_batch, p, host_layout)
                              : lynx::host::route(host_batch, p, host_layout);
  bool same = s == lynx::status::success && got == want;
  for (std::size_t i = 0; i < got_w.size(); ++i) same = same && std::fabs(got_w[i] - want_w[i]) <= 2e-6f;
  if (sorted) {
    std::vector<int> got_arrays(total);
    cudaMemcpy(got_arrays.data(), arrays, sizeof(int) * total, cudaMemcpyDeviceToHost);
    same = same && got_arrays == host_arrays;
  }
  std::printf("%s N=%d k=%d T=%d B=%d policy=%s%s%s: ids, weights%s %s the host path's; one call %.1f us (event)\n", argv[1], n, k,
              rows, valid, topk ? "-" : (p.kind == lynx::policy::lynx ? "lynx" : "budget"), model ? " router=" : "",
              model ? argv[6] : "", sorted ? " and layout" : "",
              same ? "equal" : "DIFFER from",
              ms * 1000.0f);
  return same ? 0 : 1;
}

}  // namespace lynx_one_call

#ifndef LYNX_ONE_CALL_NO_MAIN
int main(int argc, char** argv) { return lynx_one_call::run(argc, argv); }
#endif
