#pragma once
// Per-element and per-row math that the host path and the device kernels both run.
// Everything here is integer-exact or a fixed sequence of fp32 operations (exp_f32 included:
// explicit fma, no library expf), so host and device agree bitwise on ids and weights.

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../params.hpp"
#include "config.hpp"
#include "logit_types.hpp"

namespace lynx {
namespace detail {

LYNX_HD std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

/// Order-preserving map of a non-NaN float to an unsigned integer, and its inverse.
LYNX_HD std::uint32_t ordered_bits(float x) {
  const std::uint32_t b = float_bits(x);
  // Negative: flip all bits; otherwise set the sign bit. Branch-free (the sign is random).
  const std::uint32_t mask = static_cast<std::uint32_t>(static_cast<std::int32_t>(b) >> 31) | 0x80000000u;
  return b ^ mask;
}

LYNX_HD float bits_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

LYNX_HD float unordered_float(std::uint32_t u) {
  return bits_float(u & 0x80000000u ? u ^ 0x80000000u : ~u);
}

LYNX_HD float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#elif defined(__GNUC__)
  // One vfmadd wherever the function's target has FMA (host/simd.hpp), else libm's fmaf:
  // the same single rounding either way.
  return __builtin_fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// c ? a : b as bit operations: no branch, so compilers vectorize loops around it even under
/// -ftrapping-math (which keeps them from if-converting a float select followed by arithmetic).
LYNX_HD float select_f32(bool c, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(c);
  return bits_float((float_bits(a) & mask) | (float_bits(b) & ~mask));
}

/// SPEC §5: NaN counts as -inf, +inf as the largest finite float. -0 becomes +0 so that
/// equal logits tie in the packed keys below. Branch-free, like exp_f32.
LYNX_HD float sanitize(float x) {
  x = select_f32(x == x, x, -INFINITY);
  x = select_f32(x == INFINITY, FLT_MAX, x);
  return select_f32(x == 0.0f, 0.0f, x);
}

template <class T>
LYNX_HD float load_logit(const T* row, int e) {
  return sanitize(to_float(row[e]));
}

/// ln FLT_MAX: above it exp_f32 is inf (and below its negation sigmoid is exp(x)).
inline constexpr float exp_f32_max_arg = 88.72283f;

/// e^xc * 2^extra for an xc already clamped to where that lies in [2^-150, 2^128): Cody-Waite
/// reduction and the Cephes expf polynomial, written with explicit fma so no compiler can
/// contract it differently on either side (nvcc --fmad, gcc -ffp-contract), then y * 2^e by
/// exponent arithmetic while that stays normal; below 2^-125, y * 2^(e+64) (exact) times 2^-64,
/// one rounding into the subnormals (an explicit fma, so nothing contracts it).
LYNX_HD float exp_f32_pow2(float xc, int extra) {
  const float n = rintf(xc * 1.44269504088896341f);
  float r = fma_f32(n, -0.693359375f, xc);
  r = fma_f32(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fma_f32(p, r, 1.3981999507e-3f);
  p = fma_f32(p, r, 8.3334519073e-3f);
  p = fma_f32(p, r, 4.1665795894e-2f);
  p = fma_f32(p, r, 1.6666665459e-1f);
  p = fma_f32(p, r, 5.0000001201e-1f);
  const float y = fma_f32(p, r * r, r) + 1.0f;
  const int e = static_cast<int>(n) + extra;
  const bool tiny = e < -125;
  const int shift = tiny ? e + 64 : e;
  const float v = bits_float(float_bits(y) + (static_cast<std::uint32_t>(shift) << 23));
  return fma_f32(v, select_f32(tiny, 5.42101086e-20f /* 2^-64 */, 1.0f), 0.0f);
}

/// exp for the weights, bitwise the same on host and device (no library expf).
/// Relative error below 2.4e-7 down to FLT_MIN; below it the result is the correctly rounded
/// subnormal of that value (so ratios of weights down to 2^-149 survive, SPEC §3.3 step 4), and
/// 0 below 2^-150. Out-of-range inputs are clamped and their results selected at the end, with
/// no branch, so a loop of exps vectorizes.
LYNX_HD float exp_f32(float x) {
  constexpr float lo = -103.972077f, hi = exp_f32_max_arg;  // ln 2^-150, ln FLT_MAX
  float xc = select_f32(x > lo, x, lo);  // also -inf and NaN (NaN never reaches here)
  xc = select_f32(xc < hi, xc, hi);
  return select_f32(x > hi, INFINITY, select_f32(x > lo, exp_f32_pow2(xc, 0), 0.0f));
}

/// exp(x) * 2^124 for x <= 0, with exp_f32's error, and 0 below 2^-150 (x below ln 2^-274):
/// what a sigmoid mass far below FLT_MIN is summed with (tiny_mass_logit).
LYNX_HD float exp_f32_up124(float x) {
  constexpr float lo = -189.922327f;  // ln 2^-274
  return select_f32(x > lo, exp_f32_pow2(select_f32(x > lo, x, lo), 124), 0.0f);
}

/// 1 / (1 + exp(-x)); where exp(-x) overflows (x below -ln FLT_MAX), 1 + exp(x) rounds to 1,
/// so sigmoid(x) is exp(x), which stays representable down to 2^-150 (SPEC §3.3 step 4: the
/// weights of tiny sigmoids must not underflow to 0 early). Everywhere else it is the plain
/// formula, bitwise as before. A select, not a branch, like exp_f32.
LYNX_HD float sigmoid(float x) {
  return select_f32(x < -exp_f32_max_arg, exp_f32(x), 1.0f / (1.0f + exp_f32(-x)));
}

/// SPEC §3.1 for one element: q = max(ceil(fp32(alpha * fp32(l - m))), -depth).
/// The two roundings are part of the definition; there is no a*b+c here to contract.
LYNX_HD int affinity_bin_of(float l, float m, float alpha, int depth) {
  const float d = l - m;
  const float x = alpha * d;
  // Below -depth (also -inf, and NaN from -inf - -inf) saturates; a select, not a branch.
  const float c = select_f32(x > -static_cast<float>(depth), x, -static_cast<float>(depth));
  return -static_cast<int>(-c);  // = ceil(c) on [-depth, 0]; inlines where ceilf may not
}

// Packed selection keys: a larger key wins. The low 16 bits hold 0xFFFF - id so that equal
// values go to the lower expert id (the vLLM/TRT-LLM trick).
LYNX_HD std::uint64_t logit_key(float l, int e) {
  return (static_cast<std::uint64_t>(ordered_bits(l)) << 16) |
         static_cast<std::uint64_t>(0xFFFF - e);
}

/// SPEC §3.3 step 1 as one integer: own bin, then the expert's batch rank (0 = strongest
/// histogram), then the logit, then the lower id. See score_experts for why a rank suffices.
LYNX_HD std::uint64_t z_key_high(int q, int rank) {
  return (static_cast<std::uint64_t>(q + max_bin_depth) << 59) |
         (static_cast<std::uint64_t>(2047 - rank) << 48);
}
LYNX_HD std::uint64_t z_key(int q, int rank, float l, int e) {
  return z_key_high(q, rank) | logit_key(l, e);
}

/// Inside one bin (all keys of the same q) z needs no bits for q, and an id below max_experts
/// needs 10, not 16: a set key is bit 63 (so it is never 0), then a 21-bit order code of the
/// expert's histogram (a larger code, a stronger histogram: the histogram itself where it packs
/// into 21 bits, so that no rank has to be computed), then the logit key's ordered logit and
/// the low 10 bits of 0xFFFF - id. Its order is (code, logit, lower id), as z's inside the bin.
inline constexpr int order_code_bits = 21;
static_assert(max_experts <= 1024, "a set key holds ids in 10 bits");
LYNX_HD std::uint64_t bin_z_key(std::uint32_t code, std::uint64_t logit_key) {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(code) << 42) | ((logit_key >> 16) << 10) |
         (logit_key & 0x3FFu);
}
/// The logit key (logit_key) a set key was made from.
LYNX_HD std::uint64_t logit_key_of(std::uint64_t bin_z) {
  return (((bin_z >> 10) & 0xFFFFFFFFu) << 16) | 0xFC00u | (bin_z & 0x3FFu);
}
/// The order code of an expert whose competition rank is `rank` (0: the strongest histogram).
LYNX_HD std::uint32_t order_code_of_rank(int rank) { return static_cast<std::uint32_t>(max_experts - 1 - rank); }

/// Marks a key as inside the active set, so it outranks every key outside: SPEC §3.3 step 3's
/// top-k inside K, filled from outside only when K holds fewer than k experts.
LYNX_HD std::uint64_t active_bit(bool active) { return active ? std::uint64_t{1} << 63 : 0; }

LYNX_HD int key_expert(std::uint64_t key) { return 0xFFFF - static_cast<int>(key & 0xFFFFu); }

/// Keeps best[0..k) sorted descending; 0 is below every real key (ids < 0xFFFF). Most keys
/// leave at the first test. An entering key bubbles down without data-dependent branches (each
/// slot keeps the larger of itself and the carried key and passes the smaller on), which the
/// host's predictor could not guess; the carried key is also a dependence that keeps compilers
/// from turning this k-step loop into slower vector code.
LYNX_HD void topk_push(std::uint64_t* best, int k, std::uint64_t key) {
  if (key <= best[k - 1]) return;
  std::uint64_t carry = key;
  for (int i = 0; i < k; ++i) {
    const std::uint64_t here = best[i];
    best[i] = here > carry ? here : carry;
    carry = here > carry ? carry : here;
  }
}

LYNX_HD void topk_clear(std::uint64_t* best, int k) {
  for (int i = 0; i < k; ++i) best[i] = 0;
}

/// Every expert's logit key for a row, and the row's max (-inf: the row does not vote). The
/// host path builds these once per row and reuses them for every selection.
template <class T>
LYNX_HD float row_keys(const T* row, int n, std::uint64_t* keys) {
  float m = -INFINITY;
  for (int e = 0; e < n; ++e) {
    const float x = load_logit(row, e);
    keys[e] = logit_key(x, e);
    m = x > m ? x : m;
  }
  return m;
}

/// Top-k of precomputed keys.
LYNX_HD void topk_of_keys(const std::uint64_t* keys, int n, int k, std::uint64_t* best) {
  topk_clear(best, k);
  for (int e = 0; e < n; ++e) topk_push(best, k, keys[e]);
}

template <class T>
LYNX_HD float row_max(const T* row, int n) {
  float m = -INFINITY;
  for (int e = 0; e < n; ++e) {
    const float x = load_logit(row, e);  // never NaN: a compare is exact and, unlike a
    m = x > m ? x : m;                   // libm fmaxf call on the host, inlines
  }
  return m;
}

/// Plain top-k of a row by logit (ties: lower id), SPEC §4.
template <class T>
LYNX_HD void plain_topk(const T* row, int n, int k, std::uint64_t* best) {
  topk_clear(best, k);
  for (int e = 0; e < n; ++e) topk_push(best, k, logit_key(load_logit(row, e), e));
}

/// Lane j's share of a canonical row sum of exp(l - m): experts j, j+32, j+64, ... in order.
template <class T>
LYNX_HD float lane_exp_sum(const T* row, int n, float m, int lane) {
  float sum = 0.0f;
  for (int e = lane; e < n; e += 32) sum += exp_f32(load_logit(row, e) - m);
  return sum;
}

/// The canonical order of the one N-long float sum (the softmax total): 32 strided lane sums
/// combined by an xor butterfly (16, 8, 4, 2, 1), exactly as a warp computes it with
/// __shfl_xor_sync. The host runs this emulation, so host and device totals are bitwise equal.
/// butterfly_sum combines the 32 lane sums p (and overwrites them).
LYNX_HD float butterfly_sum(float* p) {
  for (int o = 16; o > 0; o >>= 1) {
    float next[32];
    for (int j = 0; j < 32; ++j) next[j] = p[j] + p[j ^ o];
    for (int j = 0; j < 32; ++j) p[j] = next[j];
  }
  return p[0];
}

template <class T>
LYNX_HD float row_exp_sum(const T* row, int n, float m) {
  float p[32];
  for (int j = 0; j < 32; ++j) p[j] = lane_exp_sum(row, n, m, j);
  return butterfly_sum(p);
}

/// Sigmoid masses far below FLT_MIN. Where every original top-k logit lies below -80 (every
/// term below e^-80, about 2^-115.4), fp32 keeps few or none of the mass's digits, and a
/// router's scaling (up to 2^100) cannot restore them; SPEC §3.3 step 4 allows no loss to
/// underflow. Such a mass is summed as mass * 2^124 (sigmoid(x) is exp(x) to fp32's precision
/// there) and travels as its negation, in the same float as every other mass (those are >= 0)
/// through registers, shared and global memory; times_mass undoes it in the weights' last
/// product. Rows above the threshold keep the plain sum, bitwise as before.
inline constexpr float tiny_mass_logit = -80.0f;

LYNX_HD float sigmoid_mass_term(float l, bool tiny) { return tiny ? exp_f32_up124(l) : sigmoid(l); }

/// w times a mass, or times a mass already multiplied by a router's scaling (scaled_emit: the
/// negation of a tiny mass carries through it): w * mass in one rounding, then for a tiny
/// mass the exact 2^-124, which rounds again only where the weight lies below FLT_MIN. The
/// sign bit decides, so a tiny mass of -0 (every term below 2^-274, or scaled to 0) gives +0.
LYNX_HD float times_mass(float w, float mass) {
  const bool tiny = float_bits(mass) >> 31;
  const float f = w * select_f32(tiny, -mass, mass);
  return select_f32(tiny, f * 4.70197740e-38f /* 2^-124 */, f);
}

/// The row's original top-k mass that "no renormalize" keeps (SPEC §3.3 step 4):
/// softmax: sum of the top-k probabilities; sigmoid: sum of the top-k sigmoids, in the tiny
/// form where all their logits lie below tiny_mass_logit. `total` is row_exp_sum (softmax
/// only; a warp passes its butterfly result).
template <class T>
LYNX_HD float topk_mass(const T* row, float m, const std::uint64_t* topk, int k, scoring s,
                        float total) {
  float top = 0.0f;
  if (s == scoring::sigmoid) {
    bool tiny = true;
    for (int i = 0; i < k; ++i) tiny &= load_logit(row, key_expert(topk[i])) < tiny_mass_logit;
    for (int i = 0; i < k; ++i) top += sigmoid_mass_term(load_logit(row, key_expert(topk[i])), tiny);
    return tiny ? -top : top;
  }
  for (int i = 0; i < k; ++i) top += exp_f32(load_logit(row, key_expert(topk[i])) - m);
  return top / total;
}

template <class T>
LYNX_HD float original_mass(const T* row, int n, float m, const std::uint64_t* topk, int k,
                            scoring s, bool renormalize) {
  if (renormalize) return 1.0f;  // unused then; skips a pass of N exps
  return topk_mass(row, m, topk, k, s, s == scoring::sigmoid ? 0.0f : row_exp_sum(row, n, m));
}

/// The exponent of scaled_sigmoid's ratio: min(l, 0) - min(ref, 0), and 0 where those are
/// equal (-inf included).
LYNX_HD float sigmoid_ratio_arg(float l, float ref) {
  const float lo = select_f32(l < 0.0f, l, 0.0f), ro = select_f32(ref < 0.0f, ref, 0.0f);
  return select_f32(lo == ro, 0.0f, lo - ro);
}

/// 1 + exp(-|l|): scaled_sigmoid's divisor, in [1, 2].
LYNX_HD float sigmoid_divisor(float l) { return 1.0f + exp_f32(-select_f32(l < 0.0f, -l, l)); }

/// sigmoid(l) / exp(min(ref, 0)), for l <= ref: the ratios of sigmoids without their
/// underflow (sigmoid(l) = exp(min(l, 0)) / (1 + exp(-|l|)), and the second factor lies in
/// [1/2, 1]). Equal l and ref (-inf included) give the unscaled factor.
LYNX_HD float scaled_sigmoid(float l, float ref) {
  return exp_f32(sigmoid_ratio_arg(l, ref)) / sigmoid_divisor(l);
}

/// Chosen weights whose ratio to the largest chosen one lies below e^-80 (chosen_weights,
/// warp_emit). That ratio, an fp32 value before the mass and a router's scaling (up to 2^100)
/// multiply it, would keep only a subnormal's digits below e^-87, or none below e^-104 (SPEC
/// §3.3 step 4 allows no loss to underflow: scaling 2^100 and chosen logits 0 and -150 gave
/// weight 0 where SPEC's is 9.1e-36). Such a weight is taken again from the ratio times 2^124,
/// and the exact 2^-124 comes last. Where the old product was a normal float the new one is
/// bitwise the same (only powers of two moved), so rows without such ratios do not change.
inline constexpr float tiny_ratio_arg = -80.0f;

// The largest product tiny_ratio_weight forms before its 2^-124: a ratio just below e^-80 times
// 2^124 over a denominator of 1/2 (sigmoid), times a tiny mass of k such terms times the
// largest scaling (e^-80 < 2^-115). It must stay finite.
static_assert(tiny_ratio_arg <= -80.0f && tiny_mass_logit <= -80.0f &&
                  2.0 * 0x1p9 * (max_top_k * 0x1p9) * static_cast<double>(max_router_scaling) < 0x1p127,
              "tiny_ratio_weight could overflow: the thresholds, max_top_k and max_router_scaling go together");

/// The exponent of a chosen logit l's ratio to the largest chosen logit `top`.
LYNX_HD float chosen_ratio_arg(float l, float top, scoring s) {
  return s == scoring::sigmoid ? sigmoid_ratio_arg(l, top) : select_f32(l == top, 0.0f, l - top);
}

/// A chosen logit l's ratio to the largest chosen logit `top`, times 2^124 where up124
/// (tiny_ratio_weight): exp(l - top) (softmax) or scaled_sigmoid(l, top) (sigmoid), the one
/// formula of chosen_weights and warp_emit.
LYNX_HD float chosen_ratio(float l, float top, scoring s, bool up124 = false) {
  const float a = chosen_ratio_arg(l, top, s);
  const float r = up124 ? exp_f32_up124(a) : exp_f32(a);
  return s == scoring::sigmoid ? r / sigmoid_divisor(l) : r;
}

/// A weight whose chosen_ratio_arg lies below tiny_ratio_arg: its ratio times 2^124, over the
/// row's denominator, times the mass (times_mass), then 2^-124.
LYNX_HD float tiny_ratio_weight(float l, float top, scoring s, float denom, float mass) {
  return times_mass(chosen_ratio(l, top, s, true) / denom, mass) * 4.70197740e-38f /* 2^-124 */;
}

/// Weights of the chosen experts (SPEC §3.3 step 4), given in key order (logit descending,
/// id ascending, within and then outside K), which is usually also the output order. Ratios
/// are taken relative to the largest chosen logit, not the row's max, so that chosen experts
/// far below the row's max (or below zero, for sigmoid) keep their weights: with renormalize
/// they sum to 1 for every voting row. Chosen logits that are all -inf count as equal. The sum
/// runs in key order on host and device alike.
template <class T>
LYNX_HD void chosen_weights(const T* row, const std::uint64_t* chosen, int k, scoring s,
                            bool renormalize, float mass, float* w) {
  float top = -INFINITY;
  for (int i = 0; i < k; ++i) {
    w[i] = load_logit(row, key_expert(chosen[i]));
    top = w[i] > top ? w[i] : top;
  }
  if (s == scoring::sigmoid)  // one loop per scoring, so that the host vectorizes it
    for (int i = 0; i < k; ++i) w[i] = chosen_ratio(w[i], top, scoring::sigmoid);
  else
    for (int i = 0; i < k; ++i) w[i] = chosen_ratio(w[i], top, scoring::softmax);
  // Neumaier's compensated sum (terms >= 0): the denominator within about one rounding, so
  // renormalized weights sum to 1 within 1e-6 at any k, where a plain sum of 32 terms may not.
  float denom = 0.0f, lost = 0.0f;
  for (int i = 0; i < k; ++i) {
    const float t = denom + w[i];
    lost += denom >= w[i] ? (denom - t) + w[i] : (w[i] - t) + denom;
    denom = t;
  }
  denom += lost;
  const float scale = renormalize ? 1.0f : mass;
  for (int i = 0; i < k; ++i) w[i] = times_mass(w[i] / denom, scale);  // denom >= exp(0) or 1/2
  for (int i = 0; i < k; ++i) {  // ratios below e^-80 (tiny_ratio_arg): their digits again
    const float l = load_logit(row, key_expert(chosen[i]));
    if (chosen_ratio_arg(l, top, s) < tiny_ratio_arg) w[i] = tiny_ratio_weight(l, top, s, denom, scale);
  }
}

/// model_router's choice score of expert e from its sanitized logit x: sigmoid(x) + bias[e] with
/// a bias (a NaN bias counts as -inf), else x itself.
LYNX_HD float choice_score(float x, const float* bias, int e) {
  return bias ? sigmoid(x) + sanitize(bias[e]) : x;
}

/// The two largest values seen (a multiset: equal values fill both).
LYNX_HD void top2_push(float& a1, float& a2, float v) {
  if (v > a1) {
    a2 = a1;
    a1 = v;
  } else if (v > a2) {
    a2 = v;
  }
}

/// A group's score from its two largest choice scores: their sum with a bias (DeepSeek-V3),
/// else the largest (DeepSeek-V2). Never NaN: the scores lie in [-inf, FLT_MAX].
LYNX_HD float group_score(float a1, float a2, bool biased) { return biased ? a1 + a2 : a1; }

/// The groups model_router keeps for a row, as a bit per group, from its choice scores c[0..n)
/// (all groups without grouping).
LYNX_HD std::uint32_t router_groups(const float* c, int n, const model_router& r) {
  if (!r.grouped()) return ~0u;
  const int size = n / r.num_groups;
  std::uint64_t kept[32];
  topk_clear(kept, r.top_groups);
  for (int g = 0; g < r.num_groups; ++g) {
    float a1 = -INFINITY, a2 = -INFINITY;
    for (int e = g * size; e < (g + 1) * size; ++e) top2_push(a1, a2, c[e]);
    topk_push(kept, r.top_groups, logit_key(group_score(a1, a2, r.bias != nullptr), g));
  }
  std::uint32_t allowed = 0;
  for (int i = 0; i < r.top_groups; ++i) allowed |= 1u << key_expert(kept[i]);
  return allowed;
}

/// Whether expert e lies in the kept groups.
LYNX_HD bool router_allows(std::uint32_t allowed, int e, int n, const model_router& r) {
  return allowed >> (e / (n / r.num_groups)) & 1u;
}

/// The model's choice for one row from its choice scores c: the top-k keys logit_key(c[e], e)
/// inside the kept groups, in choice order (taken[0] is the model's first choice).
LYNX_HD void router_choice(const float* c, int n, int k, const model_router& r, std::uint32_t allowed,
                           std::uint64_t* taken) {
  const int size = n / r.num_groups;
  topk_clear(taken, k);
  for (int g = 0; g < r.num_groups; ++g)
    if (allowed >> g & 1u)
      for (int e = g * size; e < (g + 1) * size; ++e) topk_push(taken, k, logit_key(c[e], e));
}

/// Chosen experts' keys (any order) re-keyed by their logits, descending: the order in which
/// chosen_weights sums and emit_row writes.
template <class T>
LYNX_HD void by_logit(const T* row, const std::uint64_t* chosen, int k, std::uint64_t* best) {
  topk_clear(best, k);
  for (int i = 0; i < k; ++i) {
    const int e = key_expert(chosen[i]);
    topk_push(best, k, logit_key(load_logit(row, e), e));
  }
}

/// What emit_row's (renormalize, mass) become with a routed scaling factor: the weights' last
/// factor is the scaling (renormalized) or the mass times it, in one rounding (a tiny mass,
/// topk_mass, stays tiny: its negation carries through). Without one they are unchanged, so
/// plain routers' weights stay bitwise what they were.
struct emit_scale {
  bool renormalize;
  float mass;
};
LYNX_HD emit_scale scaled_emit(const route_params& p, float mass) {
  if (p.router.scaling == 1.0f) return {p.renormalize, mass};
  return {false, (p.renormalize ? 1.0f : mass) * p.router.scaling};
}

/// SPEC §5: the ids a non-voting row gets: the k lowest ids of the set the batch loads,
/// filled up with the lowest other ids. `loaded` is a 0/1 flag per expert.
template <class Flag>
LYNX_HD void pad_ids(const Flag* loaded, int n, int k, int* out) {
  int c = 0;
  for (int e = 0; e < n && c < k; ++e)
    if (loaded[e]) out[c++] = e;
  for (int e = 0; e < n && c < k; ++e)
    if (!loaded[e]) out[c++] = e;
}

}  // namespace detail
}  // namespace lynx

