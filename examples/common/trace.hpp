#pragma once
// Router traces for the examples: a folder of .npy files (the ../shared/data/traces format)
// or the built-in generator, whose statistics are fitted to the FLAME-MoE decode trace.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "npy.hpp"

namespace lynx_examples {

struct trace {
  std::string name;
  int layers = 0, tokens = 0, num_experts = 0;
  int top_k = 0;                     // the model's k when meta.json says it, else 0
  std::vector<float> logits;         // [layers, tokens, num_experts]
  std::vector<int> batch_offsets;    // [batches + 1]
  std::vector<float> bias;           // [layers, num_experts] correction bias, or empty
  const float* row(int layer, int t) const {
    return logits.data() + (static_cast<std::size_t>(layer) * tokens + t) * num_experts;
  }
  const float* bias_of(int layer) const { return bias.data() + static_cast<std::size_t>(layer) * num_experts; }
};

inline bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

/// A correction bias file: float32 [layers, n], or [n] for every layer; returns [layers, n].
inline std::vector<float> load_bias_file(const std::string& path, int layers, int n) {
  const npy::array a = npy::load(path);
  if (a.descr != "<f4") throw std::runtime_error(path + " must be float32");
  std::vector<float> v = a.as<float>();
  if (a.shape.size() == 1 && static_cast<int>(a.shape[0]) == n) {
    std::vector<float> all;
    for (int l = 0; l < layers; ++l) all.insert(all.end(), v.begin(), v.end());
    return all;
  }
  if (a.shape.size() == 2 && static_cast<int>(a.shape[0]) == layers && static_cast<int>(a.shape[1]) == n) return v;
  throw std::runtime_error(path + " must be [L, N] or [N] with the trace's L = " + std::to_string(layers) +
                           " and N = " + std::to_string(n));
}

inline trace load_trace(const std::string& dir) {
  trace tr;
  tr.name = dir;
  const npy::array a = npy::load(dir + "/logits.npy");
  if (a.descr != "<f4") throw std::runtime_error("logits.npy must be float32");
  if (a.shape.size() == 3) {
    tr.layers = static_cast<int>(a.shape[0]);
    tr.tokens = static_cast<int>(a.shape[1]);
    tr.num_experts = static_cast<int>(a.shape[2]);
  } else if (a.shape.size() == 2) {
    tr.layers = 1;
    tr.tokens = static_cast<int>(a.shape[0]);
    tr.num_experts = static_cast<int>(a.shape[1]);
  } else {
    throw std::runtime_error("logits.npy must be [L,T,N] or [T,N]");
  }
  tr.logits = a.as<float>();
  if (file_exists(dir + "/batch_offsets.npy")) {
    tr.batch_offsets = npy::load(dir + "/batch_offsets.npy").as<std::int32_t>();
    if (tr.batch_offsets.size() < 2 || tr.batch_offsets.front() != 0 || tr.batch_offsets.back() != tr.tokens ||
        !std::is_sorted(tr.batch_offsets.begin(), tr.batch_offsets.end()))
      throw std::runtime_error("batch_offsets.npy must rise from 0 to the token count");
  } else {
    tr.batch_offsets = {0, tr.tokens};
  }
  if (file_exists(dir + "/bias.npy")) tr.bias = load_bias_file(dir + "/bias.npy", tr.layers, tr.num_experts);
  std::ifstream meta(dir + "/meta.json");
  if (meta) {
    std::stringstream ss;
    ss << meta.rdbuf();
    std::smatch m;
    const std::string text = ss.str();
    if (std::regex_search(text, m, std::regex("\"top_k\"\\s*:\\s*([0-9]+)"))) tr.top_k = std::stoi(m[1]);
  }
  return tr;
}

/// The built-in default: per layer, logits = tau_l * (g + pop_l) with g ~ N(0, 1) per token and
/// expert, pop_l ~ N(0, sigma_pop) per expert (some experts are popular in a layer), and tau_l
/// rising over the layers from a flat to a peaked router (concave, as in the real trace). tau and sigma_pop were fitted to the
/// FLAME-MoE-290M decode trace (README, "The built-in trace").
/// `biased` (DeepSeek-V3-like, for sigmoid routers with a correction bias): each layer also
/// gets bias_l[e] = -tau_l * pop_l[e] / 4, which cancels the popularity term of the choice score
/// sigmoid(l) + bias to first order (sigmoid'(0) = 1/4), as a trained correction bias evens out
/// the load; the unbiased scores, and so the weights, keep the popular experts' lead.
struct generator_options {
  int layers = 8, batches = 10, batch_tokens = 64, num_experts = 64, top_k = 6;
  float tau_min = 0.5f, tau_max = 1.5f, tau_gamma = 0.4f, sigma_pop = 0.18f;
  bool biased = false;
  std::uint32_t seed = 2411;
};

inline trace generate_trace(const generator_options& o) {
  trace tr;
  tr.name = o.biased ? "built-in generator (biased)" : "built-in generator";
  tr.layers = o.layers;
  tr.tokens = o.batches * o.batch_tokens;
  tr.num_experts = o.num_experts;
  tr.top_k = o.top_k;
  tr.logits.resize(static_cast<std::size_t>(tr.layers) * tr.tokens * tr.num_experts);
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int l = 0; l < tr.layers; ++l) {
    const float depth = static_cast<float>(l) / static_cast<float>(std::max(1, tr.layers - 1));
    const float tau = o.tau_min + (o.tau_max - o.tau_min) * std::pow(depth, o.tau_gamma);
    std::vector<float> pop(tr.num_experts);
    for (float& p : pop) p = o.sigma_pop * normal(rng);
    if (o.biased)
      for (const float p : pop) tr.bias.push_back(-0.25f * tau * p);
    for (int t = 0; t < tr.tokens; ++t)
      for (int e = 0; e < tr.num_experts; ++e)
        tr.logits[(static_cast<std::size_t>(l) * tr.tokens + t) * tr.num_experts + e] = tau * (normal(rng) + pop[e]);
  }
  for (int b = 0; b <= o.batches; ++b) tr.batch_offsets.push_back(b * o.batch_tokens);
  return tr;
}

}  // namespace lynx_examples
