#pragma once
// Host vectors to and from thrust device vectors, for the device tests.
#include <cuda_runtime.h>
#include <thrust/device_vector.h>

#include <vector>

namespace lynx_test {

template <class T>
thrust::device_vector<T> to_device(const std::vector<T>& v) {
  thrust::device_vector<T> d(v.size());
  if (!v.empty()) cudaMemcpy(thrust::raw_pointer_cast(d.data()), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& d) {
  std::vector<T> v(d.size());
  if (!v.empty()) cudaMemcpy(v.data(), thrust::raw_pointer_cast(d.data()), v.size() * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

}  // namespace lynx_test
