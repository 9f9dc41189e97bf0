// moe_decode_layer: a real decode MoE layer on the GPU, routed with plain top-k or with Lynx.
// bf16 expert weights in HBM (gate, up, down; SiLU), router logits from the generator fitted to
// the FLAME trace, and a bandwidth-bound grouped expert kernel that reads only the
// experts the batch touches, from the sorted layout the routing launch writes. Prints, per shape and batch size: unique experts, layer time with
// each router, the speedup, and the achieved HBM bandwidth as a fraction of the GPU's peak.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <lynx/lynx.cuh>

#include "common/evaluate.hpp"
#include "common/trace.hpp"

using namespace lynx_examples;

namespace {

struct layer_shape {
  const char* name;
  int hidden, inter, num_experts, top_k;
};

// Routed experts only (shared experts are dense and do not depend on routing).
const layer_shape shapes[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"qwen2-57b-a14b", 3584, 2560, 64, 8},
    {"deepseek-v2-lite", 2048, 1408, 64, 6},
    {"mixtral-8x7b", 4096, 14336, 8, 2},
};

constexpr int kTokensPerPass = 16;  // tokens of one expert sharing each weight load
constexpr int kWarps = 8;

__device__ __forceinline__ void bf16x8(const uint4& v, float* out) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The routing launch also writes the batch's expert-sorted layout (lynx::sorted_layout_ref): the
// compact list of the |K| experts it loads, their slot counts and offsets, and position -> slot
// (t * k + j), stable in token order. The expert kernels below take expert j of that list in
// grid row j: a host-sized grid has min(N, T * k) rows (the most experts T tokens can touch),
// and rows from |K| on (read on the device, so graph replays need no host sync) exit at once.
struct expert_plan {
  const int* num_active;  // [1]
  const int* active;      // [N] the experts, ascending
  const int* count;       // [N] their slots
  const int* offset;      // [N + 1] their first position
  const int* position_slot;
};

// h[pos][i] = silu(gate_i . x) * (up_i . x) for the expert's tokens; a warp per i.
__global__ void __launch_bounds__(kWarps * 32)
    gate_up_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, int hidden, int inter, int k, expert_plan plan,
                   __nv_bfloat16* h) {
  const int j_expert = blockIdx.y;
  if (j_expert >= *plan.num_active) return;
  const int e = plan.active[j_expert], m = plan.count[j_expert], base = plan.offset[j_expert];
  const int i = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (i >= inter) return;
  const __nv_bfloat16* wg = w + (static_cast<std::size_t>(e) * 2 * inter + i) * hidden;
  const __nv_bfloat16* wu = wg + static_cast<std::size_t>(inter) * hidden;
  for (int c0 = 0; c0 < m; c0 += kTokensPerPass) {
    const int mc = min(kTokensPerPass, m - c0);
    float g[kTokensPerPass] = {}, u[kTokensPerPass] = {};
    for (int kk = lane * 8; kk < hidden; kk += 256) {
      float fg[8], fu[8];
      bf16x8(*reinterpret_cast<const uint4*>(wg + kk), fg);
      bf16x8(*reinterpret_cast<const uint4*>(wu + kk), fu);
#pragma unroll
      for (int j = 0; j < kTokensPerPass; ++j) {
        if (j >= mc) break;
        float fx[8];
        bf16x8(*reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(plan.position_slot[base + c0 + j] / k) * hidden + kk),
               fx);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          g[j] = fmaf(fg[q], fx[q], g[j]);
          u[j] = fmaf(fu[q], fx[q], u[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kTokensPerPass; ++j) {
      if (j >= mc) break;
      const float gs = warp_sum(g[j]), us = warp_sum(u[j]);
      if (lane == 0) h[static_cast<std::size_t>(base + c0 + j) * inter + i] = __float2bfloat16(gs / (1.0f + __expf(-gs)) * us);
    }
  }
}

// y[tok][slot][r] = weight * (down_r . h[pos]); a warp per output row r.
__global__ void __launch_bounds__(kWarps * 32)
    down_kernel(const __nv_bfloat16* h, const __nv_bfloat16* w, int hidden, int inter, expert_plan plan,
                const float* weights, float* y) {
  const int j_expert = blockIdx.y;
  if (j_expert >= *plan.num_active) return;
  const int e = plan.active[j_expert], m = plan.count[j_expert], base = plan.offset[j_expert];
  const int r = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= hidden) return;
  const __nv_bfloat16* wd = w + (static_cast<std::size_t>(e) * hidden + r) * inter;
  for (int c0 = 0; c0 < m; c0 += kTokensPerPass) {
    const int mc = min(kTokensPerPass, m - c0);
    float acc[kTokensPerPass] = {};
    for (int kk = lane * 8; kk < inter; kk += 256) {
      float fw[8];
      bf16x8(*reinterpret_cast<const uint4*>(wd + kk), fw);
#pragma unroll
      for (int j = 0; j < kTokensPerPass; ++j) {
        if (j >= mc) break;
        float fh[8];
        bf16x8(*reinterpret_cast<const uint4*>(h + static_cast<std::size_t>(base + c0 + j) * inter + kk), fh);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[j] = fmaf(fw[q], fh[q], acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kTokensPerPass; ++j) {
      if (j >= mc) break;
      const float s = warp_sum(acc[j]);
      const int slot = plan.position_slot[base + c0 + j];  // t * k + its place in the row
      if (lane == 0) y[static_cast<std::size_t>(slot) * hidden + r] = weights[slot] * s;
    }
  }
}

// out[t][r] = sum over slots, in slot order (deterministic, no atomics).
__global__ void combine_kernel(const float* y, int rows, int k, int hidden, __nv_bfloat16* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(rows) * hidden) return;
  const std::size_t t = i / hidden, r = i % hidden;
  float s = 0.0f;
  for (int j = 0; j < k; ++j) s += y[(t * k + j) * hidden + r];
  out[i] = __float2bfloat16(s);
}

__global__ void fill_random(__nv_bfloat16* p, std::size_t n, std::uint32_t seed, float scale) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t v = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    v ^= v >> 15;
    v *= 2246822519u;
    v ^= v >> 13;
    p[i] = __float2bfloat16(scale * (static_cast<float>(v & 0xFFFF) / 32768.0f - 1.0f));
  }
}

