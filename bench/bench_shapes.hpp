#pragma once
// The model shapes every benchmark runs at (issue: decode speed), and their policies.

#include <lynx/params.hpp>

namespace lynx_bench {

struct model_shape {
  const char* name;
  int num_experts, top_k;
  lynx::scoring score;
};

inline constexpr model_shape model_shapes[] = {
    {"mixtral-8x7b", 8, 2, lynx::scoring::softmax},     {"qwen2-57b-a14b", 64, 8, lynx::scoring::softmax},
    {"deepseek-v2-lite", 64, 6, lynx::scoring::softmax}, {"qwen3-30b-a3b", 128, 8, lynx::scoring::softmax},
    {"gpt-oss-120b", 128, 4, lynx::scoring::softmax},    {"deepseek-coder-v2", 160, 6, lynx::scoring::softmax},
    {"deepseek-v3", 256, 8, lynx::scoring::softmax},     {"qwen3-next", 512, 10, lynx::scoring::softmax},
    {"llama-4-scout", 16, 1, lynx::scoring::sigmoid},    {"llama-4-maverick", 128, 1, lynx::scoring::sigmoid},
};

inline constexpr int batch_sizes[] = {1, 4, 16, 32, 64, 256};

inline lynx::route_params shape_params(const model_shape& m) {
  lynx::route_params p = lynx::default_params(m.num_experts, m.top_k);
  p.score = m.score;
  p.renormalize = m.score == lynx::scoring::softmax;
  return p;
}

}  // namespace lynx_bench
