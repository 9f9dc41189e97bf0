#pragma once
// Runtime ISA dispatch for the host path (simdjson style). Host routines are written once, as
// forced-inline templates; each entry point instantiates them twice, plainly and inside a
// function compiled for AVX2 + FMA, and picks one per call from a cached CPUID check. The
// per-element math is the same fixed sequence of IEEE operations either way (every fma is an
// explicit fma_f32), so both versions give bitwise the same results; the AVX2 one is
// vectorized and has hardware fma where the other calls libm.

#include "../config.hpp"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define LYNX_HOST_DISPATCH 1
#define LYNX_HOST_INLINE inline __attribute__((always_inline))
#define LYNX_HOST_AVX2 __attribute__((target("avx2,fma,popcnt")))
#else
#define LYNX_HOST_DISPATCH 0
#define LYNX_HOST_INLINE inline
#define LYNX_HOST_AVX2
#endif

namespace lynx {
namespace host {
namespace detail {

/// Which instantiation a host routine is in: routines that have hand-written AVX2 pieces
/// (calls, not inlined: GCC does not inline a target function into a plain one) pick them by
/// this tag at compile time.
struct isa_portable {
  static constexpr bool avx2 = false;
};
struct isa_avx2 {
  static constexpr bool avx2 = true;
};

}  // namespace detail

/// Whether host calls take the AVX2 + FMA code: true where the CPU has them (and popcnt). Set it to false to
/// run the portable code (tests compare the two); results are bitwise the same.
inline bool& use_simd() {
#if LYNX_HOST_DISPATCH
  static bool enabled = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                        __builtin_cpu_supports("popcnt");
#else
  static bool enabled = false;
#endif
  return enabled;
}

}  // namespace host
}  // namespace lynx

/// Defines `body_dispatch(args)` over two instantiations of the forced-inline
/// `body(isa, args)`: one compiled for AVX2 + FMA, one portable.
#if LYNX_HOST_DISPATCH
#define LYNX_HOST_DISPATCHED(body)                                                           \
  template <class... A>                                                                      \
  LYNX_HOST_AVX2 auto body##_avx2(A... a) { return body(isa_avx2{}, a...); }                 \
  template <class... A>                                                                      \
  auto body##_portable(A... a) { return body(isa_portable{}, a...); }                        \
  template <class... A>                                                                      \
  auto body##_dispatch(A... a) {                                                             \
    return ::lynx::host::use_simd() ? body##_avx2(a...) : body##_portable(a...);             \
  }
#else
#define LYNX_HOST_DISPATCHED(body)                                                           \
  template <class... A>                                                                      \
  auto body##_dispatch(A... a) { return body(isa_portable{}, a...); }
#endif
