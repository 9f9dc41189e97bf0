#pragma once
// The router logits every device benchmark routes: the built-in generator's mid layer at the
// shape's (N, k), T rows, converted to the benchmark's logit type.

#include <cstddef>
#include <vector>

#include "../examples/common/trace.hpp"
#include "bench_shapes.hpp"

namespace lynx_bench {

template <class T = float>
std::vector<T> generator_logits(const model_shape& m, int rows) {
  lynx_examples::generator_options g;
  g.num_experts = m.num_experts;
  g.top_k = m.top_k;
  g.batches = 1;
  g.batch_tokens = rows;
  const auto tr = lynx_examples::generate_trace(g);
  const float* mid = tr.row(tr.layers / 2, 0);
  std::vector<T> out(static_cast<std::size_t>(rows) * m.num_experts);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(mid[i]);
  return out;
}

}  // namespace lynx_bench
