// Routes one small batch with the host path of an installed Lynx and checks the result.
#include <cstdio>
#include <vector>

#include <lynx/host.hpp>

int main() {
  lynx::route_params p = lynx::params_from(*lynx::find_preset("mixtral-8x7b"), /*renormalize=*/true);
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};
  std::vector<int> ids(2 * p.top_k);
  std::vector<float> weights(ids.size());
  const lynx::status s = lynx::host::route(logits.data(), p.num_experts, 2, 2, p, ids.data(), weights.data());
  std::printf("status %s, token 0 -> %d %d, token 1 -> %d %d\n", lynx::status_string(s), ids[0], ids[1], ids[2], ids[3]);
  return s == lynx::status::success ? 0 : 1;
}
