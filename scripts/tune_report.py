"""Prints the GPU calibrations mixtune cached (compute.gemm_tile and
compute.split_dkv: auto): for each, the shapes it timed and every
candidate's time a step and per shape, with TFLOP/s per GEMM shape.

Usage: python3 scripts/tune_report.py [DIR]   (DIR: ~/.cache/mixtune/gpu)
"""
import glob
import json
import os
import re
import sys

base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(base, "mixtune", "gpu")
for path in sorted(glob.glob(os.path.join(d, "*.json"))):
    with open(path) as f:
        c = json.load(f)
    shapes = [k[len("shape "):] for k in c["key_fields"] if k.startswith("shape ")]
    shapes += [k for k in c["key_fields"] if k.startswith("attention ")]
    print(f"{os.path.basename(path)} (measured {c['measured']})")
    for k in c["key_fields"]:
        if k.startswith(("device ", "driver ")):
            print("  " + k)
    for i, s in enumerate(shapes):
        print(f"  [{i}] {s}")
    for r in sorted(c["results"], key=lambda r: (bool(r.get("error")), r.get("ms_per_step", 0))):
        if r.get("error"):
            print(f"  {r['tile']:>16}: left out: {r['error']}")
            continue
        per = []
        for i, ms in enumerate(r.get("ms_per_product", [])):
            m = re.match(r"(\d+)×(\d+)×(\d+)", shapes[i]) if i < len(shapes) else None
            tf = f" {2 * int(m[1]) * int(m[2]) * int(m[3]) / ms / 1e9:.0f}T" if m and ms > 0 else ""
            per.append(f"[{i}] {ms:.3g}ms{tf}")
        print(f"  {r['tile']:>16}: {r['ms_per_step']:.4g} ms a step, {r.get('tflops', 0):.3g} TFLOP/s; " + ", ".join(per))
