// lynx_replay: route every batch of a router trace with plain top-k and with Lynx, and print
// what Lynx saves (unique experts) and what it costs (retained mass, top-1 kept), SPEC §6.
// Runs on the GPU when there is one, on the host path otherwise.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <lynx/lynx.cuh>

#include "common/npy.hpp"
#include "common/trace.hpp"

namespace {

const char* usage =
    "usage: lynx_replay [--trace DIR] [--top-k K] [--preset NAME | --alpha A --beta B]\n"
    "                   [--scoring softmax|sigmoid] [--renormalize] [--batch-size S]\n"
    "                   [--json] [--dump DIR] [--host] [--experts N (generator only)]\n"
    "Without --trace it runs on the built-in generator (64 experts, top-6, 8 layers).\n"
    "Without --preset/--alpha it uses lynx::default_params(N, k).\n";

struct options {
  std::string trace_dir, preset_name, dump_dir;
  int top_k = 0, batch_size = 0, experts = 0;
  std::optional<float> alpha;
  std::optional<int> beta;
  std::optional<lynx::scoring> score;  // a preset's own scoring unless given
  bool renormalize = false, json = false, force_host = false;
};

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "lynx_replay: %s\n%s", msg.c_str(), usage);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail("missing value after " + a);
      return argv[++i];
    };
    try {
      if (a == "--trace") o.trace_dir = next();
      else if (a == "--top-k") o.top_k = std::stoi(next());
      else if (a == "--preset") o.preset_name = next();
      else if (a == "--alpha") o.alpha = std::stof(next());
      else if (a == "--beta") o.beta = std::stoi(next());
      else if (a == "--scoring") {
        const std::string s = next();
        if (s != "softmax" && s != "sigmoid") fail("--scoring is softmax or sigmoid");
        o.score = s == "sigmoid" ? lynx::scoring::sigmoid : lynx::scoring::softmax;
      } else if (a == "--renormalize") o.renormalize = true;
      else if (a == "--batch-size") o.batch_size = std::stoi(next());
      else if (a == "--json") o.json = true;
      else if (a == "--dump") o.dump_dir = next();
      else if (a == "--host") o.force_host = true;
      else if (a == "--experts") o.experts = std::stoi(next());
      else if (a == "--help" || a == "-h") {
        std::printf("%s", usage);
        std::exit(0);
      } else fail("unknown argument " + a);
    } catch (const std::invalid_argument&) {
      fail("bad number after " + a);
    }
  }
  if (!o.preset_name.empty() && (o.alpha || o.beta)) fail("give --preset or --alpha/--beta, not both");
  if (o.batch_size < 0) fail("--batch-size must be positive");
  return o;
}

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    const cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(err_)); \
  } while (0)

// Routes one batch with both routers, on the device or on the host path.
class router {
 public:
  router(bool use_device, int max_rows, const lynx::route_params& p) : device_(use_device), p_(p) {
    if (!device_) return;
    const std::size_t n = static_cast<std::size_t>(max_rows) * p.num_experts, nk = static_cast<std::size_t>(max_rows) * p.top_k;
    std::size_t a = 0, b = 0;
    CUDA_OK((lynx::route<float, int>(nullptr, a, nullptr, p.num_experts, max_rows, max_rows, p, nullptr, nullptr)));
    CUDA_OK((lynx::topk_route<float, int>(nullptr, b, nullptr, p.num_experts, max_rows, max_rows, p, nullptr, nullptr)));
    ws_bytes_ = std::max(a, b);
    CUDA_OK(cudaMalloc(&ws_, ws_bytes_));
    CUDA_OK(cudaMalloc(&logits_, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&ids_, nk * sizeof(int)));
    CUDA_OK(cudaMalloc(&weights_, nk * sizeof(float)));
  }
  ~router() {
    if (!device_) return;
    cudaFree(ws_);
    cudaFree(logits_);
    cudaFree(ids_);
    cudaFree(weights_);
  }
  router(const router&) = delete;
  router& operator=(const router&) = delete;

