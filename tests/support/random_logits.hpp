#pragma once
// Random router logits for tests, optionally quantized so that logit ties and bin-edge
// values are common (the adversarial side of the invariants).

#include <cstdint>
#include <random>
#include <vector>

namespace lynx_test {

inline std::vector<float> random_logits(int rows, int n, std::uint32_t seed, float scale = 1.0f,
                                        float quantum = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(rows) * n);
  for (float& x : v) {
    x = normal(rng);
    if (quantum > 0) x = static_cast<float>(static_cast<int>(x / quantum)) * quantum;
  }
  return v;
}

}  // namespace lynx_test
