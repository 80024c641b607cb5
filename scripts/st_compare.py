#!/usr/bin/env python3
"""Compares two safetensors files tensor by tensor (scripts/gpu-check.sh: a GPU run's checkpoint
against the CPU run's).

Usage: st_compare.py A B TOL [--skip REGEX]
For each tensor both files hold (F32 or BF16), the largest |a - b| / max(1, |b|); exits 1 if one
exceeds TOL, a tensor is missing from one file, or a value is not finite. Plain Python (struct and
array), no numpy: the files it reads are small models' checkpoints.
"""
import array
import json
import math
import re
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = body[lo:hi]
        if info["dtype"] == "F32":
            out[name] = array.array("f", raw).tolist()
        elif info["dtype"] == "BF16":
            h = array.array("H", raw)
            out[name] = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in h]
    return out


def main():
    a_path, b_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    skip = re.compile(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--skip" else None
    a, b = load(a_path), load(b_path)
    worst, worst_name, bad = 0.0, "", False
    for name in sorted(set(a) | set(b)):
        if skip and skip.search(name):
            continue
        if name not in a or name not in b:
            print(f"st_compare: {name} is in only one file")
            bad = True
            continue
        x, y = a[name], b[name]
        if len(x) != len(y):
            print(f"st_compare: {name}: {len(x)} values against {len(y)}")
            bad = True
            continue
        d = 0.0
        for u, v in zip(x, y):
            if not (math.isfinite(u) and math.isfinite(v)):
                print(f"st_compare: {name}: a value is not finite ({u}, {v})")
                bad = True
                break
            d = max(d, abs(u - v) / max(1.0, abs(v)))
        if d > worst:
            worst, worst_name = d, name
    print(f"st_compare: {len(a)} tensors, largest relative difference {worst:.3g} ({worst_name}), "
          f"bound {tol:g}")
    sys.exit(1 if bad or worst > tol else 0)


if __name__ == "__main__":
    main()