namespace lynx {
namespace detail {

/// Writes one routed row in SPEC §3.3's order: descending weight, then ascending id. The
/// weights are bitwise the same on host and device (exp_f32), so the order is too.
template <class T, class IdT>
LYNX_HD void emit_row(const T* row, const std::uint64_t* chosen, int k, scoring s, bool renormalize,
                      float mass, IdT* ids, float* weights) {
  float w[max_top_k];
  int id[max_top_k];
  chosen_weights(row, chosen, k, s, renormalize, mass, w);
  // chosen is in logit order, so the weights usually are in order already (not always: two
  // logits can round to one weight); then one pass that checks it replaces the sort.
  bool in_order = true;
  for (int i = 0; i < k; ++i) id[i] = key_expert(chosen[i]);
  for (int i = 1; i < k; ++i) in_order &= w[i - 1] > w[i] || (w[i - 1] == w[i] && id[i - 1] < id[i]);
  if (!in_order)
    for (int i = 1; i < k; ++i) {  // insertion sort
      const float wi = w[i];
      const int ei = id[i];
      int j = i;
      while (j > 0 && (w[j - 1] < wi || (w[j - 1] == wi && id[j - 1] > ei))) {
        w[j] = w[j - 1];
        id[j] = id[j - 1];
        --j;
      }
      w[j] = wi;
      id[j] = ei;
    }
  for (int i = 0; i < k; ++i) {
    ids[i] = static_cast<IdT>(id[i]);
    weights[i] = w[i];
  }
}

/// Writes a non-voting row (SPEC §5): the pad ids, or the sentinel, with weight 0.
template <class IdT>
LYNX_HD void emit_pad_row(const int* pad, int k, bool use_sentinel, int sentinel, IdT* ids,
                          float* weights) {
  for (int i = 0; i < k; ++i) {
    ids[i] = static_cast<IdT>(use_sentinel ? sentinel : pad[i]);
    weights[i] = 0.0f;
  }
}

}  // namespace detail
}  // namespace lynx
