#pragma once
// What every device test shares: whether a CUDA device is present, the skip without one, and
// which launcher a test calls.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace lynx_test {

/// Which launcher a device test calls.
enum class entry { route, topk };

inline bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

/// What a stream capture of one call recorded: the call's result (or the stream's creation's),
/// the capture's end (or a failure to read the graph), and the graph's node types. supported:
/// false where the runtime cannot capture graphs (the test skips).
struct captured_call {
  bool supported = true;
  cudaError_t called = cudaSuccess, ended = cudaSuccess;
  std::vector<cudaGraphNodeType> nodes;
};

/// Captures call(stream) (it returns a cudaError_t) on a stream of its own. The capture ends
/// before the caller asserts anything (a device_vector freed during a capture would fail).
template <class Call>
captured_call capture_call(Call call) {
  captured_call r;
  cudaStream_t stream;
  if ((r.called = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) return r;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream);
    r.supported = false;
    return r;
  }
  r.called = call(stream);
  cudaGraph_t graph = nullptr;
  r.ended = cudaStreamEndCapture(stream, &graph);
  cudaStreamDestroy(stream);
  if (!graph) return r;
  std::size_t count = 0;
  cudaError_t listed = cudaGraphGetNodes(graph, nullptr, &count);
  std::vector<cudaGraphNode_t> nodes(count);
  if (listed == cudaSuccess && count) listed = cudaGraphGetNodes(graph, nodes.data(), &count);
  for (std::size_t i = 0; listed == cudaSuccess && i < count; ++i) {
    cudaGraphNodeType type;
    listed = cudaGraphNodeGetType(nodes[i], &type);
    if (listed == cudaSuccess) r.nodes.push_back(type);
  }
  if (listed != cudaSuccess) r.ended = listed;  // the graph could not be read: the check fails
  cudaGraphDestroy(graph);
  return r;
}

}  // namespace lynx_test

#define SKIP_WITHOUT_DEVICE() \
  if (!lynx_test::has_device()) GTEST_SKIP() << "no CUDA device: device tests run on the accelerator machine"
