// The paper authors' outputs on 40 tie-free decode batches (../shared/data/vectors): ids exact,
// weights to 2e-6 relative, for every preset in the table of its README.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <lynx/host.hpp>

#include "../support/data_dir.hpp"
#include "../support/json.hpp"

namespace conformance_tests {

TEST(Conformance, AuthorsVectors) {
  const std::string path = lynx_test::shared_dir() + "/data/vectors/lynx_vectors.jsonl";
  if (!lynx_test::exists(path)) GTEST_SKIP() << "no conformance vectors at " << path << " (set LYNX_SHARED_DIR)";
  std::ifstream in(path);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto v = lynx_test::json::parse(line);
    const std::string name = v["name"].str;
    lynx::route_params p;
    p.num_experts = static_cast<int>(v["N"].num);
    p.top_k = static_cast<int>(v["k"].num);
    p.alpha = static_cast<float>(v["alpha"].num);
    p.beta = v["beta"].kind == lynx_test::json::null ? 0 : static_cast<int>(v["beta"].num);
    p.score = v["scoring"].str == "sigmoid" ? lynx::scoring::sigmoid : lynx::scoring::softmax;
    p.renormalize = v["renormalize"].num != 0;
    const int b = static_cast<int>(v["B"].num), n = p.num_experts, k = p.top_k;
    std::vector<float> L;
    for (const auto& row : v["logits"].items)
      for (const auto& x : row.items) L.push_back(static_cast<float>(x.num));
    ASSERT_EQ(static_cast<int>(L.size()), b * n) << name;
    std::vector<int> ids(b * k);
    std::vector<float> w(b * k);
    ASSERT_EQ(lynx::host::route(L.data(), n, b, b, p, ids.data(), w.data()), lynx::status::success);
    for (int t = 0; t < b; ++t)
      for (int i = 0; i < k; ++i) {
        const int want = static_cast<int>(v["ids"].items[t].items[i].num);
        const float want_w = static_cast<float>(v["weights"].items[t].items[i].num);
        ASSERT_EQ(ids[t * k + i], want) << name << " token " << t << " slot " << i;
        ASSERT_NEAR(w[t * k + i], want_w, 2e-6 * std::fabs(want_w)) << name << " token " << t;
      }
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

}  // namespace conformance_tests
