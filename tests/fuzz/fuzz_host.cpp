// libFuzzer target for the host path: any parameters, shapes, dtypes, id types and adversarial
// logits (NaN, +-inf, -0, FLT_MAX, subnormals, ties, rows thousands of nats apart), checked
// against the invariants of SPEC §3.3 and §5. Build it with clang (CMake option
// LYNX_BUILD_FUZZERS, see tests/fuzz/README.md); a failed invariant aborts with a message.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include <lynx/half.hpp>
#include <lynx/host.hpp>
#include <lynx/measures.hpp>

namespace {

/// Prints the case being run (set by run()), so that a finding can be reproduced in a test.
void (*describe_case)() = nullptr;

#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "invariant failed: %s (%s:%d): ", #cond, __FILE__, __LINE__);  \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n");                                                          \
      if (describe_case) describe_case();                                                  \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

/// Reads the fuzzer's bytes front to back; zeros once they run out.
struct reader {
  const std::uint8_t* data;
  std::size_t size, at = 0;
  std::uint8_t byte() { return at < size ? data[at++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | byte();
    return v;
  }
  bool empty() const { return at >= size; }
};

float logit(reader& in, float offset, float scale) {
  const std::uint8_t kind = in.byte();
  switch (kind % 16) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -0.0f;
    case 4: return FLT_MAX;
    case 5: return -FLT_MAX;
    case 6: return FLT_MIN * 0.25f;  // subnormal
    case 7: {
      std::uint32_t bits = in.u32();  // any float at all
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case 8:
    case 9: return offset + scale * static_cast<float>(static_cast<int>(in.byte() % 8) - 4);  // ties
    default: return offset + scale * (static_cast<float>(static_cast<std::int8_t>(in.byte())) / 16.0f);
  }
}

template <class T>
T convert(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half(x);
  else return __float2bfloat16(x);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

template <class T>
float to_float(T x) {
  return lynx::detail::to_float(x);
}

/// SPEC §5's reading of a logit, written out again: NaN counts as -inf, +inf as FLT_MAX
/// (-0 becomes 0, as the library keys it: equal logits tie.)
float sane(float x) { return std::isnan(x) ? -INFINITY : x == INFINITY ? FLT_MAX : x == 0.0f ? 0.0f : x; }

/// log sigmoid(x) in double, exp of at most 0 on either side, so -FLT_MAX does not overflow.
double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

/// The original top-k's mass that "no renormalize" keeps (SPEC §3.3 step 4), exactly:
/// softmax sum_orig e^(x - m) / sum_all e^(x - m), sigmoid sum_orig sigmoid(x).
double exact_mass(const float* x, int n, const int* orig, int k, bool sigmoid) {
  double top = 0;
  if (sigmoid) {
    for (int i = 0; i < k; ++i) top += std::exp(log_sigmoid(x[orig[i]]));
    return top;
  }
  const double m = *std::max_element(x, x + n);
  double total = 0;
  for (int e = 0; e < n; ++e) total += std::exp(static_cast<double>(x[e]) - m);
  for (int i = 0; i < k; ++i) top += std::exp(static_cast<double>(x[orig[i]]) - m);
  return top / total;
}

/// One voting row's weights against SPEC §3.3 step 4 (times the router's scaling), computed in
/// double from its sanitized logits x and the ids it got; `mass` is exact_mass of its original
/// top-k. Tolerance, relative: 2e-6 (SPEC §5's budget for the last bits of exp), plus without
/// renormalize the first-order error of the fp32 mass sums (k terms; the softmax total's 32
/// lane terms and 5 butterfly steps; exp's 2.4e-7 twice), plus |d| half-ulps for the fp32
/// difference d = l - top (sigmoid: min(l, 0) - min(top, 0)) the library takes before exp.
/// Absolute: a few 2^-149 per term for subnormal results (a tiny sigmoid without renormalize
/// is a subnormal weight, which must not be 0 early). Not times S[t] x scaling: no intermediate
/// is subnormal where that product could bring it back (a sigmoid mass whose every logit is
/// below -80, detail::tiny_mass_logit, and a chosen ratio below e^-80, detail::tiny_ratio_arg,
/// are both carried times 2^124).
template <class IdT>
void check_weights(const float* x, const IdT* ids, const float* w, const lynx::route_params& p, double mass, int t,
                   const char* what) {
  const int k = p.top_k;
  const bool sigmoid = p.score == lynx::scoring::sigmoid;
  double act[lynx::max_top_k], ref = -INFINITY, sum = 0;
  float top = -INFINITY;
  for (int i = 0; i < k; ++i) {
    const float l = x[ids[i]];
    top = std::max(top, l);
    act[i] = sigmoid ? log_sigmoid(l) : l;
    ref = std::max(ref, act[i]);
  }
  for (int i = 0; i < k; ++i) sum += act[i] = ref == -INFINITY ? 1.0 : std::exp(act[i] - ref);  // all -inf: equal
  const double scale = (p.renormalize ? 1.0 : mass) * p.router.scaling;
  const double rel = 2e-6 + (p.renormalize ? 0.0 : 4.8e-7 + (k + 40) * 0x1p-24);
  const double tiny = (k + 4) * 0x1p-149;
  for (int i = 0; i < k; ++i) {
    const float l = x[ids[i]];
    const double d = sigmoid ? static_cast<double>(std::min(l, 0.0f)) - std::min(top, 0.0f)
                             : static_cast<double>(l) - top;
    const double want = act[i] / sum * scale;
    const double tol = want * (rel + (std::isfinite(d) ? std::min(std::fabs(d), 128.0) * 0x1p-24 : 0.0)) + tiny;
    FUZZ_CHECK(std::fabs(w[i] - want) <= tol, "%s row %d weight[%d] (id %d, logit %.9g) = %.9g, SPEC %.9g", what, t,
               i, static_cast<int>(ids[i]), l, w[i], want);
  }
}

/// SPEC §5: the ids of a row that does not vote, the k lowest of the set the batch loads (the
/// voting rows' ids), then the lowest others; or the sentinel.
template <class IdT>
std::vector<IdT> pad_ids(const std::vector<IdT>& ids, const std::vector<char>& votes, const lynx::route_params& p) {
  const int n = p.num_experts, k = p.top_k;
  std::vector<IdT> pad;
  if (p.pad_with_sentinel) return std::vector<IdT>(k, IdT(p.sentinel_id));
  std::vector<char> loaded(n, 0);
  for (std::size_t t = 0; t < votes.size(); ++t)
    for (int i = 0; i < k && votes[t]; ++i) loaded[static_cast<std::size_t>(ids[t * k + static_cast<std::size_t>(i)])] = 1;
  for (int pass = 1; pass >= 0; --pass)
    for (int e = 0; e < n && static_cast<int>(pad.size()) < k; ++e)
      if (loaded[e] == pass) pad.push_back(IdT(e));
  return pad;
}

template <class T, class IdT>
void run(reader& in, lynx::route_params p, int rows, int valid, int stride) {
  const int n = p.num_experts, k = p.top_k;
  const float offset = -static_cast<float>(in.byte() % 4) * static_cast<float>(in.byte()) * 16.0f;
  const float scale = std::ldexp(1.0f, static_cast<int>(in.byte() % 16) - 6);
  std::vector<T> L(static_cast<std::size_t>(std::max(rows, 1)) * stride);
  for (auto& x : L) x = convert<T>(logit(in, offset, scale));
  std::vector<std::uint8_t> pinned_rows(rows, 0);
  const std::uint8_t* pinned = nullptr;
  if (in.byte() % 4 == 0) {
    for (auto& x : pinned_rows) x = in.byte() % 3 == 0;
    pinned = pinned_rows.data();
  }
  static const lynx::route_params* cp;
  static const std::uint8_t* c_pinned;
  c_pinned = pinned;
  static const std::vector<T>* cl;
  static int c_rows, c_valid, c_stride;
  cp = &p, cl = &L, c_rows = rows, c_valid = valid, c_stride = stride;
  describe_case = [] {
    const lynx::route_params& q = *cp;
    std::fprintf(stderr,
                 "N %d k %d alpha %g beta %d sigmoid %d renorm %d anchor %d sentinel %d/%d policy %d keep %d "
                 "budget %d/%g/%g rows %d valid %d stride %d pinned %d router groups %d/%d bias %d scaling %.9g "
                 "relaxed %d\n",
                 q.num_experts, q.top_k, q.alpha, q.beta, q.score == lynx::scoring::sigmoid, q.renormalize,
                 q.anchor_top1, q.pad_with_sentinel, q.sentinel_id, static_cast<int>(q.kind), q.keep_k,
                 q.budget_experts, q.budget_fraction, q.budget_mass, c_rows, c_valid, c_stride, c_pinned != nullptr,
                 q.router.top_groups, q.router.num_groups, q.router.bias != nullptr, q.router.scaling,
                 q.router.relaxed_groups);
    if (q.router.bias) {
      std::fprintf(stderr, "bias:");
      for (int e = 0; e < q.num_experts; ++e) std::fprintf(stderr, " %.9g", q.router.bias[e]);
      std::fprintf(stderr, "\n");
    }
    for (int t = 0; t < c_rows; ++t) {
      std::fprintf(stderr, "row %d%s:", t, c_pinned && c_pinned[t] ? " (pinned)" : "");
      for (int e = 0; e < q.num_experts; ++e)
        std::fprintf(stderr, " %.9g", to_float((*cl)[static_cast<std::size_t>(t) * c_stride + e]));
      std::fprintf(stderr, "\n");
    }
  };
  const std::size_t nk = static_cast<std::size_t>(rows) * k;
  std::vector<IdT> ids(nk, IdT(-77)), ids2(nk, IdT(-77)), plain(nk), staged(nk, IdT(-77));
  std::vector<float> w(nk, -77.0f), w2(nk, -77.0f), plain_w(nk), staged_w(nk, -77.0f);

  using batch = lynx::batch_ref<T, IdT>;
  FUZZ_CHECK(lynx::host::route(batch{L.data(), stride, rows, valid, ids.data(), w.data(), pinned}, p) ==
                 lynx::status::success, "route");
  FUZZ_CHECK(lynx::host::topk_route(L.data(), stride, rows, valid, p, plain.data(), plain_w.data()) ==
                 lynx::status::success, "topk_route");
  // Deterministic, and bitwise the same on the portable and the AVX2 code.
  lynx::host::use_simd() = !lynx::host::use_simd();
  FUZZ_CHECK(lynx::host::route(batch{L.data(), stride, rows, valid, ids2.data(), w2.data(), pinned}, p) ==
                 lynx::status::success, "route");
  lynx::host::use_simd() = !lynx::host::use_simd();
  FUZZ_CHECK(ids == ids2 && same_bits(w, w2), "AVX2 vs portable");
  // The stages compose to route (a model router: the staged lynx policy refuses it).
  if (valid > 0 && !p.router.plain()) {
    const lynx::status st = lynx::host::remap_topk(batch{L.data(), stride, rows, valid, staged.data(), staged_w.data(), pinned},
                                                   nullptr, nullptr, p);
    FUZZ_CHECK(st == (p.kind == lynx::policy::lynx ? lynx::status::unsupported_router : lynx::status::success) ||
                   (p.kind == lynx::policy::lynx && st == lynx::status::null_pointer),
               "staged remap on a router: %d", static_cast<int>(st));
    if (p.kind != lynx::policy::lynx) FUZZ_CHECK(staged == ids && same_bits(staged_w, w), "remap_topk = route (router)");
  } else if (valid > 0) {
    std::vector<std::int8_t> bins(static_cast<std::size_t>(rows) * n);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(lynx::histogram_bins(p)) * n), ranks(n);
    FUZZ_CHECK(lynx::host::affinity_bin(L.data(), stride, rows, valid, p, bins.data()) == lynx::status::success, "bins");
    FUZZ_CHECK(lynx::host::score_experts(bins.data(), rows, p, counts.data(), ranks.data()) == lynx::status::success,
               "score");
    FUZZ_CHECK(lynx::host::remap_topk(batch{L.data(), stride, rows, valid, staged.data(), staged_w.data(), pinned},
                                      bins.data(), ranks.data(), p) == lynx::status::success, "remap");
    FUZZ_CHECK(staged == ids && same_bits(staged_w, w), "stages compose to route");
  }
  // A count given by pointer (host memory), as a graph replay passes it to the kernels: clamped
  // to [0, rows], it routes as that host count, except that at 0 or less every row is padding
  // (the lowest ids or the sentinel, weight 0) where a host count of 0 writes nothing.
  {
    const std::uint8_t form = in.byte();
    int count = valid;
    if (valid == 0) count = form % 3 == 0 ? 0 : form % 3 == 1 ? -1 - in.byte() : INT_MIN;
    else if (valid == rows) count = form % 3 == 0 ? rows : form % 3 == 1 ? rows + 1 + in.byte() : INT_MAX;
    std::vector<IdT> pids(nk, IdT(-77)), pplain(nk, IdT(-77));
    std::vector<float> pw(nk, -77.0f), pplain_w(nk, -77.0f);
    FUZZ_CHECK(lynx::host::route(batch{L.data(), stride, rows, &count, pids.data(), pw.data(), pinned}, p) ==
                   lynx::status::success, "route, count %d by pointer", count);
    FUZZ_CHECK(lynx::host::topk_route(batch{L.data(), stride, rows, &count, pplain.data(), pplain_w.data()}, p) ==
                   lynx::status::success, "topk_route, count %d by pointer", count);
    if (valid > 0) {
      FUZZ_CHECK(pids == ids && same_bits(pw, w), "route: count %d by pointer != host count %d", count, valid);
      FUZZ_CHECK(pplain == plain && same_bits(pplain_w, plain_w), "topk_route: count %d by pointer != host count %d",
                 count, valid);
    }
    for (std::size_t i = 0; i < nk && valid == 0; ++i) {
      const IdT pad = p.pad_with_sentinel ? IdT(p.sentinel_id) : IdT(i % k);
      FUZZ_CHECK(pids[i] == pad && pw[i] == 0.0f && pplain[i] == pad && pplain_w[i] == 0.0f,
                 "count %d by pointer: slot %zu holds %lld (%g), %lld (%g), not padding", count, i,
                 static_cast<long long>(pids[i]), pw[i], static_cast<long long>(pplain[i]), pplain_w[i]);
    }
  }
  if (valid == 0) {  // B = 0: nothing written
    for (std::size_t i = 0; i < nk; ++i) FUZZ_CHECK(ids[i] == IdT(-77) && w[i] == -77.0f, "B = 0 wrote");
    return;
  }

  // Which rows vote: valid, with a finite logit left after SPEC §5's NaN rule.
  std::vector<char> votes(rows, 0);
  int voters = 0;
  for (int t = 0; t < valid; ++t) {
    for (int e = 0; e < n; ++e) {
      const float x = to_float(L[static_cast<std::size_t>(t) * stride + e]);
      votes[t] |= !std::isnan(x) && x != -INFINITY;
    }
    voters += votes[t];
  }
  // Each voting row's sanitized logits, original top-k (by logit, ties to the lower id; a model
  // router's own choice P[t], docs/ROUTERS.md) and its exact mass, for both routers' weights.
  std::vector<float> sx(static_cast<std::size_t>(rows) * n), choice(n);
  std::vector<int> orig(static_cast<std::size_t>(rows) * k), by_logit(n);
  std::vector<double> mass(rows);
  for (int t = 0; t < valid; ++t) {
    if (!votes[t]) continue;
    float* x = sx.data() + static_cast<std::size_t>(t) * n;
    int* o = orig.data() + static_cast<std::size_t>(t) * k;
    for (int e = 0; e < n; ++e) x[e] = sane(to_float(L[static_cast<std::size_t>(t) * stride + e]));
    if (p.router.custom_choice()) {
      for (int e = 0; e < n; ++e) choice[e] = lynx::detail::choice_score(x[e], p.router.bias, e);
      std::uint64_t first[lynx::max_top_k];
      lynx::detail::router_choice(choice.data(), n, k, p.router, lynx::detail::router_groups(choice.data(), n, p.router),
                                  first);
      for (int i = 0; i < k; ++i) o[i] = lynx::detail::key_expert(first[i]);
    } else {
      for (int e = 0; e < n; ++e) by_logit[e] = e;
      std::partial_sort(by_logit.begin(), by_logit.begin() + k, by_logit.end(),
                        [&](int a, int b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
      std::copy_n(by_logit.begin(), k, o);
    }
    mass[t] = exact_mass(x, n, o, k, p.score == lynx::scoring::sigmoid);
  }
  std::set<int> touched, plain_touched;
  for (int t = 0; t < rows; ++t) {
    const IdT* r = ids.data() + static_cast<std::size_t>(t) * k;
    const float* rw = w.data() + static_cast<std::size_t>(t) * k;
    if (!votes[t] && p.pad_with_sentinel) {
      for (int i = 0; i < k; ++i) FUZZ_CHECK(r[i] == IdT(p.sentinel_id) && rw[i] == 0.0f, "row %d sentinel", t);
      continue;
    }
    std::set<int> row;
    double sum = 0;
    for (int i = 0; i < k; ++i) {
      FUZZ_CHECK(r[i] >= 0 && r[i] < n, "row %d id %lld out of range", t, static_cast<long long>(r[i]));
      row.insert(static_cast<int>(r[i]));
      FUZZ_CHECK(std::isfinite(rw[i]) && rw[i] >= 0.0f, "row %d weight %g", t, rw[i]);
      if (i > 0)
        FUZZ_CHECK(rw[i - 1] > rw[i] || (rw[i - 1] == rw[i] && r[i - 1] < r[i]), "row %d output order", t);
      sum += rw[i];
      touched.insert(static_cast<int>(r[i]));
    }
    FUZZ_CHECK(static_cast<int>(row.size()) == k, "row %d has duplicate ids", t);
    if (votes[t]) check_weights(sx.data() + static_cast<std::size_t>(t) * n, r, rw, p, mass[t], t, "route");
    if (!votes[t]) {
      FUZZ_CHECK(sum == 0.0, "padding row %d has weight", t);
    } else if (p.renormalize) {
      const double scaling = p.router.scaling;
      // (Plus a subnormal rounding per weight: a tiny scaling makes the weights subnormal.)
      FUZZ_CHECK(std::fabs(sum - scaling) <= 1e-6 * scaling + k * 0x1p-149, "row %d weights sum to %.9g", t, sum);
    }
    for (int i = 0; i < k && votes[t]; ++i)
      plain_touched.insert(static_cast<int>(plain[static_cast<std::size_t>(t) * k + i]));
  }
  // Rows that do not vote hold the pad ids (the lowest the batch loads), weight 0 (SPEC §5).
  const std::vector<IdT> pad = pad_ids(ids, votes, p);
  for (int t = 0; t < rows; ++t)
    for (int i = 0; i < k && !votes[t]; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * k + i;
      FUZZ_CHECK(ids[at] == pad[i] && w[at] == 0.0f, "row %d does not vote: slot %d holds %lld (%g), pad id %lld", t, i,
                 static_cast<long long>(ids[at]), w[at], static_cast<long long>(pad[i]));
    }
  // topk_route (SPEC §4): each voting row's original top-k with SPEC's weights, the others padded.
  for (int t = 0; t < rows; ++t) {
    if (!votes[t]) continue;
    const IdT* r = plain.data() + static_cast<std::size_t>(t) * k;
    const float* rw = plain_w.data() + static_cast<std::size_t>(t) * k;
    std::set<int> got;
    for (int i = 0; i < k; ++i) {
      FUZZ_CHECK(r[i] >= 0 && r[i] < n, "topk_route row %d id %lld out of range", t, static_cast<long long>(r[i]));
      got.insert(static_cast<int>(r[i]));
      if (i > 0)
        FUZZ_CHECK(rw[i - 1] > rw[i] || (rw[i - 1] == rw[i] && r[i - 1] < r[i]), "topk_route row %d output order", t);
    }
    const int* o = orig.data() + static_cast<std::size_t>(t) * k;
    FUZZ_CHECK(got == std::set<int>(o, o + k), "topk_route row %d is not its original top-k", t);
    check_weights(sx.data() + static_cast<std::size_t>(t) * n, r, rw, p, mass[t], t, "topk_route");
  }
  const std::vector<IdT> plain_pad = pad_ids(plain, votes, p);
  for (int t = 0; t < rows; ++t)
    for (int i = 0; i < k && !votes[t]; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * k + i;
      FUZZ_CHECK(plain[at] == plain_pad[i] && plain_w[at] == 0.0f,
                 "topk_route row %d does not vote: slot %d holds %lld (%g), pad id %lld", t, i,
                 static_cast<long long>(plain[at]), plain_w[at], static_cast<long long>(plain_pad[i]));
    }
  if (voters == 0) return;
  // Never worse than plain top-k (SPEC §3.3 step 5); padding rows load nothing extra.
  FUZZ_CHECK(touched.size() <= plain_touched.size(), "touched %zu > plain %zu", touched.size(), plain_touched.size());
  // A single voting token is never remapped (SPEC §3.3), nor is a pinned row. The budget
  // policy ranks by fp32 shares, which can tie where logits differ (a sigmoid saturates at 1/2
  // near 0 and at 1 above 17): a single token may swap such experts, so it keeps all its mass.
  for (int t = 0; t < rows; ++t) {
    if (!votes[t]) continue;
    const bool single = voters == 1, pin = pinned && pinned[t];
    if (!single && !pin) continue;
    if (!pin && p.kind == lynx::policy::budget && p.router.bias) {
      // Shares of the choice score (docs/ROUTERS.md): a single token keeps all of its choice's.
      const auto choice_mass = [&](const IdT* r) {
        double m = 0;
        for (int i = 0; i < k; ++i) {
          const int e = static_cast<int>(r[i]);
          const float c = lynx::detail::choice_score(lynx::detail::sanitize(to_float(L[static_cast<std::size_t>(t) * stride + e])),
                                                     p.router.bias, e);
          m += c > 0.0f ? c : 0.0f;
        }
        return m;
      };
      const double got = choice_mass(ids.data() + static_cast<std::size_t>(t) * k),
                   want = choice_mass(plain.data() + static_cast<std::size_t>(t) * k);
      FUZZ_CHECK(got >= want * (1.0 - 1e-5), "single token keeps %.9g of %.9g choice mass", got, want);
      continue;
    }
    if (!pin && p.kind == lynx::policy::budget) {
      const auto m = lynx::measure_batch(L.data() + static_cast<std::size_t>(t) * stride, stride, 1, p,
                                         ids.data() + static_cast<std::size_t>(t) * k);
      FUZZ_CHECK(m.retained_mass >= 1.0 - 1e-6, "single token keeps %.9g of its mass", m.retained_mass);
      continue;
    }
    std::set<IdT> a(ids.begin() + static_cast<std::ptrdiff_t>(t) * k, ids.begin() + static_cast<std::ptrdiff_t>(t + 1) * k);
    std::set<IdT> b(plain.begin() + static_cast<std::ptrdiff_t>(t) * k,
                    plain.begin() + static_cast<std::ptrdiff_t>(t + 1) * k);
    FUZZ_CHECK(a == b, "row %d (%s) was remapped", t, single ? "single token" : "pinned");
  }
  if (p.router.custom_choice()) {  // inside the kept groups (kept limit); the first choice if anchored
    std::vector<float> c(n);
    std::uint64_t first[lynx::max_top_k];
    for (int t = 0; t < valid; ++t) {
      if (!votes[t]) continue;
      for (int e = 0; e < n; ++e)
        c[e] = lynx::detail::choice_score(lynx::detail::sanitize(to_float(L[static_cast<std::size_t>(t) * stride + e])),
                                          p.router.bias, e);
      const std::uint32_t kept = lynx::detail::router_groups(c.data(), n, p.router);
      lynx::detail::router_choice(c.data(), n, k, p.router, kept, first);
      const IdT* r = ids.data() + static_cast<std::size_t>(t) * k;
      bool has_first = false;
      for (int i = 0; i < k; ++i) {
        const int e = static_cast<int>(r[i]);
        has_first |= e == lynx::detail::key_expert(first[0]);
        if (!p.router.relaxed_groups)
          FUZZ_CHECK(lynx::detail::router_allows(kept, e, n, p.router), "row %d expert %d outside its groups", t, e);
      }
      // Anchors always hold but under a budget's count limit (they are kept when they fit), and
      // under the relaxed limit, where k experts of K outside the groups may outscore it.
      const bool anchored =
          (p.anchor_top1 && p.kind != lynx::policy::budget) || (p.kind == lynx::policy::budget && p.budget_mass > 0.0f);
      if (anchored && !(p.router.relaxed_groups && p.router.grouped()))
        FUZZ_CHECK(has_first, "row %d lost its first choice", t);
    }
  }
  if (p.kind == lynx::policy::budget) {
    // A count limit is a hard limit; a mass target is met; anchors are kept when they fit.
    const int limit = lynx::detail::budget_limit(p.budget_experts, p.budget_fraction,
                                                 static_cast<int>(plain_touched.size()), n, k);
    // Pinned rows keep their plain top-k whatever the limit: their experts may exceed it alone.
    std::set<int> pinned_experts;
    for (int t = 0; t < rows; ++t)
      if (votes[t] && pinned && pinned[t])
        for (int i = 0; i < k; ++i) pinned_experts.insert(static_cast<int>(plain[static_cast<std::size_t>(t) * k + i]));
    const int allowed = std::max(limit, static_cast<int>(pinned_experts.size()));
    // With the group limit kept, tokens fill from their own groups outside K (docs/ROUTERS.md).
    const bool limit_holds = !p.router.grouped() || p.router.relaxed_groups;
    if ((p.budget_experts > 0 || p.budget_fraction > 0.0f) && limit_holds)
      FUZZ_CHECK(static_cast<int>(touched.size()) <= allowed, "touched %zu > limit %d", touched.size(), allowed);
  }
}

/// A router scaling outside (0, lynx::max_router_scaling] (NaN, inf, 0, negative, or so large
/// that a top-k mass times it overflows) in otherwise valid parameters: every call rejects it
/// and writes nothing. The count is by pointer half the time, where a call routes every row.
void check_rejected_scaling(reader& in, const lynx::route_params& p, int rows, int valid, int stride) {
  static const lynx::route_params* cp;
  cp = &p;
  describe_case = [] {
    std::fprintf(stderr, "router scaling %.9g (%a), N %d k %d policy %d\n", cp->router.scaling, cp->router.scaling,
                 cp->num_experts, cp->top_k, static_cast<int>(cp->kind));
  };
  FUZZ_CHECK(lynx::check(p) == lynx::status::invalid_router, "check: %d", static_cast<int>(lynx::check(p)));
  const std::vector<float> L(static_cast<std::size_t>(std::max(rows, 1)) * stride, 0.0f);
  const std::size_t nk = static_cast<std::size_t>(rows) * p.top_k;
  std::vector<std::int32_t> ids(nk, -77);
  std::vector<float> w(nk, -77.0f);
  const lynx::token_count count = in.byte() & 1 ? lynx::token_count(&valid) : lynx::token_count(valid);
  const lynx::batch_ref<float, std::int32_t> b{L.data(), stride, rows, count, ids.data(), w.data()};
  for (int call = 0; call < 3; ++call) {
    const lynx::status st = call == 0   ? lynx::host::route(b, p)
                            : call == 1 ? lynx::host::topk_route(b, p)
                                        : lynx::host::remap_topk(b, nullptr, nullptr, p);
    FUZZ_CHECK(st == lynx::status::invalid_router, "call %d (route, topk_route, remap_topk): status %d", call,
               static_cast<int>(st));
  }
  for (std::size_t i = 0; i < nk; ++i)
    FUZZ_CHECK(ids[i] == -77 && w[i] == -77.0f, "a rejected call wrote slot %zu: %d (%g)", i, ids[i], w[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
  describe_case = nullptr;  // set again for this input's case
  lynx::route_params p;
  const std::uint8_t shape = in.byte();
  p.num_experts = 2 + (shape % 8 == 0 ? in.byte() * 4 % 1023 : in.byte() % 70);
  p.top_k = 1 + in.byte() % std::min(p.num_experts, lynx::max_top_k);
  static const float alphas[] = {0.001f, 0.012f, 0.5f, 0.7f, 1.0f, 1.5f, 2.0f, 3.0f, 10.0f, 1000.0f};
  p.alpha = alphas[in.byte() % 10];
  p.beta = in.byte() % (lynx::max_bin_depth + 1);
  const std::uint8_t flags = in.byte();
  p.score = flags & 1 ? lynx::scoring::sigmoid : lynx::scoring::softmax;
  p.renormalize = flags & 2;
  p.anchor_top1 = flags & 4;
  p.pad_with_sentinel = flags & 8;
  p.sentinel_id = flags & 16 ? -1 : p.num_experts + 3;
  p.kind = static_cast<lynx::policy>(in.byte() % 3);
  p.keep_k = 1 + in.byte() % p.top_k;
  if (p.kind == lynx::policy::budget) {
    const std::uint8_t mode = in.byte(), amount = in.byte();
    if (mode % 3 == 0) p.budget_experts = p.top_k + amount % (p.num_experts - p.top_k + 1);
    if (mode % 3 == 1) p.budget_fraction = static_cast<float>(1 + amount % 100) / 100.0f;
    if (mode % 3 == 2) p.budget_mass = static_cast<float>(1 + amount % 100) / 100.0f;
  }
  const int rows = in.byte() % 40, valid = rows ? in.byte() % (rows + 1) : 0;
  const int stride = p.num_experts + in.byte() % 3;
  // A model router one time in three (docs/ROUTERS.md): groups dividing N, a bias with sigmoid
  // scores (any floats, NaN and inf included), a scaling factor (in range, at and around the
  // bound, tiny, or one check must refuse), the group limit kept or relaxed.
  static std::vector<float> bias;
  if (in.byte() % 3 == 0) {
    std::vector<int> divisors;
    for (int g = 1; g <= 32; ++g)
      if (p.num_experts % g == 0) divisors.push_back(g);
    p.router.num_groups = divisors[in.byte() % divisors.size()];
    p.router.top_groups = 1 + in.byte() % p.router.num_groups;
    static const float scalings[] = {1.0f,      2.5f, 16.0f, 0.5f, lynx::max_router_scaling,
                                     std::nextafter(lynx::max_router_scaling, 0.0f), 0x1p-100f, FLT_MIN / 4,
                                     std::nextafter(lynx::max_router_scaling, INFINITY), 2e38f, FLT_MAX, INFINITY,
                                     NAN, 0.0f, -0.0f, -1.0f};
    const std::uint8_t pick = in.byte();
    if (pick % 17 < 16) {
      p.router.scaling = scalings[pick % 17];
    } else {  // any float at all
      const std::uint32_t bits = in.u32();
      std::memcpy(&p.router.scaling, &bits, sizeof bits);
    }
    p.router.relaxed_groups = in.byte() & 1;
    if (p.score == lynx::scoring::sigmoid && in.byte() % 2 == 0) {
      bias.resize(p.num_experts);
      const float scale = std::ldexp(1.0f, static_cast<int>(in.byte() % 8) - 7);
      for (float& b : bias) b = logit(in, 0.0f, scale);
      p.router.bias = bias.data();
    }
  }
  const bool scaling_ok = p.router.scaling > 0.0f && p.router.scaling <= lynx::max_router_scaling;
  if (lynx::check(p) != lynx::status::success) {
    lynx::route_params q = p;
    q.router.scaling = 1.0f;
    if (!scaling_ok && lynx::check(q) == lynx::status::success) check_rejected_scaling(in, p, rows, valid, stride);
    return 0;
  }
  FUZZ_CHECK(scaling_ok, "check accepts router scaling %.9g (%a)", p.router.scaling, p.router.scaling);
  switch (in.byte() % 4) {
    case 0: run<float, std::int32_t>(in, p, rows, valid, stride); break;
    case 1: run<__half, std::int64_t>(in, p, rows, valid, stride); break;
    case 2: run<__nv_bfloat16, std::int32_t>(in, p, rows, valid, stride); break;
    default: run<float, std::int64_t>(in, p, rows, valid, stride); break;
  }
  return 0;
}
