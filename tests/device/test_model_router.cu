// lynx::topk_route, and the Lynx policies (route, remap_topk), with the models' own routers
// (model_router: biased groups, groups, bias alone, scaling; docs/ROUTERS.md) on the device
// against the host path, ids and weights bitwise, at the shapes of DeepSeek-V3, Kimi-K2,
// GLM-4.5, DeepSeek-V2 and a small grouped one, for float and bf16 logits, int32 and int64 ids,
// one block and many, the fused path and the per-stage one. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <thrust/device_vector.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
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

// ---------------------------------------------------------------------------------------------
// The policies on a router: route (fused below 513 rows, per stage above) and remap_topk.

struct batch_case {
  int rows, valid;
  bool pinned, adversarial;
  int row0 = 0;               // row 0's own damage: 1 NaN and +inf, 2 every other logit -inf, 3 no finite logit
  bool device_count = false;  // B read on the device
};

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  return out;
}

/// The policies' parameters on a router case: lynx (the model default's bins), piggyback, budget.
lynx::route_params policy_params(const router_case& c, lynx::policy kind, bool relaxed) {
  auto p = lynx_test::params(c.n, c.k, c.bias ? 20.0f : 1.5f, 2, c.score, c.renormalize);
  p.router.num_groups = c.groups, p.router.top_groups = c.top_groups, p.router.scaling = c.scaling;
  p.router.relaxed_groups = relaxed;
  p.kind = kind;
  p.anchor_top1 = kind != lynx::policy::piggyback;
  p.keep_k = 2;
  if (kind == lynx::policy::budget) p.budget_mass = 0.9f;
  return p;
}

template <class T, class IdT>
void check_policy(const router_case& c, const lynx::route_params& p0, const batch_case& b, std::uint32_t seed,
                  bool staged) {
  std::mt19937 rng(seed);
  std::vector<float> bias;
  if (c.bias) {
    std::normal_distribution<float> d(0.0f, 0.3f);
    for (int e = 0; e < c.n; ++e) bias.push_back(d(rng));
    if (b.adversarial) bias[3] = NAN, bias[c.n - 1] = -INFINITY, bias[c.n / 2] = 4.0f;
  }
  // Rows that share a bias of taste (so the policies have experts to share), quantized on odd seeds.
  auto Lf = lynx_test::random_logits(b.rows, c.n, seed, 1.5f, seed % 2 ? 0.25f : 0.0f);
  std::vector<float> taste(c.n);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& x : taste) x = d(rng);
  for (int t = 0; t < b.rows; ++t)
    for (int e = 0; e < c.n; ++e) Lf[static_cast<std::size_t>(t) * c.n + e] += taste[e];
  if (b.adversarial && b.rows >= 4) {
    for (int e = 0; e < c.n; ++e) Lf[e] = NAN;                      // row 0 does not vote
    for (int e = 0; e < c.n; ++e) Lf[c.n + e] = -INFINITY;          // nor row 1
    Lf[2 * c.n + 5] = INFINITY, Lf[2 * c.n + 6] = NAN;              // row 2: +inf is FLT_MAX, NaN -inf
    for (int e = 0; e < c.n; e += 2) Lf[3 * static_cast<std::size_t>(c.n) + e] = -INFINITY;
  }
  if (b.row0 == 1) Lf[1] = NAN, Lf[c.n - 2] = INFINITY;
  for (int e = 0; b.row0 >= 2 && e < c.n; e += b.row0 == 2 ? 2 : 1) Lf[e] = -INFINITY;
  const auto L = as<T>(Lf);
  std::vector<std::uint8_t> pinned(b.rows, 0);
  if (b.pinned)
    for (int t = 0; t < b.rows; t += 5) pinned[t] = 1;
  const std::size_t slots = static_cast<std::size_t>(b.rows) * c.k;
  std::vector<IdT> want(slots, IdT(-7));
  std::vector<float> want_w(slots, -7.0f);
  auto p = p0;
  p.router.bias = bias.empty() ? nullptr : bias.data();
  lynx::batch_ref<T, IdT> hb{L.data(), c.n, b.rows, b.valid, want.data(), want_w.data()};
  if (b.pinned) hb.pinned = pinned.data();
  ASSERT_EQ(lynx::host::route(hb, p), lynx::status::success);

  auto d_bias = to_device(bias);
  p.router.bias = bias.empty() ? nullptr : thrust::raw_pointer_cast(d_bias.data());
  auto d_L = to_device(L);
  auto d_pinned = to_device(pinned);
  thrust::device_vector<IdT> d_ids(slots, IdT(-5));
  thrust::device_vector<float> d_w(slots, -5.0f);
  thrust::device_vector<int> d_count(1, b.valid);
  const lynx::token_count valid =
      b.device_count ? lynx::token_count(thrust::raw_pointer_cast(d_count.data())) : lynx::token_count(b.valid);
  lynx::batch_ref<T, IdT> db{thrust::raw_pointer_cast(d_L.data()), c.n, b.rows, valid,
                             thrust::raw_pointer_cast(d_ids.data()), thrust::raw_pointer_cast(d_w.data())};
  if (b.pinned) db.pinned = thrust::raw_pointer_cast(d_pinned.data());
  std::size_t bytes = 0;
  const auto call = [&](void* ws) {
    return staged ? lynx::remap_topk(ws, bytes, db, nullptr, nullptr, p) : lynx::route(ws, bytes, db, p);
  };
  ASSERT_EQ(call(nullptr), cudaSuccess);
  thrust::device_vector<char> ws(bytes);
  ASSERT_EQ(call(thrust::raw_pointer_cast(ws.data())), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto what = [&] {
    return std::string(c.name) + " policy " + std::to_string(int(p.kind)) + (p.router.relaxed_groups ? " relaxed" : " kept") +
           " rows " + std::to_string(b.rows) + " valid " + std::to_string(b.valid) + (b.pinned ? " pinned" : "") +
           (b.adversarial ? " adversarial" : "") + " row 0 kind " + std::to_string(b.row0) +
           (b.device_count ? " device B" : "") + (staged ? " remap_topk" : " route");
  };
  EXPECT_EQ(to_host(d_ids), want) << what();
  EXPECT_EQ(to_host(d_w), want_w) << what() << ": weights bitwise";
}

