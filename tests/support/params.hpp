#pragma once
// route_params for tests, in one line.

#include <lynx/params.hpp>

namespace lynx_test {

inline lynx::route_params params(int n, int k, float alpha = 1.0f, int beta = 1,
                                 lynx::scoring s = lynx::scoring::softmax, bool renorm = true) {
  lynx::route_params p;
  p.num_experts = n;
  p.top_k = k;
  p.alpha = alpha;
  p.beta = beta;
  p.score = s;
  p.renormalize = renorm;
  return p;
}

}  // namespace lynx_test