template <class T>
T* device_alloc(std::size_t count) {
  T* p = nullptr;
  LYNX_CUDA_OK(cudaMalloc(&p, count * sizeof(T) + 16));
  return p;
}

struct layer {
  layer_shape s;
  int max_rows;
  __nv_bfloat16 *w_gate_up, *w_down, *x, *h, *out;
  float *logits, *weights, *y;
  int *ids, *num_active, *active, *count, *offset, *position_slot;
  void* ws;
  std::size_t ws_bytes = 0;

  layer(const layer_shape& shape, int rows) : s(shape), max_rows(rows) {
    const std::size_t n = s.num_experts, H = s.hidden, I = s.inter, k = s.top_k;
    w_gate_up = device_alloc<__nv_bfloat16>(n * 2 * I * H);
    w_down = device_alloc<__nv_bfloat16>(n * H * I);
    x = device_alloc<__nv_bfloat16>(rows * H);
    h = device_alloc<__nv_bfloat16>(rows * k * I);
    out = device_alloc<__nv_bfloat16>(rows * H);
    logits = device_alloc<float>(rows * n);
    weights = device_alloc<float>(rows * k);
    y = device_alloc<float>(rows * k * H);
    ids = device_alloc<int>(rows * k);
    num_active = device_alloc<int>(1);
    active = device_alloc<int>(n);
    count = device_alloc<int>(n);
    offset = device_alloc<int>(n + 1);
    position_slot = device_alloc<int>(rows * k);
    fill_random<<<1024, 256>>>(w_gate_up, n * 2 * I * H, 1, 0.02f);
    fill_random<<<1024, 256>>>(w_down, n * H * I, 2, 0.02f);
    fill_random<<<256, 256>>>(x, rows * H, 3, 1.0f);
    std::size_t a = 0, b = 0;
    const lynx::route_params p = lynx::default_params(s.num_experts, s.top_k);
    LYNX_CUDA_OK((lynx::route<float, int>(nullptr, a, nullptr, s.num_experts, rows, rows, p, nullptr, nullptr)));
    LYNX_CUDA_OK((lynx::topk_route<float, int>(nullptr, b, nullptr, s.num_experts, rows, rows, p, nullptr, nullptr)));
    ws_bytes = std::max(a, b);
    LYNX_CUDA_OK(cudaMalloc(&ws, ws_bytes));
    LYNX_CUDA_OK(cudaDeviceSynchronize());
  }
  ~layer() {
    for (void* p : {static_cast<void*>(w_gate_up), static_cast<void*>(w_down), static_cast<void*>(x), static_cast<void*>(h),
                    static_cast<void*>(out), static_cast<void*>(logits), static_cast<void*>(weights), static_cast<void*>(y),
                    static_cast<void*>(ids), static_cast<void*>(num_active), static_cast<void*>(active),
                    static_cast<void*>(count), static_cast<void*>(offset), static_cast<void*>(position_slot), ws})
      cudaFree(p);
  }

