#!/usr/bin/env python3
"""Issue 10's targets from a lynx_bench_device JSON: for each model shape with N <= 256 and each
T <= 64, the device time of topk_route, route with the paper's policy (route's own choice of
path, and each path forced: grid, fused one-block), route with the default budget policy, and
the ratios the targets name:

  paper <= 5 us, paper <= 1.5x topk_route, default <= 2x paper.

  scripts/bench_targets.py bench_device.json [--dtype fp32|bf16] [--markdown]
"""
import argparse
import json
import os
import re

SCALE_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
OPS = ("route_lynx", "route_grid", "route_fused", "route_default", "topk_route")


def load(path):
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:  # a run cut short: keep the benchmarks written so far
        cut = text.rfind("\n    },")
        doc = json.loads(text[:cut] + "\n    }\n  ]\n}\n") if cut > 0 else {}
    times = {}
    for b in doc.get("benchmarks", []):
        parts = b["name"].split("/")
        if len(parts) < 5 or parts[0] != "device" or parts[1] not in OPS:
            continue
        key = (parts[1], parts[2], parts[3], int(parts[4]))
        if b.get("error_occurred"):
            times[key] = None
        else:
            times[key] = b["real_time"] * SCALE_TO_US[b.get("time_unit", "ns")]
    return doc.get("context", {}), times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    context, times = load(a.json)
    shapes = {k[1] for k in times}
    # N and k come from the shape names in bench_shapes.hpp; read them from the header.
    dims = {}
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "bench_shapes.hpp")) as f:
        for name, n, k in re.findall(r'\{"([^"]+)", (\d+), (\d+),', f.read()):
            dims[name] = (int(n), int(k))
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    ratio = lambda x, y: "-" if x is None or y is None else f"{x / y:.2f}x"
    sep = " | " if a.markdown else "  "
    head = ["shape", "N", "k", "T", "topk_route", "paper", "grid", "fused", "default", "paper/topk", "default/paper"]
    print(f"# {context.get('date', '')} {a.dtype}; times in us per call (CUDA graph of launches, CUDA events)")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(sep.join(f"{h:>13}" for h in head))
    misses = 0
    for shape in sorted(shapes, key=lambda s: dims.get(s, (0, 0))):
        n, k = dims.get(shape, (0, 0))
        if n > 256:
            continue
        for t in (1, 4, 16, 32, 64):
            g = lambda op: times.get((op, shape, a.dtype, t))
            topk, paper, grid, fused = g("topk_route"), g("route_lynx"), g("route_grid"), g("route_fused")
            default = g("route_default")
            if topk is None and paper is None:
                continue
            ok = paper is not None and topk is not None and paper <= 5 and paper <= 1.5 * topk and (
                default is not None and default <= 2 * paper)
            misses += not ok
            row = [shape, str(n), str(k), str(t), fmt(topk), fmt(paper), fmt(grid), fmt(fused), fmt(default),
                   ratio(paper, topk), ratio(default, paper)]
            print(("| " + " | ".join(row) + " |") if a.markdown else sep.join(f"{c:>13}" for c in row))
    print(f"# rows missing a target (paper <= 5 us and <= 1.5x topk_route, default <= 2x paper): {misses}")


if __name__ == "__main__":
    main()
