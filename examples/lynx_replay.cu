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
#include "common/evaluate.hpp"
#include "common/model_flags.hpp"
#include "common/trace.hpp"

namespace {

using namespace lynx_examples;

const char* usage =
    "usage: lynx_replay [--trace DIR] [--top-k K] [--preset NAME | --alpha A --beta B]\n"
    "                   [--scoring softmax|sigmoid] [--renormalize] [--batch-size S]\n"
    "                   [--json] [--dump DIR] [--host] [--experts N (generator only)]\n"
    "                   [--policy lynx|piggyback|budget] [--anchor] [--keep-k K]\n"
    "                   [--budget-experts E | --budget-fraction F | --budget-mass M]\n"
    "                   [--model NAME] [--groups G --top-groups TG] [--scaling S]\n"
    "                   [--bias FILE] [--relaxed-groups]\n"
    "Without --trace it runs on the built-in generator (64 experts, top-6, 8 layers).\n"
    "Without --preset/--alpha it uses lynx::default_params(N, k), or with --model NAME\n"
    "lynx::default_params(model): the model's own router (docs/ROUTERS.md), its correction bias\n"
    "from bias.npy in the trace folder or --bias FILE (the generator makes one for such models).\n";

struct options {
  std::string trace_dir, preset_name, dump_dir;
  int top_k = 0, batch_size = 0, experts = 0;
  std::optional<float> alpha;
  std::optional<int> beta;
  std::optional<lynx::scoring> score;  // a preset's own scoring unless given
  bool renormalize = false, json = false, force_host = false, anchor = false;
  std::optional<lynx::policy> kind;
  int keep_k = 0, budget_experts = 0;
  float budget_fraction = 0, budget_mass = 0;
  model_flags model;
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
      else if (a == "--policy") {
        const std::string v = next();
        if (v == "lynx") o.kind = lynx::policy::lynx;
        else if (v == "piggyback") o.kind = lynx::policy::piggyback;
        else if (v == "budget") o.kind = lynx::policy::budget;
        else fail("--policy is lynx, piggyback or budget");
      } else if (a == "--anchor") o.anchor = true;
      else if (a == "--keep-k") o.keep_k = std::stoi(next());
      else if (a == "--budget-experts") o.budget_experts = std::stoi(next());
      else if (a == "--budget-fraction") o.budget_fraction = std::stof(next());
      else if (a == "--budget-mass") o.budget_mass = std::stof(next());
      else if (o.model.parse(a, next)) {
      } else if (a == "--help" || a == "-h") {
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    trace tr;
    if (o.trace_dir.empty()) {
      generator_options g;
      if (o.experts) g.num_experts = o.experts;
      if (o.top_k) g.top_k = o.top_k;
      o.model.shape_generator(g);
      tr = generate_trace(g);
    } else {
      tr = load_trace(o.trace_dir);
    }
    o.model.load_bias(tr);
    const auto routing = o.model.routing();
    const int n = tr.num_experts;
    const int k = o.top_k ? o.top_k : (routing ? routing->top_k : (tr.top_k ? tr.top_k : std::min(8, n)));

    lynx::route_params p;
    std::string policy;
    if (!o.preset_name.empty()) {
      const auto pr = lynx::find_preset(o.preset_name);
      if (!pr) {
        std::string names;
        for (const auto& x : lynx::presets) names += " " + std::string(x.name);
        fail("unknown preset " + o.preset_name + "; known:" + names);
      }
      if (pr->num_experts != n)
        std::fprintf(stderr, "note: preset %s is for N=%d, the trace has N=%d\n", o.preset_name.c_str(), pr->num_experts, n);
      p = lynx::params_from(*pr, o.renormalize);
      p.num_experts = n;
      p.top_k = k;
      policy = "preset " + o.preset_name;
    } else if (o.alpha || o.beta || o.kind) {
      // A model's default alpha where it has one (with a bias: bins in units of choice score).
      p = routing && routing->num_experts == n ? lynx::default_params(*routing) : lynx::default_params(n, k);
      p.top_k = k;
      p.kind = lynx::policy::lynx;
      p.anchor_top1 = false;
      if (o.alpha) p.alpha = *o.alpha;
      if (o.beta) p.beta = *o.beta;
      policy = "given";
    } else if (routing && routing->num_experts == n) {
      p = lynx::default_params(*routing);
      p.top_k = k;
      policy = "default for " + o.model.model;
    } else {
      p = lynx::default_params(n, k);
      policy = "default for N=" + std::to_string(n) + ", k=" + std::to_string(k);
    }
    p.renormalize = o.renormalize;
    if (o.score) p.score = *o.score;
    if (o.kind) p.kind = *o.kind;
    if (o.anchor) p.anchor_top1 = true;
    if (o.keep_k) p.keep_k = o.keep_k;
    if (o.budget_experts || o.budget_fraction > 0 || o.budget_mass > 0) {
      p.budget_experts = o.budget_experts;
      p.budget_fraction = o.budget_fraction;
      p.budget_mass = o.budget_mass;
    }
    o.model.apply(p, tr);
    if (const lynx::status s = lynx::check(p); s != lynx::status::success) fail(lynx::status_string(s));

    const bool use_device = !o.force_host && device_available();
    std::string backend = "host";
    if (use_device) {
      cudaDeviceProp prop;
      LYNX_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
      backend = std::string("device (") + prop.name + ")";
    }
    router r(use_device, max_batch_rows(tr, o.batch_size), p);

    std::printf("trace: %s  (%d layers x %d tokens, N=%d, k=%d)\n", tr.name.c_str(), tr.layers, tr.tokens, n, k);
    std::printf("policy: %s: %s\n", policy.c_str(), describe(p).c_str());
    std::printf("backend: %s%s\n", backend.c_str(), use_device || o.force_host ? "" : " (no CUDA device found)");
    std::printf("batch size: %s\n\n", o.batch_size ? std::to_string(o.batch_size).c_str() : "as in the trace");
    std::printf("%6s %8s %8s %9s %7s %9s %9s\n", "layer", "batches", "top1_p", "before", "after", "retained", "top1_kept");

    // --dump: Lynx's ids and weights, and the baseline router's (topk_route, host path) for the
    // same batches, in the same [layers, tokens, k] layout.
    std::vector<int> dump_ids, plain_ids;
    std::vector<float> dump_w, plain_w;
    if (!o.dump_dir.empty()) {
      dump_ids.assign(static_cast<std::size_t>(tr.layers) * tr.tokens * k, -1);
      dump_w.assign(dump_ids.size(), 0.0f);
      plain_ids = dump_ids, plain_w = dump_w;
    }
    const auto layers = evaluate(tr, p, o.batch_size, r,
                                 [&](int l, int first, int rows, const int* ids, const float* w, const lynx::batch_measures&) {
                                   if (o.dump_dir.empty()) return;
                                   const std::size_t at = (static_cast<std::size_t>(l) * tr.tokens + first) * k;
                                   std::copy_n(ids, static_cast<std::size_t>(rows) * k, dump_ids.begin() + at);
                                   std::copy_n(w, static_cast<std::size_t>(rows) * k, dump_w.begin() + at);
                                   if (lynx::host::topk_route(tr.row(l, first), n, rows, rows, layer_params(p, tr, l),
                                                              plain_ids.data() + at,
                                                              plain_w.data() + at) != lynx::status::success)
                                     fail("topk_route failed");
                                 });
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const summary& s = layers[l];
      const std::string name = l + 1 < layers.size() ? std::to_string(l) : "all";
      std::printf("%6s %8d %8.3f %9.2f %7.2f %9.4f %9.4f\n", name.c_str(), s.batches, s.tokens ? s.top1_prob / s.tokens : 0.0,
                  s.mean(s.unique_before), s.mean(s.unique_after), s.mean(s.retained), s.mean(s.top1_kept));
    }
    const summary& all = layers.back();
    const double before = all.mean(all.unique_before), after = all.mean(all.unique_after);
    std::printf("\nLynx touches %.1f%% fewer unique experts per batch (%.2f -> %.2f): about that much less expert-weight traffic in decode.\n",
                100.0 * all.fewer(), before, after);
    if (!o.dump_dir.empty()) {
      ::mkdir(o.dump_dir.c_str(), 0755);
      npy::save(o.dump_dir + "/ids.npy", dump_ids, {tr.layers, tr.tokens, k});
      npy::save(o.dump_dir + "/weights.npy", dump_w, {tr.layers, tr.tokens, k});
      npy::save(o.dump_dir + "/plain_ids.npy", plain_ids, {tr.layers, tr.tokens, k});
      npy::save(o.dump_dir + "/plain_weights.npy", plain_w, {tr.layers, tr.tokens, k});
      std::printf("wrote %s/{ids,weights,plain_ids,plain_weights}.npy [%d, %d, %d]\n", o.dump_dir.c_str(), tr.layers,
                  tr.tokens, k);
    }
    if (o.json)
      std::printf("{\"trace\": \"%s\", \"num_experts\": %d, \"top_k\": %d, \"policy\": \"%s\", \"batch_size\": %d, "
                  "\"batches\": %d, \"backend\": \"%s\", \"unique_before\": %.4f, \"unique_after\": %.4f, "
                  "\"retained_mass\": %.6f, \"top1_kept\": %.6f}\n",
                  tr.name.c_str(), n, k, describe(p).c_str(), o.batch_size, all.batches, r.on_device() ? "device" : "host", before, after,
                  all.mean(all.retained), all.mean(all.top1_kept));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lynx_replay: %s\n", e.what());
    return 1;
  }
}
