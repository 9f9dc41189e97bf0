// Does compute-sanitizer's racecheck follow a named barrier that only some warps use?
// Warps 0-3 take `steps` steps synchronized by `bar.sync 1, 128` (as block_budget's greedy
// does); then every warp meets at __syncthreads, thread 0 writes a flag, __syncthreads, and
// every warp reads it: a correct program. On an H200 (CUDA 13.0, 2026-12-04) racecheck reports
// a hazard between the flag's write and read for every steps >= 1 and none for steps = 0 or
// without the named barriers, while every result is right: racecheck loses the __syncthreads
// ordering once a subset of warps has used a named barrier. scripts/device-check.sh runs this
// to tell that false positive (block_decide's flag after the budget greedy) from real hazards.
//
//   nvcc -arch=native -lineinfo scripts/racecheck_named_barrier.cu -o probe
//   compute-sanitizer --tool racecheck ./probe
#include <cuda_runtime.h>

#include <cstdio>

template <bool Named>
__global__ void __launch_bounds__(1024, 1) probe(int steps, int* out) {
  __shared__ int flag, best[4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < 4) {
    for (int s = 0; s < steps; ++s) {
      if (lane == 0) best[warp] = s * 7 + warp;
      if (Named) asm volatile("bar.sync 1, 128;" ::: "memory");
      int b = 0;
      if (Named) {
        for (int w = 0; w < 4; ++w) b += best[w];
      } else {
        b = best[warp];
      }
      if (Named) asm volatile("bar.sync 1, 128;" ::: "memory");
      if (lane == 0 && s == steps - 1) out[32 + warp] = b;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flag = 3 + steps;
  __syncthreads();
  if (lane == 0) out[warp] = flag;
}

int main() {
  int* d = nullptr;
  if (cudaMalloc(&d, 64 * sizeof(int)) != cudaSuccess) return 2;
  int wrong = 0;
  for (const int steps : {0, 1, 5}) {
    for (const bool named : {true, false}) {
      int h[64];
      named ? probe<true><<<1, 1024>>>(steps, d) : probe<false><<<1, 1024>>>(steps, d);
      cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
      for (int w = 0; w < 32; ++w) wrong += h[w] != 3 + steps;
      std::printf("%s barrier, %d steps: flag read by warp 31 = %d (want %d)\n", named ? "named" : "no named", steps,
                  h[31], 3 + steps);
    }
  }
  std::printf("%s\n", wrong ? "WRONG RESULTS" : "results right");
  return wrong != 0 || cudaDeviceSynchronize() != cudaSuccess;
}
