#!/usr/bin/env bash
# Builds, on the CPU machine, the six programs scripts/device-check.sh runs, for one GPU
# architecture as machine code only (no PTX: the binaries must fit the device tool's 64 MiB
# carry), with -lineinfo for the sanitizers' and ncu's source lines. Then prints them, one per
# line, with their total size: pass them as the device run's carry, and run
#
#   LYNX_PREBUILT=BUILD_DIR scripts/device-check.sh "$OUT/check"
#
# there (building on the device machine takes most of its 10-minute command limit).
#
#   scripts/device-prebuild.sh [BUILD_DIR [ARCH]]     defaults: build-device 90 (H100, H200)
#
# About 30 CPU-minutes on two cores: start it as soon as a session knows it has a GPU.
set -euo pipefail
b=${1:-build-device}
arch=${2:-90}
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
programs=(tests/lynx_device_tests tests/lynx_host_tests bench/lynx_bench_device bench/lynx_bench_host
  examples/lynx_replay examples/moe_decode_layer)  # as device-check.sh runs them
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch-real" \
  -DCMAKE_CUDA_FLAGS=-lineinfo >/dev/null
cmake --build "$b" -j"$(nproc)" --target "${programs[@]##*/}"
files=("${programs[@]/#/$b/}")
printf '%s\n' "${files[@]}"
total=$(du -cb "${files[@]}" | tail -1 | cut -f1)
echo "total: $((total / 1048576)) MiB of the carry's 64"
[ "$total" -lt $((60 * 1048576)) ] || { echo "too large to carry" >&2; exit 1; }
