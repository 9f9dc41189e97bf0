// examples/router_lynx.cuh: the router GEMV and block_route in one kernel, against the host
// path (the same GEMV on the host, then lynx::host::route), bitwise. The host reference and the
// launcher's argument checks run without a device; the kernel tests skip without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <lynx/host.hpp>

#include "../../examples/router_lynx.cuh"
#include "../support/device.hpp"

namespace {

namespace ex = lynx_examples;

std::uint16_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

struct problem {
  int hidden_size, rows, n;
  std::vector<std::uint16_t> hidden, w;
};

problem make_problem(int hidden_size, int rows, int n, unsigned seed) {
  problem pr{hidden_size, rows, n, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  pr.hidden.resize(static_cast<std::size_t>(rows) * hidden_size);
  pr.w.resize(static_cast<std::size_t>(n) * hidden_size);
  for (auto& x : pr.hidden) x = bf16_bits(normal(rng));
  for (auto& x : pr.w) x = bf16_bits(normal(rng) / std::sqrt(static_cast<float>(hidden_size)));
  return pr;
}

TEST(RouterExample, HostGemvIsTheDotProduct) {
  const problem pr = make_problem(2048, 3, 40, 1);
  std::vector<float> logits(3 * 40);
  ex::router_logits_host(pr.hidden.data(), pr.w.data(), pr.hidden_size, 3, 40, logits.data());
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < 40; ++e) {
      double ref = 0;
      for (int h = 0; h < pr.hidden_size; ++h)
        ref += static_cast<double>(ex::bf16_bits_to_float(pr.hidden[t * pr.hidden_size + h])) *
               ex::bf16_bits_to_float(pr.w[e * pr.hidden_size + h]);
      EXPECT_NEAR(logits[t * 40 + e], ref, 1e-4) << "t " << t << " e " << e;
    }
}

TEST(RouterExample, LauncherRejectsShapesOutsideItsTier) {
  lynx::route_params p = lynx::default_params(128, 8);
  auto* any = reinterpret_cast<void*>(256);  // never dereferenced: the checks come first
  const auto* x = static_cast<const __nv_bfloat16*>(any);
  auto* ids = static_cast<int*>(any);
  auto* w = static_cast<float*>(any);
  lynx::route_params wide = lynx::default_params(160, 8), deep = lynx::default_params(128, 10);
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 4, 4, wide, any, ids, w)), cudaErrorInvalidValue);  // N > MaxN
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 4, 4, deep, any, ids, w)), cudaErrorInvalidValue);  // k > K
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2044, 4, 4, p, any, ids, w)), cudaErrorInvalidValue);     // H % 8
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 513, 4, p, any, ids, w)), cudaErrorInvalidValue);   // rows
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 4, 5, p, any, ids, w)), cudaErrorInvalidValue);     // valid > rows
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 4, 4, p, nullptr, ids, w)), cudaErrorInvalidValue);  // workspace
  p.top_k = 0;
  EXPECT_EQ((ex::router_lynx<128, 8>(x, x, 2048, 4, 4, p, any, ids, w)), cudaErrorInvalidValue);
}

