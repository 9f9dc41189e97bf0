#pragma once
// An independent, literal transcription of SPEC §3-§5 for tests: exact z as a scaled 128-bit
// integer (no rank trick), weights in double. Deliberately shares no code with the library.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

namespace lynx_test {

struct ref_params {
  int n, k;
  float alpha;
  int beta;  // 0: no clamp (the library saturates at depth 31)
  bool sigmoid = false;
  bool renormalize = true;
};

struct ref_result {
  std::vector<int> ids;        // [rows x k], descending weight then ascending id
  std::vector<double> weights;  // [rows x k]
  std::vector<int> active;     // K, ascending
  bool fell_back = false;
};

inline float ref_sanitize(float x) {
  if (std::isnan(x)) return -INFINITY;
  if (x == INFINITY) return FLT_MAX;
  return x;
}

inline int ref_depth(int beta) { return beta > 0 ? beta : 31; }

inline int ref_bin(float l, float m, float alpha, int beta) {
  const float d = l - m;       // the first fp32 rounding
  const float x = alpha * d;   // the second
  const int depth = ref_depth(beta);
  if (std::isinf(x) || std::isnan(x)) return -depth;
  const double q = std::ceil(static_cast<double>(x));
  return static_cast<int>(std::max(q, static_cast<double>(-depth)));
}

// Top-k of `keys` by (primary desc, logit desc, id asc) among `allowed`.
template <class Primary>
std::vector<int> ref_topk(int n, int k, const std::vector<float>& l, const std::vector<char>& allowed,
                          Primary primary) {
  std::vector<int> idx;
  for (int e = 0; e < n; ++e)
    if (allowed[e]) idx.push_back(e);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) {
    const auto pa = primary(a), pb = primary(b);
    if (pa != pb) return pa > pb;
    if (l[a] != l[b]) return l[a] > l[b];
    return a < b;
  });
  idx.resize(std::min<std::size_t>(k, idx.size()));
  return idx;
}

inline std::vector<double> ref_weights(const std::vector<float>& l, const std::vector<int>& chosen,
                                       const std::vector<int>& orig, const ref_params& p) {
  const int n = static_cast<int>(l.size());
  const double m = *std::max_element(l.begin(), l.end());
  auto act = [&](int e) {
    return p.sigmoid ? 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])))
                     : std::exp(static_cast<double>(l[e]) - m);
  };
  double csum = 0, osum = 0, all = 0;
  for (int e : chosen) csum += act(e);
  for (int e : orig) osum += act(e);
  for (int e = 0; e < n; ++e) all += act(e);
  std::vector<double> w;
  for (int e : chosen) {
    double v = csum > 0 ? act(e) / csum : 0.0;
    if (!p.renormalize) v *= p.sigmoid ? osum : osum / all;
    w.push_back(v);
  }
  return w;
}

/// SPEC §3 for rows [0, rows) of row-major float logits, valid rows [0, b).
/// Throws when exact z would overflow 127 bits (keep b and depth small in such tests).
inline ref_result ref_route(const std::vector<float>& raw, int rows, int b, const ref_params& p) {
  const int n = p.n, k = p.k, depth = ref_depth(p.beta);
  std::vector<std::vector<float>> L(rows, std::vector<float>(n));
  std::vector<char> votes(rows, 0);
  std::vector<std::vector<int>> q(rows, std::vector<int>(n));
  for (int t = 0; t < rows; ++t) {
    for (int e = 0; e < n; ++e) L[t][e] = ref_sanitize(raw[static_cast<std::size_t>(t) * n + e]);
    const float m = *std::max_element(L[t].begin(), L[t].end());
    votes[t] = t < b && m != -INFINITY;
    if (votes[t])
      for (int e = 0; e < n; ++e) q[t][e] = ref_bin(L[t][e], m, p.alpha, p.beta);
  }
  // Exact scaled scores: Z = B^(depth+1) * z, with B^q = B^(depth+q) / B^depth.
  using i128 = __int128;
  const i128 base = std::max(b, 1);
  if ((depth + 2) * std::log2(static_cast<double>(base)) > 120) throw std::runtime_error("overflow");
  std::vector<i128> pw(depth + 2, 1);
  for (int i = 1; i <= depth + 1; ++i) pw[i] = pw[i - 1] * base;
  std::vector<i128> H(n, 0);  // H * B^depth
  for (int t = 0; t < rows; ++t)
    if (votes[t])
      for (int e = 0; e < n; ++e) H[e] += pw[depth + q[t][e]];
  const std::vector<char> all(n, 1);
  std::vector<char> in_k(n, 0), in_plain(n, 0), in_final(n, 0);
  std::vector<std::vector<int>> orig(rows), fin(rows);
  for (int t = 0; t < rows; ++t) {
    if (!votes[t]) continue;
    // z * B^(depth+1) = q * B^(depth+1) + (H - B^q) * B^depth / B^depth ... written out:
    auto Z = [&](int e) -> i128 { return q[t][e] * pw[depth + 1] + (H[e] - pw[depth + q[t][e]]); };
    for (int e : ref_topk(n, k, L[t], all, Z)) in_k[e] = 1;
    orig[t] = ref_topk(n, k, L[t], all, [](int) { return 0; });
    for (int e : orig[t]) in_plain[e] = 1;
  }
  for (int t = 0; t < rows; ++t) {
    if (!votes[t]) continue;
    fin[t] = ref_topk(n, k, L[t], in_k, [](int) { return 0; });
    for (int e : fin[t]) in_final[e] = 1;
  }
  ref_result r;
  for (int e = 0; e < n; ++e)
    if (in_k[e]) r.active.push_back(e);
  const auto count = [](const std::vector<char>& f) { return std::count(f.begin(), f.end(), 1); };
  r.fell_back = count(in_final) > count(in_plain);
  const std::vector<char>& loaded = r.fell_back ? in_plain : in_final;
  std::vector<int> pad;
  for (int e = 0; e < n && static_cast<int>(pad.size()) < k; ++e)
    if (loaded[e]) pad.push_back(e);
  for (int e = 0; e < n && static_cast<int>(pad.size()) < k; ++e)
    if (!loaded[e]) pad.push_back(e);
  r.ids.assign(static_cast<std::size_t>(rows) * k, -1);
  r.weights.assign(static_cast<std::size_t>(rows) * k, 0.0);
  for (int t = 0; t < rows; ++t) {
    if (!votes[t]) {
      std::copy(pad.begin(), pad.end(), r.ids.begin() + static_cast<std::size_t>(t) * k);
      continue;
    }
    const std::vector<int>& chosen = r.fell_back ? orig[t] : fin[t];
    const std::vector<double> w = ref_weights(L[t], chosen, orig[t], p);
    std::vector<int> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int c) {
      if (w[a] != w[c]) return w[a] > w[c];
      return chosen[a] < chosen[c];
    });
    for (int i = 0; i < k; ++i) {
      r.ids[static_cast<std::size_t>(t) * k + i] = chosen[order[i]];
      r.weights[static_cast<std::size_t>(t) * k + i] = w[order[i]];
    }
  }
  return r;
}

}  // namespace lynx_test