const lynx::policy all_policies[] = {lynx::policy::lynx, lynx::policy::piggyback, lynx::policy::budget};

TEST(DeviceRouter, RouteMatchesHostOnTheFusedPath) {
  // One row; a row per warp; more rows than warps (each phase loads its rows again); and 12
  // valid rows of 48, at most one per warp (they stay in registers however many rows pad).
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 100;
  for (const auto& c : cases)
    for (const lynx::policy kind : all_policies)
      for (const bool relaxed : {false, true})
        for (const batch_case b : {batch_case{1, 1, false, false}, batch_case{16, 16, false, false},
                                   batch_case{40, 37, true, true}, batch_case{48, 12, true, true}})
          ASSERT_NO_FATAL_FAILURE(
              (check_policy<float, std::int32_t>(c, policy_params(c, kind, relaxed), b, seed++, false)));
}

TEST(DeviceRouter, OneValidRowMatchesHost) {
  // B = 1, which block_route routes by warp 0 alone (run_one_row on the router's choice keys):
  // every model, policy (the budget in its mass, count and fraction modes) and group limit,
  // with padding rows behind the row or not, pinned or not, B on the host or on the device,
  // a row with NaN and +inf, every other logit -inf, or none finite (it does not vote). The
  // case's own settings are drawn independently of the model, the policy and the groups by a
  // fixed generator (its seed puts a pinned voting row under every policy and group limit).
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 700;
  lynx_test::picker pick(2);
  for (const auto& c : cases)
    for (int mode = 0; mode < 5; ++mode)
      for (const bool relaxed : {false, true}) {
        const lynx::policy kind = mode == 0 ? lynx::policy::lynx : mode == 1 ? lynx::policy::piggyback : lynx::policy::budget;
        auto p = policy_params(c, kind, relaxed);
        if (mode == 3) p.budget_mass = 0.0f, p.budget_experts = c.k + 3;
        if (mode == 4) p.budget_mass = 0.0f, p.budget_fraction = 0.7f;
        batch_case b{pick(2) ? 6 : 1, 1, pick(2) == 1, false};
        b.row0 = pick(4);
        b.device_count = pick(2) == 1;
        if (pick(2))
          ASSERT_NO_FATAL_FAILURE((check_policy<float, std::int32_t>(c, p, b, seed++, false)));
        else
          ASSERT_NO_FATAL_FAILURE((check_policy<__nv_bfloat16, std::int64_t>(c, p, b, seed++, false)));
      }
}

TEST(DeviceRouter, RouteMatchesHostOnTheFusedPathAtManyRowsBf16Int64) {
  SKIP_WITHOUT_DEVICE();  // more rows than warps: each phase loads its rows again
  std::uint32_t seed = 300;
  for (const router_case& c : {cases[0], cases[3]})
    for (const lynx::policy kind : all_policies)
      ASSERT_NO_FATAL_FAILURE((check_policy<__nv_bfloat16, std::int64_t>(
          c, policy_params(c, kind, kind == lynx::policy::budget), batch_case{100, 96, true, true}, seed++, false)));
}

TEST(DeviceRouter, RouteMatchesHostOnThePerStagePath) {
  SKIP_WITHOUT_DEVICE();  // above 512 rows: one kernel per stage, the router's bins kernel for lynx
  std::uint32_t seed = 400;
  for (const router_case& c : {cases[0], cases[4]})
    for (const lynx::policy kind : all_policies)
      for (const bool relaxed : {false, true})
        ASSERT_NO_FATAL_FAILURE((check_policy<float, std::int32_t>(c, policy_params(c, kind, relaxed),
                                                                   batch_case{600, 590, true, true}, seed++, false)));
}

TEST(DeviceRouter, RemapTopkMatchesHostForThePoliciesWithoutBins) {
  SKIP_WITHOUT_DEVICE();
  std::uint32_t seed = 500;
  for (const router_case& c : {cases[0], cases[2], cases[3]})
    for (const lynx::policy kind : {lynx::policy::piggyback, lynx::policy::budget})
      for (const batch_case b : {batch_case{16, 16, false, false}, batch_case{70, 66, true, true}})
        ASSERT_NO_FATAL_FAILURE(
            (check_policy<float, std::int32_t>(c, policy_params(c, kind, seed % 2 == 0), b, seed++, true)));
}

TEST(DeviceRouter, TheModelDefaultMatchesHost) {
  SKIP_WITHOUT_DEVICE();  // default_params(model): budget 0.94, anchored, the limit kept
  std::uint32_t seed = 600;
  for (const auto& c : cases) {
    lynx::model_routing m{c.name, c.n, c.k, c.score, c.renormalize, c.bias, c.groups, c.top_groups, c.scaling};
    auto p = lynx::default_params(m, nullptr);
    p.router.bias = nullptr;  // check_policy sets it
    for (const int rows : {4, 64})
      ASSERT_NO_FATAL_FAILURE(
          (check_policy<float, std::int32_t>(c, p, batch_case{rows, rows, false, false}, seed++, false)));
  }
}

}  // namespace
