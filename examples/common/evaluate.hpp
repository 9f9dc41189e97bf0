#pragma once
// Routing a whole trace with one policy at one batch size, on the device or the host path,
// and the SPEC §6 measures of the result (shared by lynx_replay and lynx_frontier). A program
// compiled as plain C++ (lynx_frontier) gets the host path only: the launchers need nvcc.

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef __CUDACC__
#include <lynx/lynx.cuh>
#else
#include <cuda_runtime_api.h>

#include <lynx/host.hpp>
#include <lynx/measures.hpp>
#endif

#include "trace.hpp"

namespace lynx_examples {

#define LYNX_CUDA_OK(call)                                                                     \
  do {                                                                                         \
    const cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess)                                                                   \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(err_));          \
  } while (0)

inline bool device_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

/// Routes batches with lynx::route or lynx::topk_route, on the device or on the host path.
class router {
 public:
  /// With a model router's bias (docs/ROUTERS.md), each call copies its layer's bias to the device.
  router(bool use_device, int max_rows, const lynx::route_params& p) : device_(use_device), p_(p) {
    if (!device_) return;
#ifndef __CUDACC__
    throw std::logic_error("router: compiled without the device launchers (not by nvcc)");
#else
    const std::size_t n = static_cast<std::size_t>(max_rows) * p.num_experts, nk = static_cast<std::size_t>(max_rows) * p.top_k;
    std::size_t a = 0, b = 0;
    LYNX_CUDA_OK((lynx::route<float, int>(nullptr, a, nullptr, p.num_experts, max_rows, max_rows, p, nullptr, nullptr)));
    LYNX_CUDA_OK((lynx::topk_route<float, int>(nullptr, b, nullptr, p.num_experts, max_rows, max_rows, p, nullptr, nullptr)));
    ws_bytes_ = std::max(a, b);
    LYNX_CUDA_OK(cudaMalloc(&ws_, ws_bytes_));
    LYNX_CUDA_OK(cudaMalloc(&logits_, n * sizeof(float)));
    LYNX_CUDA_OK(cudaMalloc(&ids_, nk * sizeof(int)));
    LYNX_CUDA_OK(cudaMalloc(&weights_, nk * sizeof(float)));
    if (p.router.bias) LYNX_CUDA_OK(cudaMalloc(&bias_, p.num_experts * sizeof(float)));
#endif
  }
  ~router() {
    if (!device_) return;
    cudaFree(ws_);
    cudaFree(logits_);
    cudaFree(ids_);
    cudaFree(weights_);
    cudaFree(bias_);
  }
  router(const router&) = delete;
  router& operator=(const router&) = delete;

  bool on_device() const { return device_; }

  /// `layer_p`: p with the layer's bias (layer_params); the same otherwise.
  void route(bool lynx_step, const float* logits, int rows, int* ids, float* weights, const lynx::route_params& layer_p) {
    const int n = p_.num_experts;
    if (!device_) {
      const lynx::status s = lynx_step ? lynx::host::route(logits, n, rows, rows, layer_p, ids, weights)
                                       : lynx::host::topk_route(logits, n, rows, rows, layer_p, ids, weights);
      if (s != lynx::status::success) throw std::runtime_error(lynx::status_string(s));
      return;
    }
#ifdef __CUDACC__
    const std::size_t nk = static_cast<std::size_t>(rows) * p_.top_k;
    LYNX_CUDA_OK(cudaMemcpy(logits_, logits, static_cast<std::size_t>(rows) * n * sizeof(float), cudaMemcpyHostToDevice));
    lynx::route_params q = layer_p;
    if (q.router.bias) {
      LYNX_CUDA_OK(cudaMemcpy(bias_, q.router.bias, n * sizeof(float), cudaMemcpyHostToDevice));
      q.router.bias = bias_;
    }
    std::size_t bytes = ws_bytes_;
    if (lynx_step)
      LYNX_CUDA_OK(lynx::route(ws_, bytes, logits_, n, rows, rows, q, ids_, weights_));
    else
      LYNX_CUDA_OK(lynx::topk_route(ws_, bytes, logits_, n, rows, rows, q, ids_, weights_));
    LYNX_CUDA_OK(cudaMemcpy(ids, ids_, nk * sizeof(int), cudaMemcpyDeviceToHost));
    LYNX_CUDA_OK(cudaMemcpy(weights, weights_, nk * sizeof(float), cudaMemcpyDeviceToHost));
#endif
  }

 private:
  bool device_;
  lynx::route_params p_;
  void* ws_ = nullptr;
  std::size_t ws_bytes_ = 0;
  float* logits_ = nullptr;
  int* ids_ = nullptr;
  float* weights_ = nullptr;
  float* bias_ = nullptr;
};

/// p for one layer of a trace: its correction bias where p has one.
inline lynx::route_params layer_params(const lynx::route_params& p, const trace& tr, int layer) {
  lynx::route_params q = p;
  if (q.router.bias) q.router.bias = tr.bias_of(layer);
  return q;
}

