#!/usr/bin/env python3
"""Where a graph-replayed MLA step's device time goes, from compare_mla.py --timeline's JSON.

Per profiled path: each kernel's total and mean time (names shortened), and the idle time between
consecutive device activities by the pair of kernels around it, summed over every step of the pass.

    python3 bench/diagnostics/timeline_kernels.py timeline.json [--top 12]
"""
import argparse
import json
import re


def short(name):
    """A kernel's name without template arguments and parameter lists, for grouping."""
    n = re.sub(r"\(.*", "", name)
    n = re.sub(r"<.*", "", n)
    return n.replace("void ", "").strip()[:48] or name[:48]


def summarize(p, top):
    per, gaps = {}, {}
    busy = idle = 0.0
    nsteps = 0
    for st in p["steps"].values():
        acts = sorted(st["activities"], key=lambda a: a[1])
        nsteps += 1
        end = None
        prev = None
        for name, start, dur in acts:
            k = short(name)
            c = per.setdefault(k, [0, 0.0])
            c[0] += 1
            c[1] += dur
            if end is not None and start > end:
                pair = f"{prev} -> {k}"
                gaps[pair] = gaps.get(pair, 0.0) + (start - end)
                idle += start - end
            busy += dur
            end = start + dur if end is None else max(end, start + dur)
            prev = k
    lines = [f"{p['path']}: {nsteps} steps, kernel time {busy / 1e3:.2f} ms, idle between activities "
             f"{idle / 1e3:.2f} ms"]
    lines.append(f"  {'kernel':<48} {'count':>6} {'total ms':>9} {'mean us':>8} {'share':>6}")
    for k, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {k:<48} {n:6d} {us / 1e3:9.3f} {us / n:8.2f} {100 * us / max(busy, 1e-9):5.1f}%")
    lines.append(f"  idle by the pair around it (top {top}):")
    for pair, us in sorted(gaps.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {us / 1e3:7.3f} ms  {pair}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv)
    doc = json.load(open(a.timeline))
    for p in doc["passes"]:
        print(summarize(p, a.top))
        print()


if __name__ == "__main__":
    main()
