#!/usr/bin/env python3
"""Fails when a Lynx kernel has a stack frame or local memory (issue: no local memory on the hot
path). Reads `cuobjdump -res-usage` of the given binaries; every lynx:: (and lynx_examples::) kernel of every arch
listed with --arch must show STACK:0 and LOCAL:0. The generic fallback tier (MaxN 1024, K 32)
may use the stack: it is reported, not failed.

    check_resources.py --arch sm_80 --arch sm_90 BINARY...
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

GENERIC = "ILi1024ELi32E"  # the generic tier's template arguments in a mangled kernel name


def find_cuobjdump():
    for c in [shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]:
        if c and os.access(c, os.X_OK):
            return c
    # PyPI's nvidia-cuda-cuobjdump (the toolkit here lacks it): site-packages/nvidia/*/bin.
    try:
        import nvidia  # noqa: F401
        for root in nvidia.__path__:
            for c in glob.glob(os.path.join(root, "*", "bin", "cuobjdump")):
                if os.access(c, os.X_OK):
                    return c
    except ImportError:
        pass
    return None


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
        return out.split("\n")
    except OSError:
        return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", action="append", required=True)
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    tool = find_cuobjdump()
    if not tool:
        print("check_resources: no cuobjdump (scripts/install-deps.sh installs nvidia-cuda-cuobjdump)")
        return 1
    failed = False
    for binary in args.binaries:
        text = subprocess.run([tool, "-res-usage", binary], capture_output=True, text=True, check=True).stdout
        arch, seen = None, {}
        rows = []
        lines = text.split("\n")
        for i, line in enumerate(lines):
            m = re.match(r"arch = (sm_\d+)", line)
            if m:
                arch = m.group(1)
            m = re.match(r"\s*Function (\S+):", line)
            if m and i + 1 < len(lines):
                name = m.group(1)
                usage = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", lines[i + 1]))
                if name.startswith(("_ZN4lynx", "_ZN13lynx_examples")):  # the library and its examples
                    rows.append((arch, name, int(usage.get("REG", -1)), int(usage.get("STACK", 0)), int(usage.get("LOCAL", 0))))
                    seen[arch] = seen.get(arch, 0) + 1
        for a in args.arch:
            if not seen.get(a):
                print(f"{binary}: no lynx kernel for {a}")
                failed = True
        names = demangle([r[1] for r in rows])
        for (a, name, reg, stack, local), pretty in zip(rows, names):
            if a not in args.arch or (stack == 0 and local == 0):
                continue
            generic = GENERIC in name
            print(f"{'note' if generic else 'FAIL'}: {a} {pretty}: STACK {stack} LOCAL {local} REG {reg}"
                  + (" (the generic fallback tier may use the stack)" if generic else ""))
            failed |= not generic
        print(f"{binary}: {sum(seen.get(a, 0) for a in args.arch)} lynx kernels checked on {', '.join(args.arch)}")
    print("check_resources:", "FAILED" if failed else "every dispatched kernel has no stack and no local memory")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
