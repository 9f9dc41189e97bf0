#!/usr/bin/env bash
# The device check: on a machine with an NVIDIA GPU, build, run the device tests, run
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over them, run the benchmark
# suite and the examples on the GPU, and write everything (JSON and logs) to the folder given
# as the argument. Sized for about 8 minutes on an H200. Exit status: 0 when every step passed.
#
#   scripts/device-check.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/device-check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
status=0
step() {  # step NAME SECONDS CMD...: runs CMD with a time limit, logs it, records pass/fail
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$out/summary.txt"
  [ "$rc" -eq 0 ] || status=1
  return $rc
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
  nvcc --version | tail -1
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
: >"$out/summary.txt"

step configure 120 cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}"
step build 300 cmake --build build-device -j"$(nproc)"

tests=build-device/tests/lynx_device_tests
step device_tests 120 "$tests" --gtest_output=json:"$out/device_tests.json"
step host_tests 120 build-device/tests/lynx_host_tests --gtest_output=json:"$out/host_tests.json"
# The sanitizers on every device test (memcheck) and on a representative subset (the others
# are slower): graph replay, the policies and the stages cover every kernel.
subset='Device.GraphReplay*:Device.PoliciesMatchHost:Device.StagesMatchHostBitwise:Device.RouteMatchesHostBf16Int32'
step sanitizer_memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 1 "$tests"
step sanitizer_racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" --gtest_filter="$subset"
step sanitizer_initcheck 120 compute-sanitizer --tool initcheck --error-exitcode 1 "$tests" --gtest_filter="$subset"
step sanitizer_synccheck 120 compute-sanitizer --tool synccheck --error-exitcode 1 "$tests" --gtest_filter="$subset"

step bench_device 240 build-device/bench/lynx_bench_device --benchmark_min_time=0.05 \
  --benchmark_out="$out/bench_device.json" --benchmark_out_format=json
step bench_host 120 build-device/bench/lynx_bench_host --benchmark_filter='/(16|64)$' --benchmark_min_time=0.05 \
  --benchmark_out="$out/bench_host.json" --benchmark_out_format=json

# The main job on the GPU and on the host path must report the same measures.
step replay_device 60 build-device/examples/lynx_replay --batch-size 16 --json
step replay_host 60 build-device/examples/lynx_replay --batch-size 16 --json --host
dev=$(tail -1 "$out/replay_device.log" | sed 's/"backend": "[a-z]*", //')
host=$(tail -1 "$out/replay_host.log" | sed 's/"backend": "[a-z]*", //')
if [ "$dev" = "$host" ]; then echo "replay_same_measures         rc=0" | tee -a "$out/summary.txt"
else echo "replay_same_measures         rc=1" | tee -a "$out/summary.txt"; status=1; fi
if [ -x build-device/examples/moe_decode_layer ]; then
  step moe_decode_layer 180 build-device/examples/moe_decode_layer --json "$out/moe_decode_layer.json"
fi

echo "overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)" | tee -a "$out/summary.txt"
exit $status
