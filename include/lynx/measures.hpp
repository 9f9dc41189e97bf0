#pragma once
// SPEC §6: how much a routing saves and what it costs, for one batch, on the host.

#include <cstdint>
#include <vector>

#include "detail/row_math.hpp"
#include "params.hpp"

namespace lynx {

struct batch_measures {
  int voting_tokens = 0;     ///< rows that vote (valid, with a finite logit)
  int unique_before = 0;     ///< experts touched by plain top-k (the model's own router)
  int unique_after = 0;      ///< experts touched by the given routing
  double retained_mass = 0;  ///< mean of P(final) / P(original top-k) over voting rows
  double top1_kept = 0;      ///< fraction of voting rows whose argmax is still chosen
};

/// Measures a routing `ids` [num_valid x k] against plain top-k of the same logits, or against
/// the model's own choice where p.router has one (bias in host memory; the top-1 is then its
/// first choice). The router probability is the softmax or the sigmoid of the logits, as
/// p.score says (unbiased, as the weights are).
template <class T, class IdT>
batch_measures measure_batch(const T* logits, std::int64_t row_stride, int num_valid,
                             const route_params& p, const IdT* ids) {
  namespace d = detail;
  const int n = p.num_experts, k = p.top_k;
  std::vector<std::uint8_t> before(n, 0), after(n, 0);
  std::vector<float> prob(n);
  batch_measures r;
  std::uint64_t best[max_top_k];
  for (int t = 0; t < num_valid; ++t) {
    const T* row = logits + t * row_stride;
    const float m = d::row_max(row, n);
    if (m == -INFINITY) continue;
    ++r.voting_tokens;
    double total = 0;
    for (int e = 0; e < n; ++e) {
      const float l = d::load_logit(row, e);
      prob[e] = p.score == scoring::sigmoid ? d::sigmoid(l) : d::exp_f32(l - m);
      total += prob[e];
    }
    if (p.score == scoring::sigmoid) total = 1.0;
    if (p.router.custom_choice()) {  // the model's own choice, first choice first
      float c[max_experts];
      for (int e = 0; e < n; ++e) c[e] = d::choice_score(d::load_logit(row, e), p.router.bias, e);
      d::router_choice(c, n, k, p.router, d::router_groups(c, n, p.router), best);
    } else {
      d::plain_topk(row, n, k, best);
    }
    double orig = 0, fin = 0;
    for (int i = 0; i < k; ++i) {
      before[d::key_expert(best[i])] = 1;
      orig += prob[d::key_expert(best[i])] / total;
    }
    bool kept = false;
    for (int i = 0; i < k; ++i) {
      const int e = static_cast<int>(ids[static_cast<std::int64_t>(t) * k + i]);
      after[e] = 1;
      fin += prob[e] / total;
      kept |= e == d::key_expert(best[0]);
    }
    r.retained_mass += orig > 0 ? fin / orig : 1.0;
    r.top1_kept += kept ? 1.0 : 0.0;
  }
  for (int e = 0; e < n; ++e) {
    r.unique_before += before[e];
    r.unique_after += after[e];
  }
  if (r.voting_tokens > 0) {
    r.retained_mass /= r.voting_tokens;
    r.top1_kept /= r.voting_tokens;
  }
  return r;
}

}  // namespace lynx
