#!/usr/bin/env python3
"""The source folders form layers, each including only the ones before it:

    contract/  what host code and kernels share (launch arguments, schedule layout, mask rule)
    plan/      the planner
    cpu/ cuda/ the backends (neither includes the other)
    core/      the API objects
    mla/       the MLA step (mla/cuda/ holds its CUDA parts)

Exits 1 and names every #include that runs back up, or across the two backends.

    python3 tests/layers/check_layers.py [SRC_DIR]
"""
import os
import re
import sys

RANK = {"contract": 0, "plan": 1, "cpu": 2, "cuda": 2, "core": 3, "mla": 4}
INCLUDE = re.compile(r'\s*#\s*include\s+"([a-z0-9_]+)/')


def violations(src):
    found = []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            path = os.path.join(root, name)
            layer = os.path.relpath(path, src).split(os.sep)[0]
            if layer not in RANK:
                found.append(f"{path}: folder '{layer}' is in no layer")
                continue
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) not in RANK or m.group(1) == layer:
                        continue
                    target = m.group(1)
                    if RANK[target] > RANK[layer] or RANK[target] == RANK[layer]:
                        found.append(f"{path}:{n}: {layer}/ includes {target}/: {line.strip()}")
    return found


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "src")
    bad = violations(src)
    for line in bad:
        print(line)
    print(f"check_layers: {len(bad)} include(s) against the layer order" if bad else "check_layers: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