template <int MaxN, int K, class IdT>
void expect_router_matches_host(const lynx::route_params& p, int rows, int valid, bool device_count, unsigned seed) {
  const int n = p.num_experts, k = p.top_k, hs = 2048;
  const problem pr = make_problem(hs, rows, n, seed);
  std::vector<float> logits(static_cast<std::size_t>(rows) * n, 0.0f);
  ex::router_logits_host(pr.hidden.data(), pr.w.data(), hs, valid, n, logits.data());
  std::vector<IdT> ids(rows * k);
  std::vector<float> weights(rows * k);
  ASSERT_EQ(lynx::host::route(lynx::batch_ref<float, IdT>{logits.data(), n, rows, valid, ids.data(), weights.data()}, p),
            lynx::status::success);

  __nv_bfloat16 *d_hidden = nullptr, *d_w = nullptr;
  IdT* d_ids = nullptr;
  float* d_weights = nullptr;
  int* d_valid = nullptr;
  void* d_ws = nullptr;
  const std::size_t ws_bytes = ex::router_workspace_bytes(rows, n, k);
  ASSERT_EQ(cudaMalloc(&d_hidden, pr.hidden.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_w, pr.w.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ids, ids.size() * sizeof(IdT)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_weights, weights.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_valid, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_ws, ws_bytes), cudaSuccess);
  cudaMemset(d_ws, 0, ws_bytes);
  cudaMemset(d_ids, 0xFF, ids.size() * sizeof(IdT));
  cudaMemcpy(d_hidden, pr.hidden.data(), pr.hidden.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(d_w, pr.w.data(), pr.w.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(d_valid, &valid, sizeof(int), cudaMemcpyHostToDevice);
  const lynx::token_count count = device_count ? lynx::token_count(d_valid) : lynx::token_count(valid);
  // Twice: the second call checks that the first left the block counter ready.
  for (int call = 0; call < 2; ++call) {
    ASSERT_EQ((ex::router_lynx<MaxN, K, IdT>(d_hidden, d_w, hs, rows, count, p, d_ws, d_ids, d_weights)), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<IdT> got_ids(ids.size());
    std::vector<float> got_w(weights.size());
    cudaMemcpy(got_ids.data(), d_ids, got_ids.size() * sizeof(IdT), cudaMemcpyDeviceToHost);
    cudaMemcpy(got_w.data(), d_weights, got_w.size() * sizeof(float), cudaMemcpyDeviceToHost);
    EXPECT_EQ(got_ids, ids) << "call " << call;
    ASSERT_EQ(got_w.size(), weights.size());
    EXPECT_EQ(std::memcmp(got_w.data(), weights.data(), got_w.size() * sizeof(float)), 0) << "call " << call;
    cudaMemset(d_ids, 0xFF, ids.size() * sizeof(IdT));
  }
  cudaFree(d_hidden);
  cudaFree(d_w);
  cudaFree(d_ids);
  cudaFree(d_weights);
  cudaFree(d_valid);
  cudaFree(d_ws);
}

lynx::route_params policy_params(lynx::policy kind, int n, int k) {
  lynx::route_params p = lynx::default_params(n, k);
  p.renormalize = true;
  if (kind == lynx::policy::lynx) {
    p.kind = lynx::policy::lynx;
    p.budget_mass = 0;
  } else if (kind == lynx::policy::piggyback) {
    p.kind = lynx::policy::piggyback;
    p.budget_mass = 0;
    p.keep_k = k / 2 > 0 ? k / 2 : 1;
  }
  return p;
}

TEST(RouterExample, FusedKernelMatchesHostQwen3Shape) {
  SKIP_WITHOUT_DEVICE();
  for (lynx::policy kind : {lynx::policy::lynx, lynx::policy::budget, lynx::policy::piggyback})
    for (int rows : {1, 16, 64}) {
      SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(kind) << " rows " << rows);
      ASSERT_NO_FATAL_FAILURE((expect_router_matches_host<128, 8, int>(policy_params(kind, 128, 8), rows, rows, false,
                                                                        static_cast<unsigned>(rows))));
    }
}

TEST(RouterExample, FusedKernelMatchesHostWithPaddingAndDeviceCount) {
  SKIP_WITHOUT_DEVICE();
  // N 96 (not a power of two), k 6, int64 ids; 24 rows of which 19 are tokens, or 1 (block_route's
  // one-row path), the count read on the device.
  for (lynx::policy kind : {lynx::policy::lynx, lynx::policy::budget})
    for (int valid : {19, 1}) {
      SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(kind) << " valid " << valid);
      ASSERT_NO_FATAL_FAILURE(
          (expect_router_matches_host<128, 8, std::int64_t>(policy_params(kind, 96, 6), 24, valid, true, 5u)));
    }
}

}  // namespace
