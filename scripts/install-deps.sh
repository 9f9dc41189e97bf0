#!/usr/bin/env bash
# Installs what the build needs from Debian's packages when it is missing (the CUDA toolkit
# itself comes with the machine image). Safe to run repeatedly.
set -euo pipefail
need=()
for pkg in cmake g++ make libgtest-dev libbenchmark-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "error: the CUDA toolkit (nvcc) is not installed; Lynx needs CUDA 12 or later" >&2
  exit 1
fi
# cuobjdump (scripts/check_resources.py reads its -res-usage): the toolkit here lacks it; PyPI's
# nvidia-cuda-cuobjdump has it.
if ! command -v cuobjdump >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
   ! python3 -c 'import glob, nvidia, os, sys; sys.exit(0 if any(glob.glob(os.path.join(p, "*", "bin", "cuobjdump")) for p in nvidia.__path__) else 1)' 2>/dev/null; then
  echo "installing: nvidia-cuda-cuobjdump (PyPI)"
  python3 -m pip install -q "nvidia-cuda-cuobjdump>=13,<14"
fi
