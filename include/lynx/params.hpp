#pragma once
// Parameters, presets and argument checking shared by the host path and the device launchers.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "batch.hpp"
#include "detail/config.hpp"

namespace lynx {

/// How the model turns router logits into weights (SPEC §2).
enum class scoring : int { softmax = 0, sigmoid = 1 };

/// How the active set K (the experts the batch loads) is chosen. Each token then takes its
/// top-k by logit inside K (SPEC §3.3 step 3), filled from outside K only if K has fewer.
enum class policy : int {
  lynx = 0,       ///< the paper: each token's top-k by z (SPEC §3)
  piggyback = 1,  ///< each token keeps its top-keep_k (Oncescu et al., arXiv 2511.02237)
  budget = 2,     ///< greedy max of the batch's retained router mass under a size limit
};

/// The model's own router where it is more than plain top-k (vLLM's grouped_topk, FlashInfer's
/// fused_topk_deepseek, TensorRT-LLM's noaux_tc): DeepSeek-V3/R1, Kimi-K2, GLM-4.5, MiniMax-M2
/// (sigmoid scores plus a per-expert correction bias for the choice, groups), DeepSeek-V2
/// (softmax, groups), and a routed scaling factor. The defaults are plain top-k. For each row:
/// - choice score c[e] = sigmoid(l[e]) + bias[e] with a bias (sigmoid scoring only), else the
///   logit itself (the same order as the score);
/// - with groups (N / num_groups experts each, in id order): a group's score is the sum of its
///   two largest c with a bias (DeepSeek-V3), else its largest c (DeepSeek-V2); the top_groups
///   best groups are kept (ties: the lower group), and the top-k by c is taken inside them
///   (ties: the lower id);
/// - weights from the unbiased scores of the chosen experts as SPEC §3.3 step 4 computes them
///   (renormalize or not), times `scaling`, in one more fp32 rounding.
/// topk_route and route take such a router on host and device with every policy, as
/// docs/ROUTERS.md defines, and remap_topk with the policies that read no bins (its lynx policy
/// reads affinity_bin's bins of the logits: status::unsupported_router).
struct model_router {
  const float* bias = nullptr;  ///< [N] e_score_correction_bias, fp32 (device memory for the launchers)
  int num_groups = 1;           ///< n_group, 1 .. 32, dividing N
  int top_groups = 1;           ///< topk_group, 1 .. num_groups, holding at least top_k experts
  float scaling = 1.0f;         ///< routed_scaling_factor (1: the caller applies it, or none)
  /// The Lynx policies' group limit (docs/ROUTERS.md): false (kept) lets a token take only
  /// experts of its own kept groups, as when groups map to devices; true (relaxed) lets it take
  /// any expert the batch loads. Its votes stay inside its kept groups either way.
  bool relaxed_groups = false;
  LYNX_HD bool grouped() const { return num_groups > 1; }
  /// Whether the choice differs from plain top-k (bias or groups).
  LYNX_HD bool custom_choice() const { return bias != nullptr || grouped(); }
  LYNX_HD bool plain() const { return !custom_choice() && scaling == 1.0f; }
};

/// Everything the model and the policy fix for a routing step; the batch itself is a
/// batch_ref (batch.hpp).
struct route_params {
  int num_experts = 0;  ///< N, 2 .. max_experts (any value, not only powers of two)
  int top_k = 0;        ///< k, 1 .. min(N, max_top_k)
  float alpha = 1.0f;   ///< bins per nat of router log-ratio, > 0 (SPEC §2)
  int beta = 0;         ///< deepest bin is -beta; 0 = no clamp (saturates at -max_bin_depth)
  scoring score = scoring::softmax;
  bool renormalize = true;
  /// SPEC §5 option: non-voting rows get `sentinel_id` (weight 0) instead of loaded ids.
  bool pad_with_sentinel = false;
  int sentinel_id = -1;