  void route(bool lynx_step, const float* logits, int rows, int* ids, float* weights) {
    if (!device_) {
      const lynx::status s = lynx_step ? lynx::host::route(logits, p_.num_experts, rows, rows, p_, ids, weights)
                                       : lynx::host::topk_route(logits, p_.num_experts, rows, rows, p_, ids, weights);
      if (s != lynx::status::success) throw std::runtime_error(lynx::status_string(s));
      return;
    }
    const std::size_t nk = static_cast<std::size_t>(rows) * p_.top_k;
    CUDA_OK(cudaMemcpy(logits_, logits, static_cast<std::size_t>(rows) * p_.num_experts * sizeof(float), cudaMemcpyHostToDevice));
    std::size_t bytes = ws_bytes_;
    if (lynx_step)
      CUDA_OK(lynx::route(ws_, bytes, logits_, p_.num_experts, rows, rows, p_, ids_, weights_));
    else
      CUDA_OK(lynx::topk_route(ws_, bytes, logits_, p_.num_experts, rows, rows, p_, ids_, weights_));
    CUDA_OK(cudaMemcpy(ids, ids_, nk * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(weights, weights_, nk * sizeof(float), cudaMemcpyDeviceToHost));
  }

 private:
  bool device_;
  lynx::route_params p_;
  void* ws_ = nullptr;
  std::size_t ws_bytes_ = 0;
  float* logits_ = nullptr;
  int* ids_ = nullptr;
  float* weights_ = nullptr;
};

struct totals {
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
};

double top1_probability(const float* row, int n) {
  double m = row[0], sum = 0;
  for (int e = 1; e < n; ++e) m = std::max(m, static_cast<double>(row[e]));
  for (int e = 0; e < n; ++e) sum += std::exp(row[e] - m);
  return 1.0 / sum;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    lynx_examples::trace tr;
    if (o.trace_dir.empty()) {
      lynx_examples::generator_options g;
      if (o.experts) g.num_experts = o.experts;
      if (o.top_k) g.top_k = o.top_k;
      tr = lynx_examples::generate_trace(g);
    } else {
      tr = lynx_examples::load_trace(o.trace_dir);
    }
    const int n = tr.num_experts;
    const int k = o.top_k ? o.top_k : (tr.top_k ? tr.top_k : std::min(8, n));

    lynx::route_params p;
    std::string policy;
    if (!o.preset_name.empty()) {
      const auto pr = lynx::find_preset(o.preset_name);
      if (!pr) {
        std::string names;
        for (const auto& x : lynx::presets) names += " " + std::string(x.name);
        fail("unknown preset " + o.preset_name + "; known:" + names);
      }
      p = lynx::params_from(*pr, o.renormalize);
      if (pr->num_experts != n) std::fprintf(stderr, "note: preset %s is for N=%d, the trace has N=%d\n", o.preset_name.c_str(), pr->num_experts, n);
      p.num_experts = n;
      p.top_k = k;
      policy = "preset " + o.preset_name;
    } else {
      p = lynx::default_params(n, k);
      policy = "default for N=" + std::to_string(n) + ", k=" + std::to_string(k);
      if (o.alpha) p.alpha = *o.alpha;
      if (o.beta) p.beta = *o.beta;
      if (o.alpha || o.beta) policy = "given";
      p.renormalize = o.renormalize;
    }
    if (o.score) p.score = *o.score;
    if (const lynx::status s = lynx::check(p); s != lynx::status::success) fail(lynx::status_string(s));

    int max_rows = 0;
    for (std::size_t b = 0; b + 1 < tr.batch_offsets.size(); ++b)
      max_rows = std::max(max_rows, tr.batch_offsets[b + 1] - tr.batch_offsets[b]);
    if (o.batch_size) max_rows = std::min(max_rows, o.batch_size);

    int devices = 0;
    const bool use_device = !o.force_host && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    std::string backend = "host";
    if (use_device) {
      cudaDeviceProp prop;
      CUDA_OK(cudaGetDeviceProperties(&prop, 0));
      backend = std::string("device (") + prop.name + ")";
    }
    router r(use_device, std::max(max_rows, 1), p);

    {
      std::printf("trace: %s  (%d layers x %d tokens, N=%d, k=%d)\n", tr.name.c_str(), tr.layers, tr.tokens, n, k);
      std::printf("policy: %s: alpha=%g beta=%d, %s%s\n", policy.c_str(), p.alpha, p.beta,
                  p.score == lynx::scoring::sigmoid ? "sigmoid" : "softmax", p.renormalize ? ", renormalize" : "");
      std::printf("backend: %s%s\n", backend.c_str(), use_device ? "" : " (no CUDA device found)");
      std::printf("batch size: %s\n\n", o.batch_size ? std::to_string(o.batch_size).c_str() : "as in the trace");
      std::printf("%6s %8s %8s %9s %7s %9s %9s\n", "layer", "batches", "top1_p", "before", "after", "retained", "top1_kept");
    }

    std::vector<int> dump_ids, ids(static_cast<std::size_t>(max_rows) * k), plain_ids(ids.size());
    std::vector<float> dump_w, w(ids.size());
    if (!o.dump_dir.empty()) {
      dump_ids.assign(static_cast<std::size_t>(tr.layers) * tr.tokens * k, -1);
      dump_w.assign(dump_ids.size(), 0.0f);
    }
    totals all;
    for (int l = 0; l < tr.layers; ++l) {
      totals layer;
      for (std::size_t b = 0; b + 1 < tr.batch_offsets.size(); ++b) {
        const int begin = tr.batch_offsets[b], end = tr.batch_offsets[b + 1];
        const int step = o.batch_size ? o.batch_size : std::max(end - begin, 1);
        for (int s = begin; s < end; s += step) {
          const int rows = std::min(step, end - s);
          const float* logits = tr.row(l, s);
          r.route(true, logits, rows, ids.data(), w.data());
          const lynx::batch_measures m = lynx::measure_batch(logits, n, rows, p, ids.data());
          layer.add(m);
          all.add(m);
          for (int t = 0; t < rows; ++t) {
            layer.top1_prob += top1_probability(logits + static_cast<std::size_t>(t) * n, n);
            ++layer.tokens;
          }
          if (!o.dump_dir.empty()) {
            const std::size_t at = (static_cast<std::size_t>(l) * tr.tokens + s) * k;
            std::copy_n(ids.begin(), static_cast<std::size_t>(rows) * k, dump_ids.begin() + at);
            std::copy_n(w.begin(), static_cast<std::size_t>(rows) * k, dump_w.begin() + at);
          }
        }
      }
      all.top1_prob += layer.top1_prob;
      all.tokens += layer.tokens;
      std::printf("%6d %8d %8.3f %9.2f %7.2f %9.4f %9.4f\n", l, layer.batches, layer.tokens ? layer.top1_prob / layer.tokens : 0.0,
                  layer.mean(layer.unique_before), layer.mean(layer.unique_after), layer.mean(layer.retained), layer.mean(layer.top1_kept));
    }
    const double before = all.mean(all.unique_before), after = all.mean(all.unique_after);
    std::printf("%6s %8d %8.3f %9.2f %7.2f %9.4f %9.4f\n", "all", all.batches, all.tokens ? all.top1_prob / all.tokens : 0.0, before, after,
                all.mean(all.retained), all.mean(all.top1_kept));
    std::printf("\nLynx touches %.1f%% fewer unique experts per batch (%.2f -> %.2f): about that much less expert-weight traffic in decode.\n",
                before > 0 ? 100.0 * (1.0 - after / before) : 0.0, before, after);
    if (!o.dump_dir.empty()) {
      ::mkdir(o.dump_dir.c_str(), 0755);
      npy::save(o.dump_dir + "/ids.npy", dump_ids, {tr.layers, tr.tokens, k});
      npy::save(o.dump_dir + "/weights.npy", dump_w, {tr.layers, tr.tokens, k});
      std::printf("wrote %s/ids.npy and %s/weights.npy [%d, %d, %d]\n", o.dump_dir.c_str(), o.dump_dir.c_str(), tr.layers, tr.tokens, k);
    }
    if (o.json)
      std::printf("{\"trace\": \"%s\", \"num_experts\": %d, \"top_k\": %d, \"alpha\": %g, \"beta\": %d, \"batch_size\": %d, "
                  "\"batches\": %d, \"backend\": \"%s\", \"unique_before\": %.4f, \"unique_after\": %.4f, "
                  "\"retained_mass\": %.6f, \"top1_kept\": %.6f}\n",
                  tr.name.c_str(), n, k, p.alpha, p.beta, o.batch_size, all.batches, use_device ? "device" : "host", before, after,
                  all.mean(all.retained), all.mean(all.top1_kept));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lynx_replay: %s\n", e.what());
    return 1;
  }
}