  // The whole layer for `rows` tokens: routing (with the sorted layout, one launch), experts,
  // combine. Graph-capturable.
  void run(bool use_lynx, int rows, const lynx::route_params& p, cudaStream_t st) {
    std::size_t bytes = ws_bytes;
    lynx::sorted_layout_ref layout;
    layout.num_active = num_active, layout.active_experts = active, layout.expert_counts = count;
    layout.expert_offsets = offset, layout.position_slot = position_slot;
    const lynx::batch_ref<float, int> batch{logits, s.num_experts, rows, rows, ids, weights};
    if (use_lynx) LYNX_CUDA_OK(lynx::route(ws, bytes, batch, p, layout, st));
    else LYNX_CUDA_OK(lynx::topk_route(ws, bytes, batch, p, layout, st));
    const expert_plan plan{num_active, active, count, offset, position_slot};
    const unsigned expert_rows = static_cast<unsigned>(std::min(s.num_experts, rows * s.top_k));
    gate_up_kernel<<<dim3((s.inter + kWarps - 1) / kWarps, expert_rows), kWarps * 32, 0, st>>>(x, w_gate_up, s.hidden,
                                                                                               s.inter, s.top_k, plan, h);
    down_kernel<<<dim3((s.hidden + kWarps - 1) / kWarps, expert_rows), kWarps * 32, 0, st>>>(h, w_down, s.hidden, s.inter,
                                                                                             plan, weights, y);
    const std::size_t total = static_cast<std::size_t>(rows) * s.hidden;
    combine_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, st>>>(y, rows, s.top_k, s.hidden, out);
    LYNX_CUDA_OK(cudaGetLastError());
  }
};

