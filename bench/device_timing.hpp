#pragma once
// Device timing shared by the device benchmarks: the operation is captured into a CUDA graph of
// `reps` back-to-back launches, replayed, and timed with CUDA events (manual time per launch),
// which is how an engine runs it and removes launch overhead at the microsecond scale.

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <functional>

namespace lynx_bench {

inline constexpr int reps = 20;

inline bool has_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct device_buffer {
  void* p = nullptr;
  explicit device_buffer(std::size_t bytes) { cudaMalloc(&p, bytes ? bytes : 1); }
  ~device_buffer() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// Times `op(stream)` (which must be graph-capturable) per launch. `verify`, where given, runs
// once after the timing and returns null when the last call's results are right (against the
// host path), else why not: a kernel that routes wrongly must not report a time.
inline void time_graph(benchmark::State& state, const std::function<cudaError_t(cudaStream_t)>& op,
                       const std::function<const char*()>& verify = {}) {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (op(stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {  // warm-up, checks
    state.SkipWithError("operation failed");
    return;
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  cudaError_t captured = cudaSuccess;
  for (int i = 0; i < reps && captured == cudaSuccess; ++i) captured = op(stream);
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (captured != cudaSuccess || ended != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    state.SkipWithError("graph capture failed");  // a launcher that cannot be captured is a bug
    if (ended == cudaSuccess) cudaGraphDestroy(graph);
    cudaGetLastError();
    cudaStreamDestroy(stream);
    return;
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaGraphLaunch(exec, stream);
  cudaStreamSynchronize(stream);
  // One replay is `reps` iterations (KeepRunningBatch), so the reported time is per launch and
  // --benchmark_min_time counts device time, not a twentieth of it.
  while (state.KeepRunningBatch(reps)) {
    cudaEventRecord(start, stream);
    const cudaError_t launched = cudaGraphLaunch(exec, stream);
    cudaEventRecord(stop, stream);
    float ms = 0;
    if (launched != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      state.SkipWithError("graph replay failed");  // not a time of 0
      break;
    }
    state.SetIterationTime(ms / 1e3);
  }
  if (!state.error_occurred() && verify)
    if (const char* why = verify()) state.SkipWithError(why);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace lynx_bench
