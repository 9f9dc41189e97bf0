#pragma once
// router_lynx: an engine-style MoE router kernel that composes Lynx's public device API.
//
// One launch computes the router logits (hidden [T x H] times the router weight, bf16 in, fp32
// accumulate) and routes them with lynx::block_route, writing ids and weights: the logits never
// leave the launch as a separate kernel's output, and no second launch waits on them. Every warp
// of the grid takes dot products; the last block to finish (a counter after a fence, CUDA's
// threadFenceReduction pattern) runs the Lynx step on the fp32 logits in global scratch.
//
// The weight is stored as engines store the router's nn.Linear: w_router [N x H], row-major
// (logit[t][e] = dot(hidden[t], w_router[e])). Dot products have a fixed order that the host
// reference repeats (router_logits_host), so device and host logits, and so ids and weights,
// agree bitwise: lane j of a warp sums the 8-element chunks j, j + 32, ... with fmaf, and the
// 32 partial sums meet in a butterfly (xor 16, 8, 4, 2, 1).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <lynx/block/route.cuh>
#include <lynx/params.hpp>

namespace lynx_examples {

inline constexpr int router_chunk = 8;  // bf16 per 16-byte load

// ---------------------------------------------------------------------------------------------
// Host reference: the same dot products in the same order.

inline float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// logits[t * n + e] for t < rows, with the device kernel's summation order.
inline void router_logits_host(const std::uint16_t* hidden, const std::uint16_t* w_router, int hidden_size,
                               int rows, int n, float* logits) {
  for (int t = 0; t < rows; ++t)
    for (int e = 0; e < n; ++e) {
      float part[32] = {};
      const std::uint16_t* x = hidden + static_cast<std::size_t>(t) * hidden_size;
      const std::uint16_t* w = w_router + static_cast<std::size_t>(e) * hidden_size;
      for (int lane = 0; lane < 32; ++lane)
        for (int c = lane; c < hidden_size / router_chunk; c += 32)
          for (int i = 0; i < router_chunk; ++i) {
            const int h = c * router_chunk + i;
            part[lane] = std::fmaf(bf16_bits_to_float(x[h]), bf16_bits_to_float(w[h]), part[lane]);
          }
      for (int o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int j = 0; j < 32; ++j) next[j] = part[j] + part[j ^ o];
        std::memcpy(part, next, sizeof part);
      }
      logits[static_cast<std::size_t>(t) * n + e] = part[0];
    }
}

// ---------------------------------------------------------------------------------------------
// Device.

