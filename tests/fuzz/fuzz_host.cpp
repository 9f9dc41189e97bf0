// libFuzzer target for the host path: any parameters, shapes, dtypes, id types and adversarial
// logits (NaN, +-inf, -0, FLT_MAX, subnormals, ties, rows thousands of nats apart), checked
// against the invariants of SPEC §3.3 and §5. Build it with clang (CMake option
// LYNX_BUILD_FUZZERS, see tests/fuzz/README.md); a failed invariant aborts with a message.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
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
                 "budget %d/%g/%g rows %d valid %d stride %d pinned %d router groups %d/%d bias %d scaling %g "
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
    if (!votes[t]) {
      FUZZ_CHECK(sum == 0.0, "padding row %d has weight", t);
    } else if (p.renormalize) {
      const double scaling = p.router.scaling;
      FUZZ_CHECK(std::fabs(sum - scaling) <= 1e-6 * scaling, "row %d weights sum to %.9g", t, sum);
    }
    for (int i = 0; i < k && votes[t]; ++i)
      plain_touched.insert(static_cast<int>(plain[static_cast<std::size_t>(t) * k + i]));
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
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
  // scores (any floats, NaN and inf included), a scaling factor, the group limit kept or relaxed.
  static std::vector<float> bias;
  if (in.byte() % 3 == 0) {
    std::vector<int> divisors;
    for (int g = 1; g <= 32; ++g)
      if (p.num_experts % g == 0) divisors.push_back(g);
    p.router.num_groups = divisors[in.byte() % divisors.size()];
    p.router.top_groups = 1 + in.byte() % p.router.num_groups;
    static const float scalings[] = {1.0f, 2.5f, 16.0f, 0.5f};
    p.router.scaling = scalings[in.byte() % 4];
    p.router.relaxed_groups = in.byte() & 1;
    if (p.score == lynx::scoring::sigmoid && in.byte() % 2 == 0) {
      bias.resize(p.num_experts);
      const float scale = std::ldexp(1.0f, static_cast<int>(in.byte() % 8) - 7);
      for (float& b : bias) b = logit(in, 0.0f, scale);
      p.router.bias = bias.data();
    }
  }
  if (lynx::check(p) != lynx::status::success) return 0;
  switch (in.byte() % 4) {
    case 0: run<float, std::int32_t>(in, p, rows, valid, stride); break;
    case 1: run<__half, std::int64_t>(in, p, rows, valid, stride); break;
    case 2: run<__nv_bfloat16, std::int32_t>(in, p, rows, valid, stride); break;
    default: run<float, std::int64_t>(in, p, rows, valid, stride); break;
  }
  return 0;
}
