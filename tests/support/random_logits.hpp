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

/// A test's independent choices from a fixed generator: pick(c) is in [0, c), so that a case's
/// settings follow neither its loop index nor each other.
class picker {
 public:
  explicit picker(std::uint32_t seed) : rng_(seed) {}
  int operator()(int choices) { return static_cast<int>(rng_() % static_cast<std::uint32_t>(choices)); }

 private:
  std::mt19937 rng_;
};

}  // namespace lynx_test
