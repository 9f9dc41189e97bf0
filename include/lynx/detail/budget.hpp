#pragma once
// The budget policy's pieces that host and device share, so both take the same greedy steps.
//
// Objective: the batch's retained router mass, sum over voting tokens t of the mass of t's
// top-k inside K, each token normalised by its plain top-k mass (so the mean is SPEC §6's
// retained_mass). It is a sum of weighted uniform-matroid ranks, hence monotone submodular,
// and greedy is within 1 - 1/e of the best K of each size.

#include <cstdint>

#include "config.hpp"
#include "row_math.hpp"

namespace lynx {
namespace detail {

/// The router's preference for an expert, up to a per-row factor: exp(l - m), or sigmoid(l)
/// scaled the same way (scaled_sigmoid), so that shares of tiny sigmoids do not underflow.
LYNX_HD float activation(float l, float m, scoring s) {
  return s == scoring::sigmoid ? scaled_sigmoid(l, m) : exp_f32(l - m);
}

/// A voting row's preference for an expert in the budget's shares, from the score that ranks
/// it (l: the logit, or a model router's choice score, -inf outside the row's kept groups) and
/// the row's first (m): activation(l, m), or with a correction bias max(l, 0), the choice
/// score's own mass (docs/ROUTERS.md §2). A share is this over its sum on the row's plain top-k.
LYNX_HD float share_value(float l, float m, scoring s, bool biased) {
  return biased ? select_f32(l > 0.0f, l, 0.0f) : activation(l, m, s);
}

/// A token's share of expert e: activation / the sum of activations over its plain top-k.
template <class T>
LYNX_HD float plain_activation_sum(const T* row, float m, const std::uint64_t* plain, int k,
                                   scoring s) {
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) sum += activation(load_logit(row, key_expert(plain[i])), m, s);
  return sum;
}

/// A gain, in units of 2^-32 of router mass: each term (a float share difference) is truncated
/// to that grid and the terms are summed in 64-bit integers. An integer sum is exact, so it is
/// the same in any order: the device sums and updates gains in parallel (a step updates only
/// the gains of the tokens it moved) and still agrees bitwise with the host. Terms of at least
/// 2^-8 are exact on the grid (a float has 24 bits); smaller ones lose what lies below 2^-32.
using gain_t = std::uint64_t;

/// x >= 0 on the grid (truncated; NaN and x <= 0 give 0). Shares are at most 1; the clamp, far
/// above that, only keeps the conversion defined.
LYNX_HD gain_t to_gain(float x) {
  const float c = x < 1073741824.0f ? x : 1073741824.0f;  // 2^30
  return x > 0.0f ? static_cast<gain_t>(c * 4294967296.0f /* 2^32 */) : gain_t{0};
}

/// What adding an expert with this share gives a token whose k best shares inside K end in
/// `kth` (0 while it has fewer than k there): share - kth when positive, on the gain grid.
/// (A difference of distinct floats is never 0 or of the wrong sign, and NaN gives 0.)
LYNX_HD gain_t share_gain(float share, float kth) { return to_gain(share - kth); }

/// Inserts a share into a token's descending list of its k best shares inside K.
LYNX_HD void share_insert(float* top, int k, float share) {
  if (!(share > top[k - 1])) return;
  int i = k - 1;
  while (i > 0 && top[i - 1] < share) {
    top[i] = top[i - 1];
    --i;
  }
  top[i] = share;
}

/// One slot of share_insert without its loop, for a share above the list's last: slot i takes
/// max(old i, min(old i - 1, share)), slot 0 (first) max(old 0, share). Every slot reads only
/// the old list, so the slots of a list can be taken in any order, or a lane each.
LYNX_HD float share_slot(float old, float old_above, bool first, float share) {
  const float above = first ? share : (old_above < share ? old_above : share);
  return old > above ? old : above;
}

/// share_insert for a list of k <= K shares (share above its last) at top[0], top[stride], ...,
/// slot by slot (share_slot), the last first: each slot reads the old one above it before
/// that one is written, so no copy of the list is needed (registers, in a kernel). Returns the
/// new k-th.
template <int K>
LYNX_HD float share_insert_k(float* top, int stride, int k, float share) {
  float kth = 0.0f;
  LYNX_UNROLL
  for (int i = K - 1; i >= 0; --i) {
    if (i >= k) continue;
    const float v = share_slot(top[i * stride], i == 0 ? 0.0f : top[(i - 1) * stride], i == 0, share);
    top[i * stride] = v;
    if (i == k - 1) kth = v;
  }
  return kth;
}

/// The size limit for count modes (mass mode: no limit). Never below k, so every token finds
/// k experts inside K.
LYNX_HD int budget_limit(int budget_experts, float budget_fraction, int plain_unique, int n,
                         int k) {
  int limit = n;
  if (budget_experts > 0) limit = budget_experts;
  if (budget_fraction > 0.0f)
    limit = static_cast<int>(budget_fraction * static_cast<float>(plain_unique) + 0.5f);
  return limit < k ? k : (limit > n ? n : limit);
}

/// K's fill when the greedy's gains vanish while K holds fewer than k experts (every share left
/// underflows): each voting row's plain top-k in turn, in rank order, until K holds k. Then
/// every row finds its k experts inside K (so a count limit holds), and a single token keeps
/// its plain top-k. This adds one row's experts (`plain`, k keys) and returns K's new size.
template <class Flag>
LYNX_HD int fill_from_plain(const std::uint64_t* plain, int k, Flag* in_active, int size) {
  for (int r = 0; r < k && size < k; ++r) {
    const int e = key_expert(plain[r]);
    if (!in_active[e]) {
      in_active[e] = 1;
      ++size;
    }
  }
  return size;
}

/// Whether the greedy's K surely holds a batch's plain top-k when a single token votes, from
/// the shares of its plain k-th (kth) and of its best expert outside the plain top-k (next: the
/// row's (k + 1)-th, shares being monotone in the logit; 0 if there is none). Until K holds k
/// experts the token's list is not full, so a gain is the share alone: if the plain k-th's gain
/// is above next's, the greedy takes the plain top-k (in some order) before any other expert,
/// and K only grows after; if next has no gain, no expert outside is ever taken, and
/// fill_from_plain completes K with the plain top-k. K0 (the pinned top-k, or the top-1 anchor)
/// lies inside the plain top-k at one token. Either way the token's top-k inside K is its plain
/// top-k. (Shares that tie only on the gain grid fail the test: the greedy may then take a
/// lower id with a smaller logit.)
LYNX_HD bool one_row_keeps_plain(float kth, float next) {
  const gain_t g = to_gain(next);
  return g == 0 || to_gain(kth) > g;
}

/// The greedy's order on candidates: the larger gain, then the lower id.
LYNX_HD bool gain_before(gain_t a, int ea, gain_t b, int eb) { return a > b || (a == b && ea < eb); }

}  // namespace detail
}  // namespace lynx