double peak_bandwidth() {  // bytes per second: 2 (DDR) x memory clock x bus width
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, only;
  std::vector<int> batch_sizes = {1, 4, 16, 32, 64};
  int batches = 4, reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--shape" && i + 1 < argc) only = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else {
      std::printf("usage: moe_decode_layer [--shape NAME] [--json FILE] [--reps R]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (!device_available()) {
    std::printf("moe_decode_layer: no CUDA device; the MoE layer runs on the GPU only.\n");
    return 0;
  }
  try {
    cudaDeviceProp prop;
    LYNX_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const double peak = peak_bandwidth();
    const std::size_t flush_bytes = static_cast<std::size_t>(prop.l2CacheSize) * 4;
    void* flush = nullptr;
    LYNX_CUDA_OK(cudaMalloc(&flush, flush_bytes));
    std::printf("device: %s, peak HBM bandwidth %.2f TB/s, L2 %d MB (flushed before every timed layer)\n", prop.name,
                peak / 1e12, prop.l2CacheSize >> 20);
    std::printf("%-17s %5s %7s %7s %9s %9s %8s %9s %7s %7s %8s\n", "shape", "batch", "unique", "unique", "plain_us",
                "lynx_us", "speedup", "ideal", "bw_pl", "bw_lx", "vs_bound");
    std::printf("%-17s %5s %7s %7s %9s %9s %8s %9s %7s %7s %8s\n", "", "", "plain", "lynx", "", "", "", "speedup", "", "",
                "(lynx)");
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path), json << "{\"device\": \"" << prop.name << "\", \"peak_bytes_per_s\": " << peak
                                                       << ", \"results\": [\n";
    bool first = true;
    cudaStream_t st;
    LYNX_CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (const layer_shape& s : shapes) {
      if (!only.empty() && only != s.name) continue;
      const int max_rows = *std::max_element(batch_sizes.begin(), batch_sizes.end());
      layer L(s, max_rows);
      generator_options g;
      g.num_experts = s.num_experts;
      g.top_k = s.top_k;
      g.batches = batches;
      g.batch_tokens = max_rows;
      const trace tr = generate_trace(g);
      const lynx::route_params p = lynx::default_params(s.num_experts, s.top_k);
      const double expert_bytes = 3.0 * s.hidden * s.inter * 2.0;
      for (const int rows : batch_sizes) {
        double time[2] = {0, 0}, unique[2] = {0, 0};
        for (int b = 0; b < batches; ++b) {
          const float* logits = tr.row(tr.layers / 2, b * max_rows);
          LYNX_CUDA_OK(cudaMemcpy(L.logits, logits, sizeof(float) * rows * s.num_experts, cudaMemcpyHostToDevice));
          for (int which = 0; which < 2; ++which) {
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            LYNX_CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            L.run(which == 1, rows, p, st);
            LYNX_CUDA_OK(cudaStreamEndCapture(st, &graph));
            LYNX_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
            LYNX_CUDA_OK(cudaGraphLaunch(exec, st));  // warm-up, and the ids for the unique count
            LYNX_CUDA_OK(cudaStreamSynchronize(st));
            std::vector<int> ids(static_cast<std::size_t>(rows) * s.top_k);
            LYNX_CUDA_OK(cudaMemcpy(ids.data(), L.ids, ids.size() * sizeof(int), cudaMemcpyDeviceToHost));
            unique[which] += static_cast<double>(std::set<int>(ids.begin(), ids.end()).size());
            float total_ms = 0;
            for (int r = 0; r < reps; ++r) {
              LYNX_CUDA_OK(cudaMemsetAsync(flush, r, flush_bytes, st));  // evict the experts from L2
              cudaEventRecord(t0, st);
              LYNX_CUDA_OK(cudaGraphLaunch(exec, st));
              cudaEventRecord(t1, st);
              LYNX_CUDA_OK(cudaEventSynchronize(t1));
              float ms = 0;
              cudaEventElapsedTime(&ms, t0, t1);
              total_ms += ms;
            }
            time[which] += total_ms / reps * 1e3;  // µs
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
          }
        }
        for (int w = 0; w < 2; ++w) {
          time[w] /= batches;
          unique[w] /= batches;
        }
        const double bw[2] = {unique[0] * expert_bytes / (time[0] * 1e-6) / peak, unique[1] * expert_bytes / (time[1] * 1e-6) / peak};
        const double bound_lynx_us = unique[1] * expert_bytes / peak * 1e6;
        std::printf("%-17s %5d %7.2f %7.2f %9.1f %9.1f %7.2fx %8.2fx %6.1f%% %6.1f%% %7.2fx\n", s.name, rows, unique[0], unique[1],
                    time[0], time[1], time[0] / time[1], unique[0] / unique[1], 100 * bw[0], 100 * bw[1], time[1] / bound_lynx_us);
        if (json.is_open()) {
          json << (first ? "" : ",\n") << "  {\"shape\": \"" << s.name << "\", \"batch\": " << rows << ", \"unique_plain\": " << unique[0]
               << ", \"unique_lynx\": " << unique[1] << ", \"plain_us\": " << time[0] << ", \"lynx_us\": " << time[1]
               << ", \"speedup\": " << time[0] / time[1] << ", \"ideal_speedup\": " << unique[0] / unique[1]
               << ", \"bw_fraction_plain\": " << bw[0] << ", \"bw_fraction_lynx\": " << bw[1]
               << ", \"lynx_vs_bound\": " << time[1] / bound_lynx_us << "}";
          first = false;
        }
      }
    }
    if (json.is_open()) json << "\n]}\n";
    cudaFree(flush);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_decode_layer: %s\n", e.what());
    return 1;
  }
}