__device__ __forceinline__ float router_dot(const __nv_bfloat16* x, const __nv_bfloat16* w, int hidden_size) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float acc = 0.0f;
  for (int c = lane; c < hidden_size / router_chunk; c += 32) {
    const uint4 xv = reinterpret_cast<const uint4*>(x)[c];
    const uint4 wv = reinterpret_cast<const uint4*>(w)[c];
    const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(&xv);
    const __nv_bfloat16* ws = reinterpret_cast<const __nv_bfloat16*>(&wv);
#pragma unroll
    for (int i = 0; i < router_chunk; ++i) acc = fmaf(__bfloat162float(xs[i]), __bfloat162float(ws[i]), acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

/// The workspace of one call: logits [rows x N] fp32, the block counter, block_route's scratch.
struct router_workspace {
  unsigned* done;  // zero before the first call; every call leaves it zero
  float* logits;
  lynx::route_scratch scratch;
};

template <int MaxN, int K, int Threads, class IdT>
__global__ void __launch_bounds__(Threads, 1)
    router_lynx_kernel(const __nv_bfloat16* hidden, const __nv_bfloat16* w_router, int hidden_size, int rows,
                       lynx::token_count valid, lynx::route_params p, router_workspace ws, IdT* ids, float* weights) {
  using route_t = lynx::block_route<MaxN, K, Threads>;
  __shared__ typename route_t::TempStorage temp;
  __shared__ bool last;
  const int n = p.num_experts, warps = Threads / 32;
  const int b = valid.rows(rows);
  // A warp per expert: its weight row stays in L1 while the warp takes the batch's tokens.
  for (int e = blockIdx.x * warps + static_cast<int>(threadIdx.x) / 32; e < n; e += gridDim.x * warps)
    for (int t = 0; t < b; ++t) {
      const float logit = router_dot(hidden + static_cast<std::size_t>(t) * hidden_size,
                                     w_router + static_cast<std::size_t>(e) * hidden_size, hidden_size);
      if (threadIdx.x % 32 == 0) ws.logits[static_cast<std::size_t>(t) * n + e] = logit;
    }
  __threadfence();  // this block's logits are visible before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ws.done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Padding rows (t >= b) are not read: block_route treats them as SPEC §5 padding.
  route_t(temp).run(lynx::batch_ref<float, IdT>{ws.logits, n, rows, b, ids, weights}, p, ws.scratch);
  if (threadIdx.x == 0) *ws.done = 0;  // ready for the next call (and for a graph replay)
}

/// Lays the workspace of a call out from `base` (256-byte aligned regions); with base ==
/// nullptr, only `bytes` means anything (the size query).
inline router_workspace carve_router_workspace(void* base, int rows, int n, int k, std::size_t& bytes) {
  const std::size_t r = static_cast<std::size_t>(rows);
  char* at = static_cast<char*>(base);
  bytes = 0;
  const auto take = [&](std::size_t size) {
    char* q = at ? at + bytes : nullptr;
    bytes += (size + 255) / 256 * 256;
    return q;
  };
  router_workspace ws;
  ws.done = reinterpret_cast<unsigned*>(take(sizeof(unsigned)));
  ws.logits = reinterpret_cast<float*>(take(r * n * sizeof(float)));
  ws.scratch.plain = reinterpret_cast<std::uint64_t*>(take(r * k * sizeof(std::uint64_t)));
  ws.scratch.budget.share = reinterpret_cast<float*>(take(r * n * sizeof(float)));
  ws.scratch.budget.top = reinterpret_cast<float*>(take(r * k * sizeof(float)));
  ws.scratch.budget.kth = reinterpret_cast<float*>(take(r * sizeof(float)));
  return ws;
}

/// Workspace bytes of a call (CUB-style size query; the sizes only).
inline std::size_t router_workspace_bytes(int rows, int n, int k) {
  std::size_t bytes = 0;
  carve_router_workspace(nullptr, rows, n, k, bytes);
  return bytes;
}

/// Routes `rows` tokens (rows >= valid are padding) from their hidden states: MaxN >= N, K >= k,
/// rows <= 512, H a multiple of 8, pointers 16-byte aligned. `workspace` (256-byte aligned, of
/// router_workspace_bytes) starts zeroed once; calls leave it ready for the next. Asynchronous on
/// `stream`, graph-capturable; returns cudaErrorInvalidValue for shapes outside the tier.
template <int MaxN, int K, class IdT, int Threads = 512>
cudaError_t router_lynx(const __nv_bfloat16* hidden, const __nv_bfloat16* w_router, int hidden_size, int rows,
                        lynx::token_count valid, const lynx::route_params& p, void* workspace, IdT* ids,
                        float* weights, cudaStream_t stream = 0) {
  if (lynx::check(p, rows, p.num_experts, valid) != lynx::status::success || p.num_experts > MaxN ||
      p.top_k > K || rows > 512 || rows < 1 || hidden_size < router_chunk || hidden_size % router_chunk != 0 ||
      !workspace || !hidden || !w_router || !ids || !weights)
    return cudaErrorInvalidValue;
  std::size_t bytes = 0;
  const router_workspace ws = carve_router_workspace(workspace, rows, p.num_experts, p.top_k, bytes);
  const int n = p.num_experts;
  const int blocks = (n + Threads / 32 - 1) / (Threads / 32);
  router_lynx_kernel<MaxN, K, Threads, IdT>
      <<<blocks, Threads, 0, stream>>>(hidden, w_router, hidden_size, rows, valid, lynx::effective_params(p), ws,
                                       ids, weights);  // what lynx::route runs (k = 1: piggyback where the same)
  return cudaGetLastError();
}

}  // namespace lynx_examples
