#pragma once
// The tools' routing description (docs/ROUTERS.md): a model's routing constants by name
// (--model), or flags (--groups, --top-groups, --scaling, --bias, --relaxed-groups), and the
// correction bias: bias.npy in the trace folder, --bias FILE, or the generator's.

#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <lynx/params.hpp>

#include "npy.hpp"
#include "trace.hpp"

namespace lynx_examples {

inline constexpr const char* model_flags_usage =
    "                   [--model NAME] [--groups G --top-groups TG] [--scaling S]\n"
    "                   [--bias FILE] [--relaxed-groups]\n";

struct model_flags {
  std::string model, bias_file;
  int groups = 0, top_groups = 0;
  float scaling = 0.0f;
  bool relaxed = false;

  /// Consumes argument `a` (with `next` for its value) if it is one of these flags.
  bool parse(const std::string& a, const std::function<std::string()>& next) {
    if (a == "--model") model = next();
    else if (a == "--bias") bias_file = next();
    else if (a == "--groups") groups = std::stoi(next());
    else if (a == "--top-groups") top_groups = std::stoi(next());
    else if (a == "--scaling") scaling = std::stof(next());
    else if (a == "--relaxed-groups") relaxed = true;
    else return false;
    return true;
  }

  /// The named model's routing constants (throws on an unknown name); nullopt without --model.
  std::optional<lynx::model_routing> routing() const {
    if (model.empty()) return std::nullopt;
    const auto m = lynx::find_model(model);
    if (!m) {
      std::string names;
      for (const auto& x : lynx::model_routings) names += " " + std::string(x.name);
      throw std::runtime_error("unknown model " + model + "; known:" + names);
    }
    return m;
  }

  /// The generator's shape and mode for the model (its N and k; a correction bias if it has one).
  void shape_generator(generator_options& g) const {
    if (const auto m = routing()) {
      g.num_experts = m->num_experts;
      g.top_k = m->top_k;
      g.biased = m->biased;
    }
  }

  /// Loads --bias FILE into the trace (float32 [L, N] or [N]).
  void load_bias(trace& tr) const {
    if (!bias_file.empty()) tr.bias = load_bias_file(bias_file, tr.layers, tr.num_experts);
  }

  /// The router onto p: the model's scoring, renormalize and router constants, then the flags'.
  /// A bias is used where the trace has one (per layer: evaluate() points p at each layer's);
  /// a model with a correction bias needs one.
  void apply(lynx::route_params& p, const trace& tr) const {
    const auto m = routing();
    if (m) {
      if (m->num_experts != p.num_experts)
        throw std::runtime_error("model " + model + " has N=" + std::to_string(m->num_experts) + ", the trace N=" +
                                 std::to_string(p.num_experts));
      if (m->biased && tr.bias.empty())
        throw std::runtime_error("model " + model + " routes with a correction bias: give bias.npy in the trace "
                                 "folder or --bias FILE");
      p.score = m->score;
      p.renormalize = m->renormalize;
      p.router.num_groups = m->num_groups;
      p.router.top_groups = m->top_groups;
      p.router.scaling = m->scaling;
    }
    if (groups && !top_groups) throw std::runtime_error("--groups needs --top-groups");
    if (groups) p.router.num_groups = groups;
    if (top_groups) p.router.top_groups = top_groups;
    if (scaling > 0.0f) p.router.scaling = scaling;
    p.router.relaxed_groups = relaxed;
    // A model without a correction bias ignores one in the trace folder; given by --bias, it
    // is an error there, as it is with softmax scores.
    const bool use_bias = !tr.bias.empty() && (m ? m->biased || !bias_file.empty() : true);
    if (use_bias && p.score != lynx::scoring::sigmoid)
      throw std::runtime_error("a correction bias needs sigmoid scores (--scoring sigmoid or a sigmoid --model)");
    if (m && !m->biased && !tr.bias.empty() && bias_file.empty())
      std::fprintf(stderr, "note: model %s has no correction bias; bias.npy in the trace folder is ignored\n",
                   model.c_str());
    p.router.bias = use_bias ? tr.bias_of(0) : nullptr;
  }
};

}  // namespace lynx_examples
