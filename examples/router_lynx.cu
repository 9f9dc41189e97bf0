// router_lynx: the router GEMV and the Lynx step in one kernel (router_lynx.cuh), at
// Qwen3-30B-A3B's router shape (H 2048, N 128, k 8, bf16), checked bitwise against the host
// path (the same GEMV on the host, then lynx::host::route). Without a GPU it runs the host
// reference only and says so.
//
//   router_lynx [--tokens T] [--policy lynx|budget|piggyback] [--reps R]
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "router_lynx.cuh"

namespace {

constexpr int kHidden = 2048, kExperts = 128, kTopK = 8;

std::uint16_t to_bf16_bits(float f) {  // round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

int unique_experts(const std::vector<int>& ids) { return static_cast<int>(std::set<int>(ids.begin(), ids.end()).size()); }

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    if (cudaError_t e_ = (x); e_ != cudaSuccess) {                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  int tokens = 16, reps = 100;
  std::string policy_name = "lynx";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc) tokens = std::atoi(argv[++i]);
    else if (a == "--policy" && i + 1 < argc) policy_name = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: router_lynx [--tokens T (1..512)] [--policy lynx|budget|piggyback] [--reps R]\n");
      return 2;
    }
  }
  if (tokens < 1 || tokens > 512 || reps < 1) {
    std::fprintf(stderr, "router_lynx: --tokens must be in [1, 512], --reps >= 1\n");
    return 2;
  }
  lynx::route_params p;
  if (policy_name == "budget") p = lynx::default_params(kExperts, kTopK);
  else if (policy_name == "lynx") p = lynx::params_from(*lynx::find_preset("qwen3-30b-a3b"), true);
  else if (policy_name == "piggyback") {
    p = lynx::params_from(*lynx::find_preset("qwen3-30b-a3b"), true);
    p.kind = lynx::policy::piggyback;
    p.keep_k = 4;
  } else {
    std::fprintf(stderr, "router_lynx: unknown policy %s\n", policy_name.c_str());
    return 2;
  }

  // Hidden states ~ N(0, 1); router rows ~ N(0, 1/H) plus a per-expert skew, so that experts
  // differ in popularity as trained routers' do.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> hidden(static_cast<std::size_t>(tokens) * kHidden), w(static_cast<std::size_t>(kExperts) * kHidden);
  for (auto& x : hidden) x = to_bf16_bits(normal(rng));
  std::vector<float> skew(kHidden);
  for (auto& s : skew) s = 0.5f * normal(rng);
  for (int e = 0; e < kExperts; ++e)
    for (int h = 0; h < kHidden; ++h)
      w[static_cast<std::size_t>(e) * kHidden + h] = to_bf16_bits((normal(rng) + (e % 8 == 0 ? skew[h] : 0.0f)) / 45.25f);

  // The host reference: GEMV in the kernel's order, then lynx::host::route and plain top-k.
  std::vector<float> logits(static_cast<std::size_t>(tokens) * kExperts);
  lynx_examples::router_logits_host(hidden.data(), w.data(), kHidden, tokens, kExperts, logits.data());
  std::vector<int> ids(tokens * kTopK), plain_ids(tokens * kTopK);
  std::vector<float> weights(tokens * kTopK), plain_w(tokens * kTopK);
  if (lynx::host::route(lynx::batch_ref<float, int>{logits.data(), kExperts, tokens, tokens, ids.data(), weights.data()},
                        p) != lynx::status::success ||
      lynx::host::topk_route(
          lynx::batch_ref<float, int>{logits.data(), kExperts, tokens, tokens, plain_ids.data(), plain_w.data()}, p) !=
          lynx::status::success) {
    std::fprintf(stderr, "router_lynx: host route failed\n");
    return 1;
  }
  std::printf("router_lynx: H %d, N %d, k %d, T %d, policy %s\n", kHidden, kExperts, kTopK, tokens,
              policy_name.c_str());
  std::printf("  unique experts: plain top-k %d, lynx %d (host reference)\n", unique_experts(plain_ids),
              unique_experts(ids));

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("  no CUDA device: the fused router kernel did not run (host reference only)\n");
    return 0;
  }
  __nv_bfloat16 *d_hidden, *d_w;
  int* d_ids;
  float* d_weights;
  void* d_ws;
  const std::size_t ws_bytes = lynx_examples::router_workspace_bytes(tokens, kExperts, kTopK);
  CHECK_CUDA(cudaMalloc(&d_hidden, hidden.size() * 2));
  CHECK_CUDA(cudaMalloc(&d_w, w.size() * 2));
  CHECK_CUDA(cudaMalloc(&d_ids, ids.size() * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&d_weights, weights.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&d_ws, ws_bytes));
  CHECK_CUDA(cudaMemset(d_ws, 0, ws_bytes));
  CHECK_CUDA(cudaMemcpy(d_hidden, hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_w, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  const auto launch = [&] {
    return lynx_examples::router_lynx<kExperts, kTopK>(d_hidden, d_w, kHidden, tokens, tokens, p, d_ws, d_ids,
                                                        d_weights);
  };
  CHECK_CUDA(launch());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<int> got_ids(ids.size());
  std::vector<float> got_w(weights.size());
  CHECK_CUDA(cudaMemcpy(got_ids.data(), d_ids, got_ids.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(got_w.data(), d_weights, got_w.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const bool same = got_ids == ids && std::memcmp(got_w.data(), weights.data(), got_w.size() * sizeof(float)) == 0;
  std::printf("  device ids and weights %s the host reference's\n", same ? "bitwise equal" : "DIFFER from");
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  for (int r = 0; r < reps; ++r) CHECK_CUDA(launch());
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  std::printf("  router GEMV + Lynx, one launch: %.2f us per call (mean of %d back-to-back calls)\n",
              1000.0f * ms / reps, reps);
  cudaFree(d_hidden);
  cudaFree(d_w);
  cudaFree(d_ids);
  cudaFree(d_weights);
  cudaFree(d_ws);
  return same ? 0 : 1;
}
