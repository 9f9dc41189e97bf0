#pragma once
// What every device test shares: whether a CUDA device is present, the skip without one, and
// which launcher a test calls.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace lynx_test {

/// Which launcher a device test calls.
enum class entry { route, topk };

inline bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace lynx_test

#define SKIP_WITHOUT_DEVICE() \
  if (!lynx_test::has_device()) GTEST_SKIP() << "no CUDA device: device tests run on the accelerator machine"
