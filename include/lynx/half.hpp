#pragma once
// __half and __nv_bfloat16 logits, on the host path and in the kernels (lynx.cuh includes this).
// A host-only consumer includes it only if it routes such logits.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "detail/logit_types.hpp"

namespace lynx {

template <>
struct logit_traits<__half> {
  LYNX_HD static float to_float(__half x) { return __half2float(x); }
};

template <>
struct logit_traits<__nv_bfloat16> {
  LYNX_HD static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
};

}  // namespace lynx
