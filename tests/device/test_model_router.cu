// lynx::topk_route with the models' own routers (model_router: biased groups, groups, bias
// alone, scaling) on the device against the host path, ids and weights bitwise, at the shapes
// of DeepSeek-V3, Kimi-K2, GLM-4.5, DeepSeek-V2 and a small grouped one, for float and bf16
// logits, int32 and int64 ids, one block and many. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <thrust/device_vector.h>

#include <cstdint>
#include <random>
#include <vector>

#include <lynx/lynx.cuh>

#include "../support/device.hpp"
#include "../support/device_vectors.hpp"
#include "../support/params.hpp"
#include "../support/random_logits.hpp"

namespace {

using lynx_test::to_device;
using lynx_test::to_host;

struct router_case {
  const char* name;
  int n, k;
  lynx::scoring score;
  bool renormalize, bias;
  int groups, top_groups;
  float scaling;
};

const router_case cases[] = {
    {"deepseek-v3", 256, 8, lynx::scoring::sigmoid, true, true, 8, 4, 2.5f},
    {"kimi-k2", 384, 8, lynx::scoring::sigmoid, true, true, 1, 1, 2.827f},
    {"glm-4.5", 160, 8, lynx::scoring::sigmoid, true, true, 1, 1, 2.5f},
    {"deepseek-v2", 160, 6, lynx::scoring::softmax, false, false, 8, 3, 16.0f},
    {"small-grouped", 64, 4, lynx::scoring::sigmoid, false, true, 8, 2, 1.0f},
};

template <class T, class IdT>
void check_case(const router_case& c, int rows, std::uint32_t seed) {
  auto p = lynx_test::params(c.n, c.k, 1.0f, 1, c.score, c.renormalize);
  p.router.num_groups = c.groups, p.router.top_groups = c.top_groups, p.router.scaling = c.scaling;
  std::vector<float> bias;
  if (c.bias) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.5f);
    for (int e = 0; e < c.n; ++e) bias.push_back(d(rng));
  }
  // Quantized logits on odd seeds: ties in the choice and in the group scores.
  const auto Lf = lynx_test::random_logits(rows, c.n, seed, 2.0f, seed % 2 ? 0.25f : 0.0f);
  std::vector<T> L(Lf.size());
  for (std::size_t i = 0; i < L.size(); ++i) L[i] = static_cast<T>(Lf[i]);
  const std::size_t slots = static_cast<std::size_t>(rows) * c.k;
  std::vector<IdT> want(slots);
  std::vector<float> want_w(slots);
  p.router.bias = bias.empty() ? nullptr : bias.data();
  ASSERT_EQ(lynx::host::topk_route(L.data(), c.n, rows, rows, p, want.data(), want_w.data()), lynx::status::success);

  auto d_bias = to_device(bias);
  p.router.bias = bias.empty() ? nullptr : thrust::raw_pointer_cast(d_bias.data());
  auto d_L = to_device(L);
  thrust::device_vector<IdT> d_ids(slots, IdT(-5));
  thrust::device_vector<float> d_w(slots, -5.0f);
  std::size_t bytes = 0;
  ASSERT_EQ((lynx::topk_route<T, IdT>(nullptr, bytes, nullptr, c.n, rows, rows, p, nullptr, nullptr)), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  ASSERT_EQ(lynx::topk_route(thrust::raw_pointer_cast(ws.data()), bytes, thrust::raw_pointer_cast(d_L.data()), c.n,
                             rows, rows, p, thrust::raw_pointer_cast(d_ids.data()),
                             thrust::raw_pointer_cast(d_w.data())),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(d_ids), want) << c.name << " rows " << rows;
  EXPECT_EQ(to_host(d_w), want_w) << c.name << " rows " << rows << ": weights bitwise";
}

TEST(DeviceRouter, TopkRouteMatchesHostFloatInt32) {
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 1;
  for (const auto& c : cases)
    for (const int rows : {1, 16, 64}) ASSERT_NO_FATAL_FAILURE((check_case<float, std::int32_t>(c, rows, seed++)));
}

TEST(DeviceRouter, TopkRouteMatchesHostBf16Int64) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_NO_FATAL_FAILURE((check_case<__nv_bfloat16, std::int64_t>(cases[0], 300, 7)));  // 38 blocks
  ASSERT_NO_FATAL_FAILURE((check_case<__nv_bfloat16, std::int64_t>(cases[3], 33, 8)));
}

}  // namespace