/// A one-line description of a policy, e.g. "lynx alpha=1 beta=1 +anchor, softmax".
inline std::string describe(const lynx::route_params& p) {
  char buf[160];
  switch (p.kind) {
    case lynx::policy::lynx: std::snprintf(buf, sizeof buf, "lynx alpha=%g beta=%d", p.alpha, p.beta); break;
    case lynx::policy::piggyback: std::snprintf(buf, sizeof buf, "piggyback keep_k=%d", p.keep_k); break;
    case lynx::policy::budget:
      if (p.budget_experts) std::snprintf(buf, sizeof buf, "budget experts=%d", p.budget_experts);
      else if (p.budget_fraction > 0) std::snprintf(buf, sizeof buf, "budget fraction=%g", p.budget_fraction);
      else std::snprintf(buf, sizeof buf, "budget mass=%g", p.budget_mass);
      break;
  }
  std::string s = buf;
  if (p.anchor_top1 && p.kind != lynx::policy::budget) s += " +anchor";
  s += p.score == lynx::scoring::sigmoid ? ", sigmoid" : ", softmax";
  if (p.renormalize) s += ", renormalize";
  const lynx::model_router& r = p.router;
  if (r.bias) s += ", bias";
  if (r.grouped())
    s += ", groups " + std::to_string(r.top_groups) + "/" + std::to_string(r.num_groups) + (r.relaxed_groups ? " relaxed" : " kept");
  if (r.scaling != 1.0f) {
    char sc[32];
    std::snprintf(sc, sizeof sc, ", scaling %g", r.scaling);
    s += sc;
  }
  return s;
}

/// Means over batches of the SPEC §6 measures.
struct summary {
  double unique_before = 0, unique_after = 0, retained = 0, top1_kept = 0, top1_prob = 0;
  int batches = 0, tokens = 0;
  void add(const lynx::batch_measures& m) {
    unique_before += m.unique_before;
    unique_after += m.unique_after;
    retained += m.retained_mass;
    top1_kept += m.top1_kept;
    ++batches;
  }
  double mean(double x) const { return batches ? x / batches : 0.0; }
  double fewer() const { return unique_before > 0 ? 1.0 - unique_after / unique_before : 0.0; }
};

inline double top1_probability(const float* row, int n) {
  double m = row[0], sum = 0;
  for (int e = 1; e < n; ++e) m = std::max(m, static_cast<double>(row[e]));
  for (int e = 0; e < n; ++e) sum += std::exp(row[e] - m);
  return 1.0 / sum;
}

inline int max_batch_rows(const trace& tr, int batch_size) {
  int rows = 0;
  for (std::size_t b = 0; b + 1 < tr.batch_offsets.size(); ++b)
    rows = std::max(rows, tr.batch_offsets[b + 1] - tr.batch_offsets[b]);
  return std::max(1, batch_size ? std::min(rows, batch_size) : rows);
}

/// Routes every (sub-)batch of every layer with Lynx. `on_batch(layer, first_row, rows, ids,
/// weights, measures)` sees each result; returns the summary per layer (the last entry: all).
inline std::vector<summary> evaluate(
    const trace& tr, const lynx::route_params& p, int batch_size, router& r,
    const std::function<void(int, int, int, const int*, const float*, const lynx::batch_measures&)>& on_batch = {}) {
  const int n = tr.num_experts, k = p.top_k, max_rows = max_batch_rows(tr, batch_size);
  std::vector<int> ids(static_cast<std::size_t>(max_rows) * k);
  std::vector<float> w(ids.size());
  std::vector<summary> out(tr.layers + 1);
  for (int l = 0; l < tr.layers; ++l) {
    summary& layer = out[l];
    const lynx::route_params pl = layer_params(p, tr, l);
    for (std::size_t b = 0; b + 1 < tr.batch_offsets.size(); ++b) {
      const int begin = tr.batch_offsets[b], end = tr.batch_offsets[b + 1];
      const int step = batch_size ? batch_size : std::max(end - begin, 1);
      for (int s = begin; s < end; s += step) {
        const int rows = std::min(step, end - s);
        const float* logits = tr.row(l, s);
        r.route(true, logits, rows, ids.data(), w.data(), pl);
        const lynx::batch_measures m = lynx::measure_batch(logits, n, rows, pl, ids.data());
        layer.add(m);
        out.back().add(m);
        for (int t = 0; t < rows; ++t) layer.top1_prob += top1_probability(logits + static_cast<std::size_t>(t) * n, n);
        layer.tokens += rows;
        if (on_batch) on_batch(l, s, rows, ids.data(), w.data(), m);
      }
    }
    out.back().top1_prob += layer.top1_prob;
    out.back().tokens += layer.tokens;
  }
  return out;
}

}  // namespace lynx_examples