  policy kind = policy::lynx;
  /// Every voting token's argmax joins K (the paper finds losing the top-1 is what hurts).
  bool anchor_top1 = false;
  /// piggyback: experts each token keeps (1 .. top_k).
  int keep_k = 1;
  /// budget: the size limit, exactly one of: a number of experts (>= top_k), a fraction of
  /// the batch's plain top-k unique experts (0, 1], or a target mean retained mass (0, 1].
  int budget_experts = 0;
  float budget_fraction = 0.0f;
  float budget_mass = 0.0f;
  // Rows that must keep their plain top-k are the batch's, not the model's: batch_ref::pinned.

  /// The model's router beyond plain top-k (grouped, biased, scaled); plain by default.
  model_router router;
};

/// Why a call cannot run (CUTLASS style: a small enum with a string each).
enum class status : int {
  success = 0,
  invalid_num_experts,
  invalid_top_k,
  invalid_alpha,
  invalid_beta,
  invalid_row_stride,
  invalid_num_rows,
  invalid_token_count,
  null_pointer,
  invalid_sentinel,
  invalid_policy,
  invalid_layout,
  invalid_router,
  unsupported_router,
  invalid_scoring,
};

inline const char* status_string(status s) {
  switch (s) {
    case status::success: return "success";
    case status::invalid_num_experts: return "num_experts must be in [2, lynx::max_experts]";
    case status::invalid_top_k: return "top_k must be in [1, min(num_experts, lynx::max_top_k)]";
    case status::invalid_alpha: return "alpha must be finite and > 0";
    case status::invalid_beta: return "beta must be in [0, lynx::max_bin_depth]";
    case status::invalid_row_stride: return "row_stride must be >= num_experts";
    case status::invalid_num_rows: return "num_rows must be in [0, lynx::max_num_rows]";
    case status::invalid_token_count: return "the valid token count must be in [0, num_rows]";
    case status::null_pointer: return "a required pointer (a token count's too) is null";
    case status::invalid_sentinel: return "sentinel_id must lie outside [0, num_experts)";
    case status::invalid_layout:
      return "sorted layout: block_size must lie in [1, 2^20] where vLLM's arrays are asked for, and "
             "every size must fit in int32";
    case status::invalid_router:
      return "router: num_groups in [1, 32] dividing num_experts, top_groups in [1, num_groups] holding at "
             "least top_k experts, groups of at least 2 experts with a bias, a bias only with sigmoid "
             "scoring, scaling > 0 and at most lynx::max_router_scaling (2^100)";
    case status::invalid_scoring: return "score must be lynx::scoring::softmax or lynx::scoring::sigmoid";
    case status::unsupported_router:
      return "remap_topk's lynx policy reads affinity_bin's bins, which are of the logits: it does not take a "
             "grouped, biased or scaled router (route does, and remap_topk's other policies)";
    case status::invalid_policy:
      return "policy settings: piggyback needs keep_k in [1, top_k]; budget needs exactly one of "
             "budget_experts in [top_k, num_experts], budget_fraction or budget_mass in (0, 1]";
  }
  return "unknown status";
}

/// Checks the policy parameters alone.
inline status check(const route_params& p) {
  if (p.num_experts < 2 || p.num_experts > max_experts) return status::invalid_num_experts;
  if (p.top_k < 1 || p.top_k > p.num_experts || p.top_k > max_top_k) return status::invalid_top_k;
  if (p.score != scoring::softmax && p.score != scoring::sigmoid) return status::invalid_scoring;
  if (!(p.alpha > 0.0f) || !std::isfinite(p.alpha)) return status::invalid_alpha;
  if (p.beta < 0 || p.beta > max_bin_depth) return status::invalid_beta;
  if (p.pad_with_sentinel && p.sentinel_id >= 0 && p.sentinel_id < p.num_experts)
    return status::invalid_sentinel;
  {
    const model_router& r = p.router;
    const bool groups_ok = r.num_groups >= 1 && r.num_groups <= 32 && p.num_experts % r.num_groups == 0 &&
                           r.top_groups >= 1 && r.top_groups <= r.num_groups &&
                           r.top_groups * (p.num_experts / r.num_groups) >= p.top_k;
    const bool bias_ok = !r.bias || (p.score == scoring::sigmoid && (!r.grouped() || p.num_experts / r.num_groups >= 2));
    if (!groups_ok || !bias_ok || !(r.scaling > 0.0f && r.scaling <= max_router_scaling)) return status::invalid_router;
  }
  switch (p.kind) {
    case policy::lynx: break;
    case policy::piggyback:
      if (p.keep_k < 1 || p.keep_k > p.top_k) return status::invalid_policy;
      break;
    case policy::budget: {
      const bool by_count = p.budget_experts != 0, by_fraction = p.budget_fraction != 0.0f,
                 by_mass = p.budget_mass != 0.0f;
      if (by_count + by_fraction + by_mass != 1) return status::invalid_policy;
      if (by_count && (p.budget_experts < p.top_k || p.budget_experts > p.num_experts))
        return status::invalid_policy;
      if (by_fraction && !(p.budget_fraction > 0.0f && p.budget_fraction <= 1.0f))
        return status::invalid_policy;
      if (by_mass && !(p.budget_mass > 0.0f && p.budget_mass <= 1.0f)) return status::invalid_policy;
      break;
    }
    default: return status::invalid_policy;
  }
  return status::success;
}

/// The parameters a call with checked parameters p runs: p itself, except that with k = 1 a
/// policy whose K holds every voting token's top-1 runs as piggyback with keep_k 1, which reads
/// no bins and takes no greedy step. `route`, `host::route` and the device launcher
/// `remap_topk` apply it (the staged host `host::remap_topk` computes the policy as given: the
/// tests' reference); an engine that composes `block_route` in its own kernel passes it the
/// result (a host-side call, once per model). The ids and weights are the same bit for bit.
///
/// Why: with k = 1 each token's final top-1 inside such a K is its top-1 (a model router's:
/// its first choice). That holds for piggyback (keep_k is 1), for the lynx policy with the
/// top-1 anchor, and for the budget policy whenever its limit cannot be below the plain top-1
/// set (mass mode, fraction 1, N experts), since then K0 takes every anchor at once. The final
/// top-k, its weights, the never-worse decision and the pad ids look only at the final
/// choices, not at the rest of K. Under a router's relaxed group limit (docs/ROUTERS.md) a
/// token takes K's best expert by its choice score, maybe outside its groups: the same, since
/// every other member of K is one token's z-choice inside that token's groups, below its first
/// choice (also in K) in (score, lower id) order. (The budget's K at k = 1 is exactly the first
/// choices and the pinned rows' experts, as piggyback's: no share exceeds a first choice's, so
/// no step has a gain.)
inline route_params effective_params(route_params p) {
  if (p.top_k != 1) return p;
  const bool every_top1 =
      p.kind == policy::piggyback || (p.kind == policy::lynx && p.anchor_top1) ||
      (p.kind == policy::budget &&
       (p.budget_mass > 0.0f || p.budget_fraction >= 1.0f || p.budget_experts >= p.num_experts));
  if (every_top1) {
    p.kind = policy::piggyback;
    p.keep_k = 1;
  }
  return p;
}

/// remap_topk from staged bins (host and device): affinity_bin's bins are of the logits, not of
/// a model router's choice scores, so the lynx policy cannot take such a router there (route
/// can: it bins the choice scores itself).
inline status check_staged_router(const route_params& p) {
  return p.router.plain() || p.kind != policy::lynx ? status::success : status::unsupported_router;
}

/// Whether a call has rows to route: a device-side count may be anything, so it has.
inline bool has_rows(int num_rows, token_count valid) {
  return num_rows > 0 && (valid.by_pointer || valid.value > 0);
}

/// Checks one call's parameters and shapes, without looking at any data pointer: what a
/// workspace size query needs (CUB's rule). A host token count must lie in [0, num_rows]; a
/// device one is clamped to it in the kernels.
inline status check(const route_params& p, int num_rows, std::int64_t row_stride, token_count valid) {
  if (const status s = check(p); s != status::success) return s;
  if (num_rows < 0 || num_rows > max_num_rows) return status::invalid_num_rows;
  if (row_stride < p.num_experts) return status::invalid_row_stride;
  if (!valid.by_pointer && (valid.value < 0 || valid.value > num_rows)) return status::invalid_token_count;
  return status::success;
}

/// null_pointer if any of the pointers is null.
inline status check_pointers(std::initializer_list<const void*> required) {
  for (const void* ptr : required)
    if (!ptr) return status::null_pointer;
  return status::success;
}

/// The same for a call with rows, and the token count's pointer where it is given by one.
inline status check_pointers(token_count valid, std::initializer_list<const void*> required) {
  if (valid.by_pointer && !valid.device_ptr) return status::null_pointer;
  return check_pointers(required);
}

/// Checks one call: parameters and shapes, then the per-row pointers it reads or writes,
/// which are required only when it has rows to route (has_rows).
inline status check(const route_params& p, int num_rows, std::int64_t row_stride, token_count valid,
                    std::initializer_list<const void*> row_pointers) {
  if (const status s = check(p, num_rows, row_stride, valid); s != status::success) return s;
  return has_rows(num_rows, valid) ? check_pointers(valid, row_pointers) : status::success;
}

/// Histogram digits per expert for these parameters (bins 0 .. -depth).
inline int histogram_bins(const route_params& p) { return detail::bin_depth(p.beta) + 1; }

/// The library's default for a model with N experts and top-k (softmax scoring, no
/// renormalization; callers set those from their model). Chosen from the frontiers in the
/// README (lynx_frontier on the FLAME decode trace, checked on the generator at every SPEC
/// family's N and k):
/// - policy: budget with a target mean retained mass of 0.94, anchored at every token's top-1.
///   It dominates the paper's presets on the FLAME trace (batch 16: 26% fewer unique experts
///   at 0.944 retained mass, every top-1 kept). With k = 1 it keeps every token's only expert.
/// - (alpha, beta) for the lynx policy: beta = 2 and alpha = 2 when k/N >= 1/16, else 1.5:
///   sparser models put more experts inside a bin window and need a narrower one for the
///   same retained mass (about 0.95 on the generator at every family's N and k).
inline route_params default_params(int num_experts, int top_k) {
  route_params p;
  p.num_experts = num_experts;
  p.top_k = top_k;
  p.beta = 2;
  p.alpha = 16 * top_k >= num_experts ? 2.0f : 1.5f;
  p.renormalize = false;
  p.kind = policy::budget;
  p.budget_mass = 0.94f;
  p.anchor_top1 = true;
  return p;
}

/// A shipped (alpha, beta) pair and the model shape it was tuned for (SPEC §2 table).
struct preset {
  std::string_view name;
  int num_experts;
  int top_k;
  float alpha;
  int beta;
  scoring score;
};

inline constexpr preset presets[] = {
    {"qwen2-57b-a14b", 64, 8, 3.0f, 4, scoring::softmax},
    {"qwen3-30b-a3b", 128, 8, 3.0f, 2, scoring::softmax},
    {"qwen3-30b-a3b-a1b1", 128, 8, 1.0f, 1, scoring::softmax},
    {"qwen3-235b-a22b-instruct", 128, 8, 3.0f, 2, scoring::softmax},
    {"qwen3-235b-a22b-thinking", 128, 8, 1.0f, 2, scoring::softmax},
    {"mixtral-8x7b", 8, 2, 0.7f, 1, scoring::softmax},
    {"mixtral-8x22b", 8, 2, 1.0f, 1, scoring::softmax},
    {"deepseek-coder-v2", 160, 6, 1.0f, 2, scoring::softmax},
    {"gpt-oss-120b", 128, 4, 3.0f, 2, scoring::softmax},
    {"llama-4-scout", 16, 1, 1.0f, 0, scoring::sigmoid},
    {"llama-4-maverick", 128, 1, 1.0f, 0, scoring::sigmoid},
};

inline std::optional<preset> find_preset(std::string_view name) {
  for (const preset& p : presets)
    if (p.name == name) return p;
  return std::nullopt;
}

/// A model's own routing constants (its config.json), for topk_route's baseline. `biased`: the
/// model has an e_score_correction_bias per layer, which the caller passes (model_params).
struct model_routing {
  std::string_view name;
  int num_experts, top_k;
  scoring score;
  bool renormalize;  ///< norm_topk_prob (gpt-oss's softmax over the chosen experts is the same)
  bool biased;
  int num_groups, top_groups;  ///< n_group, topk_group
  float scaling;               ///< routed_scaling_factor
};

inline constexpr model_routing model_routings[] = {
    {"deepseek-v3", 256, 8, scoring::sigmoid, true, true, 8, 4, 2.5f},  // also DeepSeek-R1
    {"kimi-k2", 384, 8, scoring::sigmoid, true, true, 1, 1, 2.827f},
    {"glm-4.5", 160, 8, scoring::sigmoid, true, true, 1, 1, 2.5f},
    {"minimax-m2", 256, 8, scoring::sigmoid, true, true, 1, 1, 1.0f},
    {"deepseek-v2", 160, 6, scoring::softmax, false, false, 8, 3, 16.0f},
    {"deepseek-v2-lite", 64, 6, scoring::softmax, false, false, 1, 1, 1.0f},
    {"qwen3-next", 512, 10, scoring::softmax, true, false, 1, 1, 1.0f},
    {"qwen3-235b-a22b", 128, 8, scoring::softmax, true, false, 1, 1, 1.0f},
    {"gpt-oss-120b", 128, 4, scoring::softmax, true, false, 1, 1, 1.0f},
};

inline std::optional<model_routing> find_model(std::string_view name) {
  for (const model_routing& m : model_routings)
    if (m.name == name) return m;
  return std::nullopt;
}

/// topk_route's parameters for a model: its scoring, renormalize and router, with the layer's
/// correction bias (required where m.biased; device memory for the launchers, host memory for
/// the host path). route takes them with any policy, on host and device.
inline route_params model_params(const model_routing& m, const float* bias = nullptr) {
  route_params p;
  p.num_experts = m.num_experts;
  p.top_k = m.top_k;
  p.score = m.score;
  p.renormalize = m.renormalize;
  p.router.bias = m.biased ? bias : nullptr;
  p.router.num_groups = m.num_groups;
  p.router.top_groups = m.top_groups;
  p.router.scaling = m.scaling;
  return p;
}

/// The library's default for a model's own routing (model_params, with its correction bias
/// where it has one): default_params(N, k)'s policy, a budget of 0.94 mean retained mass
/// anchored at every token's first choice, on the model's choice scores and groups with the group
/// limit kept (docs/ROUTERS.md), and the model's scoring, renormalize and scaling. The budget
/// reads no bins; alpha, beta are set for the lynx policy: default_params(N, k)'s for a router
/// without a bias; with one the bins are in units of choice score (sigmoid plus bias), where
/// alpha 20 gives bins of 0.05.
inline route_params default_params(const model_routing& m, const float* bias = nullptr) {
  route_params p = model_params(m, bias);
  const route_params d = default_params(m.num_experts, m.top_k);
  p.beta = d.beta;
  p.alpha = m.biased ? 20.0f : d.alpha;
  p.kind = d.kind;
  p.budget_mass = d.budget_mass;
  p.anchor_top1 = d.anchor_top1;
  return p;
}

/// Parameters for a preset; the caller still chooses renormalize and padding behaviour.
inline route_params params_from(const preset& pr, bool renormalize) {
  route_params p;
  p.num_experts = pr.num_experts;
  p.top_k = pr.top_k;
  p.alpha = pr.alpha;
  p.beta = pr.beta;
  p.score = pr.score;
  p.renormalize = renormalize;
  return p;
}

}  // namespace lynx
