#pragma once
// Which logit types a row may hold, and their conversion to fp32 (SPEC §2: all arithmetic is in
// fp32). float is built in; lynx/half.hpp adds __half and __nv_bfloat16, so that a host-only
// consumer with float logits needs no CUDA half-precision header.

#include "config.hpp"

namespace lynx {

/// Specialized for every logit type: `static float to_float(T)`, on host and device.
template <class T>
struct logit_traits {
  static_assert(sizeof(T) == 0,
                "unsupported logit type: use float, or include <lynx/half.hpp> for __half / __nv_bfloat16");
};

template <>
struct logit_traits<float> {
  LYNX_HD static float to_float(float x) { return x; }
};

namespace detail {
template <class T>
LYNX_HD float to_float(T x) {
  return logit_traits<T>::to_float(x);
}
}  // namespace detail

}  // namespace lynx
